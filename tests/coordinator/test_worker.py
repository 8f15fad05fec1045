"""The worker runtime on in-process Forums and a real Redis.

Effects are recorded by the examples' fenced store (a Lua check refusing a
lower fencing token), so "exactly once" is checked on what was applied.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from examples.handlers.fenced_redis import FencedRedisStore, fenced_handler
from examples.handlers.fenced_sqlite import FencedSqliteStore
from examples.handlers.fenced_sqlite import fenced_handler as sqlite_handler
from examples.handlers.idempotency_key import Ledger, idempotent_handler
from forum.coordinator import (
    Backoff,
    ClaimAuthority,
    ClaimLost,
    DeadLetter,
    Job,
    Lens,
    LensUnavailable,
    Worker,
)
from forum.coordinator.deadletter import requeue
from forum.coordinator.envelope import Envelope
from forum.coordinator.memory import MemoryAuthority
from forum.node.core.entries import EntryId, Tuple, Write
from forum.node.core.space import Pattern, TupleSpace
from forum.node.space.forum import Forum
from tests.coordinator.conftest import ForumFactory
from tests.coordinator.harness import eventually, running
from tests.fixtures.redis_server import RedisServer

JOBS = Pattern(b"job/")
FAST = {"take_wait": 0.2, "reaper_interval": 0.05, "backoff": Backoff(base=0.02, cap=0.1)}


def worker(space: Forum, lens: ClaimAuthority, handler, **options) -> Worker:  # type: ignore[no-untyped-def]
    return Worker(space, lens, JOBS, handler, **{"lease": 2.0, **FAST, **options})


async def assert_each_applied_once(store: FencedRedisStore, keys: set[str]) -> None:
    applied = await store.applied()
    assert sorted(k for k, _ in applied) == sorted(keys), "an effect missing or applied twice"


async def test_every_job_runs_exactly_once(
    forum: Forum, lens: Lens, fenced: FencedRedisStore
) -> None:
    ids = await forum.write_many([f"job/{i}".encode() for i in range(300)])
    one = worker(forum, lens, fenced_handler(fenced), concurrency=4)
    two = worker(forum, lens, fenced_handler(fenced), concurrency=4)
    async with running(one, two):
        await eventually(lambda: one.stats().done + two.stats().done == 300, what="all done")
    await assert_each_applied_once(fenced, {str(i) for i in ids})
    assert await forum.count(JOBS) == 0
    assert all([await lens.done_token(str(i)) for i in ids])
    assert one.stats().double_takes + two.stats().double_takes == 0
    assert await lens.due() == []


async def test_double_take_across_nodes_is_caught(
    make_forum: ForumFactory, lens: Lens, fenced: FencedRedisStore
) -> None:
    """t0: node A and node B both hold job k (B got A's Write, A's Take has not
    reached B). t1: worker A takes k on A; worker B takes k on B. t2: both
    claim "a-origin:k": one wins, the other gets AlreadyClaimed or AlreadyDone
    and runs nothing."""
    node_a, node_b = await make_forum("a"), await make_forum("b")
    ids = await node_a.write_many([f"job/{i}".encode() for i in range(60)])
    await node_b.apply([Write(i, f"job/{n}".encode()) for n, i in enumerate(ids)])
    on_a = worker(node_a, lens, fenced_handler(fenced), concurrency=3)
    on_b = worker(node_b, lens, fenced_handler(fenced), concurrency=3)
    async with running(on_a, on_b):
        await eventually(
            lambda: on_a.stats().taken + on_b.stats().taken == 120, what="both nodes drained"
        )
        await eventually(lambda: on_a.stats().running + on_b.stats().running == 0)
    stats = on_a.stats(), on_b.stats()
    assert sum(s.done for s in stats) == 60
    assert sum(s.double_takes for s in stats) == 60
    await assert_each_applied_once(fenced, {str(i) for i in ids})


async def test_failures_are_retried_with_their_attempt_count_then_dead_lettered(
    forum: Forum, authority: MemoryAuthority
) -> None:
    seen: list[tuple[str, int, bytes]] = []

    async def flaky(job: Job) -> None:
        seen.append((job.key, job.attempt, job.payload))
        if job.payload == b"job/poison" or job.attempt < 3:
            raise RuntimeError(f"boom {job.attempt}")

    good, bad = await forum.write_many([b"job/flaky", b"job/poison"])
    w = worker(forum, authority, flaky, max_attempts=3)
    async with running(w):
        await eventually(lambda: w.stats().done == 1 and w.stats().dead == 1)
    # The handler saw the producer's bytes and the same key on every attempt.
    assert sorted(seen) == sorted(
        [(str(good), n, b"job/flaky") for n in (1, 2, 3)]
        + [(str(bad), n, b"job/poison") for n in (1, 2, 3)]
    )
    assert w.stats().retried == 4
    [dead] = forum.list(Pattern(b"dead/")).tuples
    letter = DeadLetter.parse(dead)
    assert letter.payload == b"job/poison" and letter.envelope.key == str(bad)
    assert letter.envelope.attempt == 3 and letter.envelope.error == "RuntimeError: boom 3"
    assert await forum.count(JOBS) == 0


async def test_a_requeued_dead_letter_runs_again_under_its_key(
    forum: Forum, authority: MemoryAuthority
) -> None:
    healthy = asyncio.Event()
    ran: list[Job] = []

    async def handler(job: Job) -> None:
        if not healthy.is_set():
            raise ValueError("downstream is down")
        ran.append(job)

    original = await forum.write(b"job/x")
    w = worker(forum, authority, handler, max_attempts=2)
    async with running(w):
        await eventually(lambda: w.stats().dead == 1)
        [dead] = forum.list(Pattern(b"dead/")).tuples
        healthy.set()
        assert await requeue(forum, DeadLetter.parse(dead)) is not None
        await eventually(lambda: w.stats().done == 1)
    [job] = ran
    assert (job.key, job.attempt, job.payload) == (str(original), 1, b"job/x")
    assert await forum.count(Pattern(b"dead/")) == 0


async def test_lost_claim_cancels_the_handler(forum: Forum, lens: Lens, redis_url: str) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def stuck(job: Job) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job_id = await forum.write(b"job/stuck")
    w = worker(forum, lens, stuck, lease=0.6)
    async with running(w):
        await asyncio.wait_for(started.wait(), 5)
        # Someone else takes the key over (as after an expiry the worker missed).
        async with Lens.from_url(redis_url) as other:
            await other._call(other._redis.delete(other.keys.claim(str(job_id))))
            usurper = await other.claim(str(job_id), owner="usurper", lease=30)
            await asyncio.wait_for(cancelled.wait(), 5)
            await usurper.complete()
    assert w.stats().claims_lost == 1 and w.stats().done == 0


async def test_handler_verify_refuses_a_stale_holder(
    forum: Forum, authority: MemoryAuthority
) -> None:
    outcomes: list[str] = []

    async def slow_then_verify(job: Job) -> None:
        await job.claim.release()  # the claim is gone, as after a take-over
        try:
            await job.verify()
        except ClaimLost:
            outcomes.append("refused")
            raise

    await forum.write(b"job/late")
    w = worker(forum, authority, slow_then_verify)
    async with running(w):
        await eventually(lambda: w.stats().claims_lost == 1)
    assert outcomes == ["refused"]


async def test_drain_lets_running_handlers_finish(forum: Forum, lens: Lens) -> None:
    started, go = asyncio.Event(), asyncio.Event()
    finished: list[bytes] = []

    async def handler(job: Job) -> None:
        started.set()
        await go.wait()
        finished.append(job.payload)

    await forum.write_many([b"job/1", b"job/2"])
    w = worker(forum, lens, handler, concurrency=1, drain_timeout=10)
    run = asyncio.create_task(w.run())
    await asyncio.wait_for(started.wait(), 5)
    w.stop()
    go.set()
    await asyncio.wait_for(run, 10)
    assert finished == [b"job/1"]
    assert w.stats().done == 1
    assert await forum.count(JOBS) == 1  # the second was never taken


async def test_drain_timeout_hands_unfinished_jobs_back(forum: Forum, lens: Lens) -> None:
    started = asyncio.Event()

    async def hangs(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()

    job_id = await forum.write(b"job/long")
    w = worker(forum, lens, hangs, drain_timeout=0.2)
    run = asyncio.create_task(w.run())
    await asyncio.wait_for(started.wait(), 5)
    w.stop()
    await asyncio.wait_for(run, 10)
    assert w.stats().handed_back == 1
    back = await forum.take_entry(JOBS)
    assert back is not None
    # Back unchanged: its reservation released, the same tuple is live again
    # (same id, same bytes, the attempt not counted), and its claim released.
    assert back.id == job_id
    assert Envelope.open(back.payload) == Envelope(b"job/long", attempt=1)
    assert await lens.due() == []
    await (await lens.claim(str(job_id), owner="next", lease=5)).complete()


async def test_a_dead_workers_job_comes_back_and_runs_once_elsewhere(
    forum: Forum, lens: Lens, tmp_path: Path
) -> None:
    """t0: worker A charges job k, then dies before completing. t1: A's lease
    expires, and with it k's reservation on the node: k is live again (the
    Lens kept no copy: nothing to re-offer). t2: B charges k again with the
    same idempotency key: the ledger applies it once."""
    charged = asyncio.Event()
    async with Ledger(tmp_path / "ledger.db") as ledger:
        charge = idempotent_handler(ledger)

        async def charge_then_die(job: Job) -> None:
            await charge(job)
            charged.set()
            await asyncio.Event().wait()

        job_id = await forum.write(b"job/charge 10")
        a = worker(forum, lens, charge_then_die, lease=0.5)
        dying = asyncio.create_task(a.run())
        await asyncio.wait_for(charged.wait(), 5)
        dying.cancel()  # no drain, no hand-back: as good as SIGKILL for the Lens
        with pytest.raises(asyncio.CancelledError):
            await dying

        b = worker(forum, lens, charge)
        async with running(b):
            await eventually(lambda: b.stats().done == 1, what="re-offered job done")
        assert b.stats().reoffered == 0
        assert await forum.count(JOBS) == 0 and forum.stats().reserved == 0
        assert await ledger.charges() == {str(job_id): b"job/charge 10"}
        assert await ledger.requests() == 2


async def test_a_worker_cancelled_at_any_step_ends(forum: Forum, lens: Lens) -> None:
    """Cancelled in any turn of the loop, as a TaskGroup or a shutdown cancels
    it, a worker's run() ends: none of its loops keeps the cancellation from
    it. (Its reaper, whose Lens calls go through redis-py, once ran on for
    ever: the test above then hung at ``await dying``.)"""
    await forum.write_many([f"job/{i}".encode() for i in range(20)])

    async def hold(job: Job) -> None:
        await asyncio.Event().wait()

    lost = []
    for turns in range(0, 120, 3):
        w = worker(forum, lens, hold, concurrency=2, reaper_interval=0.001)
        run = asyncio.create_task(w.run())
        for _ in range(turns):
            await asyncio.sleep(0)
        run.cancel()
        await asyncio.wait([run], timeout=5)
        if not run.cancelled():
            lost.append(turns)
            w.stop()  # let it end, so the next runs do not meet it
            await asyncio.wait([run], timeout=30)
    assert lost == [], f"a cancelled worker went on, cancelled after {lost} turns"


async def test_redis_outage_fails_closed_and_loses_nothing(
    forum: Forum, private_redis: RedisServer, tmp_path: Path
) -> None:
    """Redis stops mid-run: no effect without a claim, nothing lost, and the
    work resumes and finishes when Redis is back (its AOF kept the claims)."""
    async with (
        Lens.from_url(private_redis.url, timeout=0.3, connect_timeout=0.3) as lens,
        FencedSqliteStore(tmp_path / "results.db") as store,
    ):
        handle = sqlite_handler(store)

        async def slowish(job: Job) -> None:
            await asyncio.sleep(0.01)
            await handle(job)

        ids = await forum.write_many([f"job/{i}".encode() for i in range(150)])
        w = worker(forum, lens, slowish, concurrency=4, lease=4.0)
        async with running(w):
            await eventually(lambda: w.stats().done >= 30, what="some jobs done")
            await private_redis.astop()
            await eventually(lambda: not w.stats().lens_reachable, what="outage noticed")
            applied_at_outage = len(await store.applied())
            # The handlers that ran when Redis went end without an effect (their
            # verify() cannot reach the Lens), and no new one starts.
            await eventually(lambda: w.stats().running == 0, what="the running handlers ended")
            assert len(await store.applied()) == applied_at_outage
            await private_redis.astart()
            await eventually(lambda: w.stats().lens_reachable, what="Redis back")
            await eventually(lambda: w.stats().done == 150, timeout=30, what="all done")
        applied = await store.applied()
        assert sorted(k for k, _ in applied) == sorted(str(i) for i in ids)
        assert await forum.count(JOBS) == 0 and await lens.due() == []


async def test_claims_fail_closed_while_redis_is_down(
    forum: Forum, private_redis: RedisServer
) -> None:
    ran: list[Job] = []

    async def handler(job: Job) -> None:
        ran.append(job)

    async with Lens.from_url(private_redis.url, timeout=0.3, connect_timeout=0.3) as lens:
        await private_redis.astop()
        ids = await forum.write_many([b"job/a", b"job/b"])
        w = worker(forum, lens, handler, concurrency=2)
        async with running(w):
            await eventually(lambda: w.stats().lens_unavailable >= 1, what="a claim refused")
            assert ran == []
            # The taken job went back, carrying its claim key.
            await eventually(lambda: _live(forum, 2), what="job back in the space")
            await private_redis.astart()
            await eventually(lambda: w.stats().done == 2)
        assert sorted(j.key for j in ran) == sorted(str(i) for i in ids)


async def _live(forum: Forum, n: int) -> bool:
    return await forum.count(JOBS) == n


async def test_idempotency_key_from_the_payload(forum: Forum, authority: MemoryAuthority) -> None:
    ran: list[Job] = []

    async def handler(job: Job) -> None:
        ran.append(job)

    await forum.write_many([b"job/order-1 first", b"job/order-1 again", b"job/order-2"])
    w = worker(forum, authority, handler, key=lambda payload: payload.split()[0].decode())
    async with running(w):
        await eventually(lambda: w.stats().taken == 3 and w.stats().running == 0)
    assert sorted(j.key for j in ran) == ["job/order-1", "job/order-2"]
    assert w.stats().double_takes == 1


async def test_a_failing_key_function_parks_the_job(
    forum: Forum, authority: MemoryAuthority
) -> None:
    async def handler(job: Job) -> None:
        raise AssertionError("must not run")

    await forum.write(b"job/unkeyable")
    w = worker(forum, authority, handler, key=lambda payload: payload.decode("ascii")[99])
    async with running(w):
        await eventually(lambda: w.stats().dead == 1)
    [dead] = forum.list(Pattern(b"dead/")).tuples
    assert DeadLetter.parse(dead).payload == b"job/unkeyable"


def test_worker_refuses_a_dead_prefix_under_its_pattern(forum: Forum, lens: Lens) -> None:
    async def handler(job: Job) -> None:
        return None

    with pytest.raises(ValueError, match="dead prefix"):
        Worker(forum, lens, Pattern(b""), handler)


def test_backoff_grows_caps_and_jitters() -> None:
    backoff = Backoff(base=1, cap=10, jitter=0.5)
    rng = random.Random(7)
    for attempt, full in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 10), (60, 10)]:
        delays = [backoff.delay(attempt, rng) for _ in range(50)]
        assert all(full * 0.5 <= d <= full for d in delays)
        assert len(set(delays)) > 1
    with pytest.raises(ValueError):
        Backoff(base=2, cap=1)


async def test_lens_unavailable_is_a_connection_error() -> None:
    assert issubclass(LensUnavailable, ConnectionError) and LensUnavailable.retriable


def test_entry_ids_are_the_default_claim_keys() -> None:
    assert str(EntryId("a-1x", 7)) == "a-1x:7"


class PlainSpace:
    """A real Forum seen only through the TupleSpace protocol (no take_many)."""

    def __init__(self, forum: Forum) -> None:
        self._forum = forum

    async def write(self, payload: bytes) -> EntryId:
        return await self._forum.write(payload)

    async def read(self, pattern: Pattern) -> bytes | None:
        return await self._forum.read(pattern)

    async def take(self, pattern: Pattern, timeout: float | None = None) -> bytes | None:
        return await self._forum.take(pattern, timeout)

    async def take_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        return await self._forum.take_entry(pattern, timeout)

    async def count(self, pattern: Pattern) -> int:
        return await self._forum.count(pattern)


async def test_a_space_without_batches_works_one_take_at_a_time(
    forum: Forum, lens: Lens, fenced: FencedRedisStore
) -> None:
    space = PlainSpace(forum)
    assert isinstance(space, TupleSpace)
    ids = await forum.write_many([f"job/{i}".encode() for i in range(40)])
    w = worker(space, lens, fenced_handler(fenced), concurrency=4)  # type: ignore[arg-type]
    async with running(w):
        await eventually(lambda: w.stats().done == 40)
    await assert_each_applied_once(fenced, {str(i) for i in ids})


async def test_a_key_function_returning_no_key_parks_the_job(
    forum: Forum, authority: MemoryAuthority
) -> None:
    async def handler(job: Job) -> None:
        raise AssertionError("must not run")

    await forum.write_many([b"job/empty", b"job/number"])
    keys = {b"job/empty": "", b"job/number": 7}
    w = worker(forum, authority, handler, key=keys.__getitem__)
    async with running(w):
        await eventually(lambda: w.stats().dead == 2)
    assert await forum.count(Pattern(b"dead/")) == 2


async def test_a_busy_worker_lets_go_of_what_it_reserved_ahead(forum: Forum, lens: Lens) -> None:
    """t0: A (1 slot) reserves job/1 and, the space having more, job/2 ahead
    of a free slot; job/1's handler then blocks. t1: no slot frees within the
    hold, so A releases job/2. t2: B, idle, reserves and runs it while A is
    still busy. Reserving ahead never keeps a job from an idle worker for
    long, and job/2 runs once, its attempt not counted."""
    b_ran: list[bytes] = []
    a_started, a_go = asyncio.Event(), asyncio.Event()

    async def blocks(job: Job) -> None:
        a_started.set()
        await a_go.wait()

    async def runs(job: Job) -> None:
        b_ran.append(job.payload)

    await forum.write_many([b"job/1", b"job/2"])
    a = worker(forum, lens, blocks, concurrency=1)
    async with running(a):
        await asyncio.wait_for(a_started.wait(), 5)
        b = worker(forum, lens, runs)
        async with running(b):
            await eventually(lambda: b_ran == [b"job/2"], what="B ran the job A reserved ahead")
        a_go.set()
        await eventually(lambda: a.stats().done == 1, what="A's job done")
    assert b.stats().double_takes == 0 and a.stats().double_takes == 0
    assert await forum.count(JOBS) == 0 and forum.stats().reserved == 0


async def test_a_stopped_worker_releases_what_it_reserved_ahead(forum: Forum, lens: Lens) -> None:
    """Jobs reserved ahead of a slot and never claimed go back at the stop,
    at once and under their own ids (not after their lease)."""
    ids = await forum.write_many([f"job/{i}".encode() for i in range(20)])
    started, go = asyncio.Event(), asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await go.wait()

    w = worker(forum, lens, handler, concurrency=4, lease=60.0)
    run = asyncio.create_task(w.run())
    await asyncio.wait_for(started.wait(), 5)
    w.stop()
    go.set()
    await asyncio.wait_for(run, 10)
    left = {t.id for t in forum.list(JOBS, limit=100).tuples}
    assert forum.stats().reserved == 0
    assert left == set(ids[w.stats().done :]) and len(left) == 20 - w.stats().done
