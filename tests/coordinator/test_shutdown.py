"""A worker told to stop (SIGTERM) stops taking at once: a real ``forum
worker`` process against a real node and Redis, and the reply that crosses
the stop, in process against a real Forum and Redis."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from examples.handlers.fenced_redis import FencedRedisStore
from forum.coordinator import Job, Lens, Worker
from forum.node.client.remote import ForumClient
from forum.node.core.entries import Tuple
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.coordinator.harness import WorkerProcess, eventually, worker_processes
from tests.coordinator.test_worker_process import started
from tests.fixtures.nodes import NodeProcess

JOBS = Pattern(b"job/")


@pytest.mark.slow
async def test_sigterm_abandons_the_waiting_take(
    forum_node: NodeProcess, redis_url: str, fenced: FencedRedisStore, tmp_path: Path
) -> None:
    """t0: an idle worker's reserve waits on the node (--take-wait 5).
    t1: SIGTERM. t1 + 0.6 s: a job is written. The worker must not run it
    (it used to: its long poll was still waiting and got it); the job stays
    live in the space for other workers, not reserved."""
    args = [
        "--node", forum_node.url, "--redis-url", redis_url, "--prefix", "job/",
        "--handler", "tests.coordinator.process_handlers:slow_fenced", "--take-wait", "5",
    ]  # fmt: skip
    async with ForumClient(forum_node.url) as space, worker_processes(tmp_path) as workers:
        worker = WorkerProcess("w", tmp_path, args, {"FORUM_EXAMPLE_REDIS_URL": redis_url})
        workers.append(worker)
        await worker.start()

        async def waiting() -> bool:
            return (await space.status()).long_polls > 0

        await eventually(waiting, timeout=20, what="the worker's reserve waiting")
        worker.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.6)  # the timeline above: the write comes after the stop
        job = await space.write(b"job/late")
        assert await worker.exit_code() == 0, worker.log_text()

        assert await started(redis_url) == []
        assert await fenced.get(str(job)) is None
        assert await space.count(JOBS) == 1
        assert (await space.status()).reserved == 0


class _StopsDuringReserve:
    """A real Forum whose first ``reserve_many`` is followed, before its answer
    reaches the worker, by ``worker.stop()``: the SIGTERM that crosses a reply."""

    def __init__(self, forum: Forum) -> None:
        self._forum = forum
        self.worker: Worker | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._forum, name)

    async def reserve_many(self, pattern: Pattern, lease: float, limit: int) -> list[Tuple]:
        items = await self._forum.reserve_many(pattern, lease, limit)
        assert self.worker is not None
        self.worker.stop()
        return items


async def test_reserved_but_not_started_is_released_on_stop(forum: Forum, lens: Lens) -> None:
    """t0: the worker reserves job k. t1: stop(), before k is claimed.
    k must be live again at once (not after its lease), and not run."""
    await forum.write(b"job/k")
    ran: list[bytes] = []

    async def handler(job: Job) -> None:
        ran.append(job.payload)

    space = _StopsDuringReserve(forum)
    worker = Worker(space, lens, JOBS, handler, lease=30)  # type: ignore[arg-type]
    space.worker = worker
    async with asyncio.timeout(10):
        await worker.run()
    assert ran == []
    assert forum.stats().reserved == 0
    assert await forum.count(JOBS) == 1
