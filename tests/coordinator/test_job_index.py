"""The job index (forum.coordinator.jobindex), run against the in-memory fake
and a real Lens on a real redis-server: each transition moves a task's job
between states, counts follow, pages are sorted, paged by cursor and
searchable, and entries go with their records."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from forum.coordinator import Failed, Lens
from forum.coordinator.jobindex import SEARCH_BUDGET, JobQuery
from forum.coordinator.memory import MemoryAuthority
from forum.coordinator.records import NewRecord
from tests.fixtures.redis_server import RedisServer

Authority = Lens | MemoryAuthority


@pytest.fixture(params=["memory", "lens"])
async def authority(request: pytest.FixtureRequest) -> AsyncIterator[Authority]:
    if request.param == "memory":
        yield MemoryAuthority()
        return
    redis: RedisServer = request.getfixturevalue("redis_server")
    request.getfixturevalue("redis_url")  # a flushed server
    async with Lens.from_url(redis.url, shards=4) as lens:
        yield lens


def _job(key: str, task: str = "add", *, due: float | None = None, args: str = "") -> NewRecord:
    now = time.time()
    fields = {"state": "enqueued", "task": task, "due": now if due is None else due,
              "updated": now, "args": args or f"({key!r},)"}  # fmt: skip
    return NewRecord(key, fields, 60)


async def _states(authority: Authority, **query: object) -> dict[str, list[str]]:
    found = {}
    for state in ("queued", "delayed", "running", "retrying", "done", "dead", "cancelled"):
        page = await authority.find_jobs(JobQuery(state=state, limit=500, **query))  # type: ignore[arg-type]
        if page.keys:
            found[state] = sorted(page.keys)
    return found


async def test_each_transition_moves_the_job_and_its_count(authority: Authority) -> None:
    written = await authority.record_enqueued_many(
        [_job("q"), _job("d", due=time.time() + 60), _job("r"), _job("x"), _job("c"),
         _job("f"), _job("b", task="mul")]
    )  # fmt: skip
    assert all(written)
    await authority.record_enqueued("w", {"task": "add", "state": "enqueued"}, 60)
    # A raw Worker's key (a record with no task) is not indexed.
    await authority.record_enqueued("raw", {"note": "x"}, 60)
    assert await _states(authority) == {
        "queued": ["b", "c", "f", "q", "r", "w", "x"], "delayed": ["d"]
    }  # fmt: skip
    r = await authority.claim("r", owner="w", lease=30)
    x = await authority.claim("x", owner="w", lease=30)
    f = await authority.claim("f", owner="w", lease=30)
    b = await authority.claim("b", owner="w", lease=30)
    await authority.claim("raw", owner="w", lease=30)
    assert (await _states(authority))["running"] == ["b", "f", "r", "x"]
    await authority.record(r, {"state": "retrying", "due": time.time() + 5}, 60)
    await r.release(Failed(5.0))
    await x.complete()
    await authority.record(f, {"state": "dead", "error": "boom"}, 60)
    await f.release(Failed(None))
    await b.release()
    await authority.cancel("c")
    assert await _states(authority) == {
        "queued": ["b", "q", "w"], "delayed": ["d"], "retrying": ["r"], "done": ["x"],
        "dead": ["f"], "cancelled": ["c"],
    }  # fmt: skip
    counts = await authority.job_counts()
    assert counts.by_task == {
        "add": {"queued": 2, "delayed": 1, "retrying": 1, "done": 1, "dead": 1, "cancelled": 1},
        "mul": {"queued": 1},
    }
    assert counts.by_state()["queued"] == 3 and counts.total == 8
    assert await _states(authority, task="mul") == {"queued": ["b"]}
    # A dead job's letter put back to work (App.retry) is queued again; once.
    assert await authority.requeued("f") and not await authority.requeued("f")
    assert (await _states(authority))["queued"] == ["b", "f", "q", "w"]
    assert await authority.forget_record("x")
    assert "done" not in await _states(authority)
    assert "done" not in (await authority.job_counts()).by_task["add"]


async def test_a_delayed_job_due_is_counted_and_listed_queued(authority: Authority) -> None:
    await authority.record_enqueued_many(
        [_job("soon", due=time.time() + 0.3), _job("late", due=time.time() + 60)]
    )
    assert await _states(authority) == {"delayed": ["late", "soon"]}
    await asyncio.sleep(0.4)
    assert await _states(authority) == {"queued": ["soon"], "delayed": ["late"]}
    assert (await authority.job_counts()).by_task == {"add": {"queued": 1, "delayed": 1}}


async def test_pages_are_ordered_and_a_cursor_walks_them_without_repeats(
    authority: Authority,
) -> None:
    # One batch: many jobs share a millisecond, so the order falls to the key.
    keys = [f"job-{i:03d}" for i in range(120)]
    await authority.record_enqueued_many([_job(key) for key in keys])
    for newest in (True, False):
        seen: list[str] = []
        cursor = None
        while True:
            page = await authority.find_jobs(
                JobQuery(state="queued", limit=7, cursor=cursor, newest_first=newest)
            )
            assert page.total == 120
            seen += page.keys
            cursor = page.next_cursor
            if cursor is None:
                break
        assert len(seen) == 120 and set(seen) == set(keys)
        first = await authority.find_jobs(JobQuery(limit=500, newest_first=newest))
        assert seen == first.keys


async def test_key_and_text_filters_search_newest_first(authority: Authority) -> None:
    await authority.record_enqueued_many(
        [_job(f"a-{i}", args=f"('Apple {i}',)") for i in range(5)]
        + [_job(f"b-{i}", args=f"('pear {i}',)") for i in range(5)]
    )
    page = await authority.find_jobs(JobQuery(text="APPLE", limit=3))
    assert len(page.keys) == 3 and all(key.startswith("a-") for key in page.keys)
    assert page.total is None and page.complete and page.next_cursor is not None
    rest = await authority.find_jobs(JobQuery(text="apple", limit=50, cursor=page.next_cursor))
    assert sorted(page.keys + rest.keys) == [f"a-{i}" for i in range(5)]
    assert rest.next_cursor is None and rest.searched >= 1
    keyed = await authority.find_jobs(JobQuery(key="b-", limit=50))
    assert sorted(keyed.keys) == [f"b-{i}" for i in range(5)]
    assert (await authority.find_jobs(JobQuery(tasks=frozenset({"mul"})))).keys == []


async def test_a_time_range_bounds_the_page(authority: Authority) -> None:
    await authority.record_enqueued_many([_job("early")])
    await asyncio.sleep(0.05)
    middle = time.time()
    await asyncio.sleep(0.05)
    await authority.record_enqueued_many([_job("late")])
    assert (await authority.find_jobs(JobQuery(since=middle))).keys == ["late"]
    assert (await authority.find_jobs(JobQuery(until=middle))).keys == ["early"]


async def test_a_search_stops_at_its_budget_and_says_so() -> None:
    memory = MemoryAuthority()
    await memory.record_enqueued_many([_job(f"k{i}") for i in range(SEARCH_BUDGET + 5)])
    page = await memory.find_jobs(JobQuery(text="nowhere"))
    assert page.keys == [] and not page.complete and page.searched == SEARCH_BUDGET
    rest = await memory.find_jobs(JobQuery(text="nowhere", cursor=page.next_cursor))
    assert rest.complete and rest.searched == 5 and rest.next_cursor is None


async def test_a_bad_query_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="state is one of"):
        JobQuery(state="sleeping")
    with pytest.raises(ValueError, match="limit must be from 1 to 500"):
        JobQuery(limit=0)
    with pytest.raises(ValueError, match="not a cursor"):
        JobQuery(cursor="%%%")


async def test_a_hand_back_and_a_dead_workers_re_offer_queue_the_job_again(
    authority: Authority,
) -> None:
    await authority.record_enqueued_many([_job("handed"), _job("lapsed")])
    handed = await authority.claim("handed", owner="w", lease=30, reoffer=b"job")
    await authority.claim("lapsed", owner="w", lease=0.2, reoffer=b"job")
    assert (await _states(authority))["running"] == ["handed", "lapsed"]
    await handed.hand_back(b"job", delay=0)
    assert await _states(authority) == {"queued": ["handed"], "running": ["lapsed"]}
    await asyncio.sleep(0.3)  # the lapsed claim's worker died: its lease ran out
    grab = await authority.grab("lapsed")
    assert grab is not None and await authority.reaped(grab)
    assert await _states(authority) == {"queued": ["handed", "lapsed"]}


async def test_an_entry_goes_with_its_record(authority: Authority) -> None:
    short = NewRecord("old", {"task": "add", "state": "enqueued"}, 0.2)
    await authority.record_enqueued_many([short, _job("kept")])
    old = await authority.claim("old", owner="w", lease=30)
    await old.complete()
    await asyncio.sleep(0.3)  # its record's life is over
    # The next move into done trims the task's oldest entries whose records are gone.
    await (await authority.claim("new", owner="w", lease=30)).complete()
    await authority.record_enqueued("new", {"task": "add", "state": "enqueued"}, 60)
    assert await _states(authority) == {"queued": ["kept"], "done": ["new"]}
    assert (await authority.job_counts()).by_task == {"add": {"queued": 1, "done": 1}}


async def test_a_producers_record_after_a_workers_keeps_its_arguments(
    authority: Authority,
) -> None:
    # The producer's record is written in the background: a worker may claim
    # the job and write its record first. The worker's fields stay; the
    # producer's arguments and enqueue time are added where absent, and the
    # job is indexed (the claim found no record to index).
    first = await authority.claim("late", owner="w", lease=30)
    await authority.record(first, {"task": "add", "state": "running"}, 60)
    other = await authority.claim("other", owner="w", lease=30)
    await authority.record(other, {"task": "add", "state": "running", "args": "(0,)"}, 60)
    produced = {**_job("late").fields, "enqueued": 1.5}
    assert not await authority.record_enqueued("late", produced, 60)
    assert await authority.record_enqueued_many([_job("other", args="(2,)")]) == [False]
    late, kept = await authority.inspect_many(["late", "other"])
    assert late.record["args"] == b"('late',)" and late.record["enqueued"] == b"1.5"
    assert late.record["state"] == b"running"
    assert kept.record["args"] == b"(0,)"
    assert await _states(authority) == {"running": ["late", "other"]}


async def test_a_move_into_the_state_a_job_is_in_keeps_when_it_entered(
    authority: Authority,
) -> None:
    await authority.record_enqueued("twice", _job("twice").fields, 60)
    held = await authority.claim("twice", owner="w", lease=30)
    await authority.record(held, {"state": "done", "result": "3"}, 60)  # indexed done now
    await asyncio.sleep(0.05)
    between = time.time()
    await asyncio.sleep(0.05)
    await held.complete()  # done again: its score stays the record's
    assert await _states(authority, until=between) == {"done": ["twice"]}
    assert await _states(authority, since=between) == {}
