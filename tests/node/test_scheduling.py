"""Time and flow on one node: delayed and expiring tuples, dedup at write,
pausing a prefix, limits (docs/scheduling.md). Across nodes:
tests/replication/test_scheduling_cluster.py."""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import FrameType

import pytest

from forum import node as node_package
from forum.node.core.entries import EntryId, Tuple
from forum.node.core.errors import LimitExceeded
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import eventually

JOBS = Pattern(b"job/")


async def reopen(forum: Forum, cfg: StrandConfig, **kwargs: object) -> Forum:
    await forum.close()
    return Forum(await Strand.open(cfg), remote_delay=0, **kwargs)  # type: ignore[arg-type]


# -- delayed tuples ------------------------------------------------------------


async def test_a_delayed_tuple_is_invisible_until_due_then_live(forum: Forum) -> None:
    wid = await forum.write(b"job/later", delay=0.3)
    await forum.write(b"job/now")
    assert await forum.count(JOBS) == 1
    assert forum.stats().delayed == 1
    assert await forum.take(JOBS) == b"job/now"
    assert await forum.take(JOBS) is None and await forum.read(JOBS) is None
    assert await forum.reserve(JOBS, lease=5) is None
    got = await forum.take_entry(JOBS, timeout=5)  # a waiting take wakes when it falls due
    assert got is not None and got.id == wid
    assert got.props.due > 0 and forum.stats().delayed == 0


async def test_delayed_tuples_become_live_in_due_order(forum: Forum) -> None:
    now = time.time()
    await forum.write(b"job/3", not_before=now + 0.3)
    await forum.write(b"job/1", not_before=now + 0.1)
    await forum.write(b"job/2", delay=0.2)
    await eventually(lambda: forum.stats().delayed == 0, what="all three due")
    assert [await forum.take(JOBS) for _ in range(3)] == [b"job/1", b"job/2", b"job/3"]


async def test_a_not_before_in_the_past_is_live_at_once(forum: Forum) -> None:
    await forum.write(b"job/1", not_before=time.time() - 10)
    assert await forum.take(JOBS) == b"job/1"


async def test_due_times_survive_a_restart(forum: Forum, cfg: StrandConfig) -> None:
    await forum.write(b"job/later", delay=0.5)
    forum = await reopen(forum, cfg)
    try:
        assert forum.stats().delayed == 1 and await forum.take(JOBS) is None
        assert await forum.take(JOBS, timeout=5) == b"job/later"
    finally:
        await forum.close()


# -- expiring tuples -----------------------------------------------------------


async def test_an_expired_tuple_is_gone_without_a_take(forum: Forum) -> None:
    seen: list[Tuple] = []
    forum.add_expiry_listener(seen.extend)
    wid = await forum.write(b"job/short", ttl=0.1)
    got = await forum.read_entry(JOBS)
    assert got is not None and got.props.expires > 0
    await eventually(lambda: forum.stats().expired == 1, what="the ttl ran out")
    assert await forum.take(JOBS) is None and await forum.count(JOBS) == 0
    assert [t.id for t in seen] == [wid]
    log = await forum.strand.read_range(forum.strand.origin, 0, 10)
    assert len(log) == 1  # no Take was written


async def test_a_ttl_counts_from_when_the_tuple_is_due(forum: Forum) -> None:
    await forum.write(b"job/1", delay=0.2, ttl=30)
    got = await forum.take_entry(JOBS, timeout=5)
    assert got is not None
    assert got.props.expires - got.props.due == 30_000


async def test_tuples_with_a_ttl_or_a_delay_add_no_object_for_the_collector(forum: Forum) -> None:
    """The times are ints in arrays and the Properties are shared by a write
    (node/forum/node/space/schedule.py, node/forum/node/space/kept_properties.py): the cyclic
    collector's full
    passes do not grow with the tuples waiting or expiring (a heap entry and
    an id kept per tuple were two objects each)."""
    await forum.write_many([b"job/warm-up"], ttl=3600, priority=3)
    await forum.write_many([b"job/warm-up"], delay=3600)
    gc.collect()
    before = len(gc.get_objects())
    await forum.write_many([b"job/%d" % i for i in range(1000)], ttl=3600, priority=3)
    await forum.write_many([b"job/later/%d" % i for i in range(1000)], delay=3600)
    await forum.write(b"other")  # the Strand's writer holds on to its last append till the next
    gc.collect()
    assert await forum.count(JOBS) == 1001 and forum.stats().delayed == 1001
    # 2,000 tuples: one object each would be 2,000 more. What else the event
    # loop and the Strand's group commits hold varies by a few dozen with the
    # machine's load (50 were seen in a loaded CI run).
    assert len(gc.get_objects()) - before < 200


async def test_a_write_with_a_ttl_and_a_priority_costs_one_call_more_than_a_plain_one(
    cfg: StrandConfig,
) -> None:
    """Calls of the node's Python functions per write, counted: a write given
    the ttl and priority objects of the write before is not checked again,
    its Properties are shared within a millisecond, and its expiry is
    appended to the open run (node/forum/node/core/write_options.py ``expiring_properties``,
    node/forum/node/space/schedule.py ``Schedule.expire_run``): one call more than a plain
    write, for the Properties. (Six more when each was checked, kept and
    timed by calls of their own.) The event loop's calls are not counted:
    an armed timer costs the default loop a ``time()`` per turn.

    A call is a frame entered: a coroutine resumed after an await is the
    same call, not one more (how often the Strand's syncer waits for an
    fsync depends on the machine's load). The Strand's checkpoints, a task
    of their own once a second, are no write's: put off past the test."""
    frozen = itertools.repeat(1_800_000_000.0).__next__  # a clock that is no Python call
    forum = Forum(await Strand.open(replace(cfg, checkpoint_interval=3600)), remote_delay=0,
                  clock=frozen)  # fmt: skip
    node = str(Path(node_package.__file__).parent)
    # Kept until counted: a frame let go could hand its id to the next call.
    entered: dict[int, FrameType] = {}

    def count(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(node):
            entered.setdefault(id(frame), frame)

    async def calls_per_write(**options: float) -> float:
        for _ in range(5):  # the first of a kind opens its run
            await forum.write(b"job/warm-up", **options)  # type: ignore[arg-type]
        entered.clear()
        sys.setprofile(count)
        try:
            for _ in range(100):
                await forum.write(b"job/1", **options)  # type: ignore[arg-type]
        finally:
            sys.setprofile(None)
        calls = len(entered)
        entered.clear()
        return calls / 100

    try:
        plain = await calls_per_write()
        with_options = await calls_per_write(ttl=3600, priority=3)
        assert with_options - plain <= 1, (plain, with_options)
    finally:
        await forum.close()


async def test_tuples_expiring_at_one_time_expire_in_the_order_written(
    cfg: StrandConfig,
) -> None:
    """A burst's expiries are appended to one run; a tuple that expires at
    the same time but is timed on its own ends the run, so that the writes
    after it, which share the burst's Properties, expire after it too."""
    now = [1_800_000_000.0]
    forum = Forum(await Strand.open(cfg), remote_delay=0, clock=lambda: now[0])
    expired: list[EntryId] = []
    forum.add_expiry_listener(lambda tuples: expired.extend(t.id for t in tuples))
    try:
        ttl = 3.0
        a = await forum.write(b"job/a", ttl=ttl, priority=1)
        b = await forum.write(b"job/b", ttl=ttl, priority=1)  # a's Properties: a's run
        c = await forum.write(b"job/c", delay=1.0, ttl=2.0)  # the same expiry, on its own
        d = await forum.write(b"job/d", ttl=ttl, priority=1)  # a's Properties again
        e = await forum.write_many([b"job/e", b"job/f"], ttl=ttl)  # another run
        assert forum.stats().delayed == 1
        now[0] += 3.0
        forum._schedule.run_due()  # what its timers do when the time comes
        assert expired == [a, b, c, d, *e]
        assert await forum.count(JOBS) == 0 and forum.stats().expired == 6
    finally:
        await forum.close()


async def test_a_burst_that_expired_ends_its_run_even_if_the_clock_steps_back(
    cfg: StrandConfig,
) -> None:
    """t0: a is written with a ttl (its run opens); t0 + 1 s: it expires
    (its run is handed back); the wall clock steps back to t0: b, written
    with a's Properties, is live and expires at t0 + 1 s too (in a run of
    its own: appended to a's, it would never be handed back)."""
    now = [1_800_000_000.0]
    forum = Forum(await Strand.open(cfg), remote_delay=0, clock=lambda: now[0])
    expired: list[EntryId] = []
    forum.add_expiry_listener(lambda tuples: expired.extend(t.id for t in tuples))
    try:
        ttl = 1.0
        a = await forum.write(b"job/a", ttl=ttl)
        now[0] += 1.0
        forum._schedule.run_due()
        assert expired == [a]
        now[0] -= 1.0
        b = await forum.write(b"job/b", ttl=ttl)
        assert await forum.count(JOBS) == 1
        now[0] += 1.0
        forum._schedule.run_due()
        assert expired == [a, b] and await forum.count(JOBS) == 0
    finally:
        await forum.close()


async def test_a_reserved_tuple_that_expires_is_not_handed_out_again(forum: Forum) -> None:
    wid = await forum.write(b"job/1", ttl=0.2)
    assert await forum.reserve(JOBS, lease=0.05) is not None
    await eventually(lambda: forum.stats().expired == 1, what="the ttl ran out")
    assert await forum.take(JOBS) is None
    assert forum.stats().reserved == 0 and await forum.ack(wid) is False


async def test_expiry_survives_a_restart_and_compaction_drops_expired_writes(
    forum: Forum, cfg: StrandConfig
) -> None:
    await forum.write(b"job/short", ttl=0.3)
    await forum.write(b"job/long", ttl=3600)
    forum = await reopen(forum, cfg)
    try:
        assert await forum.count(JOBS) == 2
        await eventually(lambda: forum.stats().expired == 1, what="the short one expired")
        assert await forum.read(JOBS) == b"job/long"
        report = await forum.compact(seal=True)
        assert report.entries_dropped == 1
    finally:
        await forum.close()
    forum = Forum(await Strand.open(cfg), remote_delay=0)
    try:  # gone after a restart too, and the long one is still there
        assert await forum.count(JOBS) == 1 and forum.stats().entries == 1
    finally:
        await forum.close()


# -- dedup at write --------------------------------------------------------------


async def test_a_second_write_with_a_key_in_its_window_returns_the_first_id(forum: Forum) -> None:
    first = await forum.write(b"job/a", key="order-7", dedup_window=60)
    again = await forum.write(b"job/a-again", key="order-7", dedup_window=60)
    assert again == first and await forum.count(JOBS) == 1
    assert await forum.take(JOBS) == b"job/a"
    # The window is about writes: taken, the key still answers with the first id.
    assert await forum.write(b"job/a", key=b"order-7", dedup_window=60) == first
    other = await forum.write(b"job/b", key="order-8", dedup_window=60)
    assert other != first


async def test_concurrent_writes_with_one_key_write_once(forum: Forum) -> None:
    ids = await asyncio.gather(
        *(forum.write(b"job/x", key="k", dedup_window=60) for _ in range(10))
    )
    assert len(set(ids)) == 1 and await forum.count(JOBS) == 1


async def test_after_the_window_a_key_writes_again(forum: Forum) -> None:
    first = await forum.write(b"job/a", key="k", dedup_window=0.1)
    await asyncio.sleep(0.15)
    assert await forum.write(b"job/a", key="k", dedup_window=0.1) != first


async def test_a_dedup_window_survives_a_restart_and_compaction(
    forum: Forum, cfg: StrandConfig
) -> None:
    first = await forum.write(b"job/a", key="k", dedup_window=60)
    assert await forum.take(JOBS) == b"job/a"
    await forum.compact(seal=True)
    forum = await reopen(forum, cfg)
    try:
        assert await forum.write(b"job/a", key="k", dedup_window=60) == first
        assert await forum.count(JOBS) == 0
    finally:
        await forum.close()


# -- pausing a prefix ----------------------------------------------------------


async def test_a_paused_prefix_answers_nothing_until_resumed(forum: Forum) -> None:
    await forum.write(b"job/1")
    await forum.pause(b"job/")
    assert forum.paused() == [b"job/"]
    assert await forum.take(JOBS) is None
    assert await forum.take(Pattern(b"job/1")) is None  # a narrower pattern is paused too
    assert await forum.reserve(JOBS, lease=5) is None
    assert await forum.read(JOBS) == b"job/1" and await forum.count(JOBS) == 1
    await forum.write(b"job/2")  # writes go on
    waiting = asyncio.create_task(forum.take(JOBS, timeout=5))
    await eventually(lambda: forum.stats().waiting_takers == 1, what="the take waiting")
    assert not waiting.done()
    assert await forum.resume(b"job/") == 1
    assert await waiting == b"job/1"
    assert forum.paused() == [] and await forum.take(JOBS) == b"job/2"


async def test_a_resume_cancelled_while_its_takes_are_appended_still_resumes(forum: Forum) -> None:
    await forum.write(b"job/1")
    await forum.pause(b"job/")
    resume = asyncio.create_task(forum.resume(b"job/"))
    await asyncio.sleep(0)  # the markers' Takes are being appended
    resume.cancel()
    await asyncio.gather(resume, return_exceptions=True)
    await eventually(lambda: forum.paused() == [], what="the prefix resumed here")
    assert await forum.take(JOBS) == b"job/1"


async def test_a_pause_survives_a_restart(forum: Forum, cfg: StrandConfig) -> None:
    await forum.write(b"job/1")
    await forum.pause(b"job/")
    forum = await reopen(forum, cfg)
    try:
        assert forum.paused() == [b"job/"] and await forum.take(JOBS) is None
        assert await forum.resume(b"job/") == 1
        assert await forum.take(JOBS) == b"job/1"
    finally:
        await forum.close()
    forum = Forum(await Strand.open(cfg), remote_delay=0)
    try:
        assert forum.paused() == []
    finally:
        await forum.close()


# -- limits --------------------------------------------------------------------


async def test_a_write_over_a_limit_is_refused_and_changes_nothing(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg), limits={b"job/": 2}) as forum:
        await forum.write_many([b"job/1", b"job/2"])
        await forum.write(b"other/1")  # another prefix is not limited
        with pytest.raises(LimitExceeded) as refused:
            await forum.write(b"job/3")
        assert refused.value.limit == 2 and refused.value.retry_after > 0
        assert await forum.count(JOBS) == 2
        assert forum.fill() == {b"job/": (2, 2)}
        assert forum.stats().limits == {"job/": [2, 2]}


async def test_a_write_with_wait_gets_room_when_a_tuple_leaves(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg), limits={b"job/": 1}) as forum:
        await forum.write(b"job/1")
        waiting = asyncio.create_task(forum.write(b"job/2", wait=5))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        assert await forum.take(JOBS) == b"job/1"
        assert isinstance(await waiting, EntryId)
        assert await forum.take(JOBS) == b"job/2"
        with pytest.raises(LimitExceeded):  # waited out
            await forum.write_many([b"job/3", b"job/4"], wait=0.05)


async def test_delayed_and_reserved_tuples_count_against_a_limit(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg), limits={b"job/": 2}) as forum:
        await forum.write(b"job/1", delay=60)
        await forum.write(b"job/2")
        assert await forum.reserve(JOBS, lease=30) is not None
        with pytest.raises(LimitExceeded):
            await forum.write(b"job/3")


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
async def test_a_bad_limit_is_refused(cfg: StrandConfig, limit: object) -> None:
    strand = await Strand.open(cfg)
    try:
        with pytest.raises(ValueError, match="limit"):
            Forum(strand, limits={b"job/": limit})  # type: ignore[dict-item]
    finally:
        await strand.close()


# -- bad values ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delay": -1}, "delay must be >= 0"),
        ({"delay": math.nan}, "delay is a number"),
        ({"ttl": math.inf}, "ttl is a number"),
        ({"ttl": 0}, "ttl must be > 0"),
        ({"priority": 128}, "priority must be -128 to 127"),
        ({"priority": 1.5}, "priority is a whole number"),
        ({"key": ""}, "key must be 1 to 1024 bytes"),
        ({"key": b"k" * 1025}, "key must be 1 to 1024 bytes"),
        ({"dedup_window": 5}, "dedup_window needs a key"),
        ({"delay": 1, "not_before": 1e9}, "not both"),
        ({"not_before": time.time() + 11 * 365 * 86400}, "ten years"),
        ({"wait": -1}, "wait must be"),
    ],
)
async def test_bad_options_are_refused_and_write_nothing(
    forum: Forum, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await forum.write(b"job/1", **options)  # type: ignore[arg-type]
    assert forum.stats().entries == 0
