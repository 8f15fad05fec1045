"""``forum worker`` on SIGTERM stops taking at once: a real worker process, a
real node and real Redis."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from examples.handlers.fenced_redis import FencedRedisStore
from node import Pattern
from node.client import ForumClient
from tests.coordinator.harness import WorkerProcess, eventually, worker_processes
from tests.coordinator.test_worker_process import started
from tests.fixtures.nodes import NodeProcess

pytestmark = pytest.mark.slow

JOBS = Pattern(b"job/")


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
        assert await worker.signal(signal.SIGTERM) == 0, worker.log_text()

        assert await started(redis_url) == []
        assert await fenced.get(str(job)) is None
        assert await space.count(JOBS) == 1
        assert (await space.status()).reserved == 0
