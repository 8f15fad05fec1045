"""A double take a worker catches is counted and logged at DEBUG, with a
summary at INFO at most once a minute (forum.coordinator.doubletakes): never
a WARNING."""

from __future__ import annotations

import logging

import pytest

from forum.coordinator import doubletakes
from forum.coordinator.doubletakes import DoubleTakes
from forum.coordinator.memory import MemoryAuthority
from forum.coordinator.metrics import worker_registry
from forum.coordinator.worker import Worker
from forum.node.core.entries import EntryId, Write
from forum.node.core.space import Pattern
from tests.coordinator.conftest import ForumFactory
from tests.coordinator.harness import eventually, running
from tests.coordinator.test_worker import FAST
from tests.replication.test_membership import Clock

JOBS = Pattern(b"job/")
LOGGER = doubletakes.__name__


def summaries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.INFO
    ]


def test_one_summary_a_minute_with_the_count_since_the_last(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    clock = Clock()
    doubles = DoubleTakes(b"job/", clock)
    for seq in range(3):
        doubles.caught(EntryId("a", seq + 1), Exception("AlreadyDone"))
        clock.now += 10
    assert summaries(caplog) == []  # 30 s since the start: none yet
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert debug[0].getMessage() == "double take of a:1 caught, not run: AlreadyDone"
    assert len(debug) == 3
    clock.now += 30
    doubles.summarize()  # the heartbeat's look, a minute on
    assert summaries(caplog) == [
        "3 double takes of job/ caught in the last 60 s, not run (copies of jobs done or "
        "running elsewhere)"
    ]
    clock.now += 30
    doubles.caught(EntryId("a", 4), Exception("AlreadyClaimed"))
    doubles.summarize()
    assert len(summaries(caplog)) == 1  # at most one a minute
    clock.now += 30
    doubles.summarize()
    assert summaries(caplog)[1].startswith("1 double takes of job/ caught in the last 60 s")
    clock.now += 600
    doubles.summarize()
    assert len(summaries(caplog)) == 2  # none caught: no line


@pytest.mark.parametrize("interval", [3600.0, 0.0])
async def test_a_worker_logs_no_warning_for_a_double_take(
    make_forum: ForumFactory,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    interval: float,
) -> None:
    """Two nodes hold the same 20 jobs, a worker on each: every job runs
    once, the copies are caught, and the log says so at DEBUG (and, with a
    summary due at each catch, at INFO), never at WARNING."""
    monkeypatch.setattr(doubletakes, "SUMMARY_INTERVAL", interval)
    caplog.set_level(logging.DEBUG, logger="forum.coordinator")
    node_a, node_b = await make_forum("a"), await make_forum("b")
    ids = await node_a.write_many([f"job/{i}".encode() for i in range(20)])
    await node_b.apply([Write(i, f"job/{n}".encode()) for n, i in enumerate(ids)])
    authority = MemoryAuthority()

    async def handler(job: object) -> None:
        pass

    on_a = Worker(node_a, authority, JOBS, handler, lease=2.0, concurrency=3, **FAST)
    on_b = Worker(node_b, authority, JOBS, handler, lease=2.0, concurrency=3, **FAST)
    async with running(on_a, on_b):
        await eventually(lambda: on_a.stats().taken + on_b.stats().taken == 40)
        await eventually(lambda: on_a.stats().running + on_b.stats().running == 0)
    caught = on_a.stats().double_takes + on_b.stats().double_takes
    assert caught == 20
    assert not [r for r in caplog.records if "double take" in r.getMessage()
                and r.levelno >= logging.WARNING]  # fmt: skip
    debug = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.DEBUG]
    assert len(debug) == caught
    counted = [int(line.split()[0]) for line in summaries(caplog)]
    assert sum(counted) == (caught if interval == 0 else 0)
    exposition = worker_registry(on_b.stats).collect()
    jobs = next(m for m in exposition if m.name == "forum_worker_jobs")
    doubles = [s.value for s in jobs.samples if s.labels.get("outcome") == "double_takes"]
    assert doubles == [on_b.stats().double_takes]
