"""A worker whose Redis forgets mid-run: it says so once, counts it, fails
closed for a pause, loses none of the jobs it holds, and works on afterwards.

Each test makes Redis forget while handlers run, in one of the ways an
operator meets: a ``FLUSHALL``, or a restart of a Redis without persistence.
Timeline (both tests)::

    t0  the worker runs 4 slow handlers (blocked until t2) and finishes 10 fast jobs
    t1  Redis forgets: the 4 claims and their in-flight records are gone
    t2  the worker meets LensStateLost (heartbeat or claim): one error line,
        lens_state_losses 1; the 4 handlers are cancelled and their jobs
        written back (rescued); nothing is claimed for lens_loss_pause
    t3  after the pause: the 4 rescued and 10 new jobs run and complete
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client.exposition import generate_latest

from forum.coordinator import Backoff, Job, Lens, Worker
from forum.coordinator.metrics import worker_registry
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.coordinator.harness import eventually, running
from tests.fixtures.redis_server import RedisServer

pytestmark = pytest.mark.slow

_LEASE = 1.0
_PAUSE = 1.0
_SLOW = 4


class _Jobs:
    """A handler that records when each run starts and which jobs took
    effect; ``job/slow*`` jobs wait until ``unblocked`` before their effect."""

    def __init__(self) -> None:
        self.effects: set[bytes] = set()
        self.starts: list[tuple[bytes, float]] = []
        self.unblocked = False

    async def handler(self, job: Job) -> None:
        self.starts.append((job.payload, time.monotonic()))
        if job.payload.startswith(b"job/slow"):
            await eventually(lambda: self.unblocked, what="the test to unblock", timeout=30)
        await job.verify()  # right before the effect, as a handler must
        self.effects.add(job.payload)


def _loss_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "forum.coordinator.worker"
        and record.levelno == logging.ERROR
        and "LOST THE LENS'S STATE" in record.getMessage()
    ]


async def _forget_mid_run(
    forum: Forum,
    lens: Lens,
    forget: Callable[[], Awaitable[None]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = _Jobs()
    work = Worker(
        forum, lens, Pattern(b"job/"), jobs.handler, concurrency=_SLOW + 2, lease=_LEASE,
        lens_loss_pause=_PAUSE, take_wait=0.2, reaper_interval=0.05,
        backoff=Backoff(base=0.02, cap=0.1),
    )  # fmt: skip
    slow = [f"job/slow{i}".encode() for i in range(_SLOW)]
    before = [f"job/a{i}".encode() for i in range(10)]
    after = [f"job/b{i}".encode() for i in range(10)]
    with caplog.at_level(logging.ERROR, logger="coordinator"):
        async with running(work):
            await forum.write_many(slow + before)
            await eventually(
                lambda: jobs.effects >= set(before) and work.stats().running == _SLOW,
                what="the fast jobs done while the slow ones run",
            )
            await forget()
            await forum.write_many(after)
            await eventually(lambda: work.stats().lens_state_losses == 1, what="the loss seen")
            seen = time.monotonic()
            jobs.unblocked = True
            await eventually(
                lambda: jobs.effects == set(slow + before + after), what="every job done"
            )
            # It keeps working: a job written now runs as before.
            await forum.write(b"job/c")
            await eventually(lambda: b"job/c" in jobs.effects, what="a job after the loss")
            stats = work.stats()
            metrics = generate_latest(worker_registry(work.stats)).decode()

    # Failed closed: no run started in the pause (it began at or before `seen`).
    early = [payload for payload, at in jobs.starts if seen <= at < seen + _PAUSE - 0.2]
    assert early == []
    # The slow jobs' claims were gone: cancelled, written back, run again.
    assert stats.rescued == _SLOW
    assert sum(payload in slow for payload, _ in jobs.starts) == 2 * _SLOW
    assert stats.lens_state_losses == lens.state_losses == 1
    assert stats.lens_reachable
    assert "forum_worker_lens_state_losses_total 1.0" in metrics
    assert f'forum_worker_jobs_total{{outcome="rescued"}} {_SLOW}.0' in metrics
    [line] = _loss_lines(caplog)  # once per loss, not once per job
    assert work.owner in line and f"Cancelling {_SLOW} running handlers" in line
    assert "appendonly yes" in line and "A Redis that forgets" in line


async def test_a_flushall_while_the_worker_runs_loses_no_job(
    redis_server: RedisServer, forum: Forum, lens: Lens, caplog: pytest.LogCaptureFixture
) -> None:
    async def flushall() -> None:
        redis_server.flushall()

    await _forget_mid_run(forum, lens, flushall, caplog)


async def test_a_restart_without_persistence_while_the_worker_runs_loses_no_job(
    volatile_redis: RedisServer, forum: Forum, caplog: pytest.LogCaptureFixture
) -> None:
    async with Lens.from_url(volatile_redis.url) as lens:
        await _forget_mid_run(forum, lens, volatile_redis.arestart, caplog)


async def test_a_negative_pause_after_a_loss_is_refused(forum: Forum, lens: Lens) -> None:
    with pytest.raises(ValueError, match="lens_loss_pause"):
        Worker(forum, lens, Pattern(b"job/"), _Jobs().handler, lens_loss_pause=-1)
