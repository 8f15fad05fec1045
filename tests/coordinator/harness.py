"""Test helpers: waiting on a condition with a deadline; running workers in
process and as ``forum worker`` subprocesses."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from forum.coordinator import Worker
from forum.deploy.processes import WorkerService
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually

__all__ = ["REPO", "WorkerProcess", "eventually", "peered", "running", "worker_processes"]


@asynccontextmanager
async def running(*workers: Worker) -> AsyncIterator[None]:
    """Run ``workers`` for the body of the ``async with``, then stop and drain them."""
    async with asyncio.TaskGroup() as tasks:
        for worker in workers:
            tasks.create_task(worker.run())
        try:
            yield
        finally:
            for worker in workers:
                worker.stop()


REPO = Path(__file__).resolve().parents[2]


class WorkerProcess(WorkerService):
    """One ``forum worker`` subprocess (``forum.deploy.processes.WorkerService``)
    whose handlers are imported from this repository; ``start`` returns once
    it is spawned, without waiting for it to serve metrics."""

    def __init__(self, name: str, root: Path, args: Sequence[str], env: Mapping[str, str]) -> None:
        super().__init__(
            name, root, ["--owner", name, "--no-progress", "--app-dir", str(REPO), *args]
        )
        self.env.update(env)

    async def ready(self) -> bool:
        return self.running

    async def signal(self, signum: int, deadline: float = 30.0) -> int:
        """Send ``signum`` and wait for the exit; the exit code."""
        code = await self.end(signum, deadline)
        assert code is not None, f"worker {self.name} never started"
        return code

    async def exit_code(self, deadline: float = 30.0) -> int:
        """Wait for an exit a signal sent before asked for, without sending
        another (a second SIGTERM landing after the worker's loop has closed
        would end it by the signal: -15); killed after ``deadline`` seconds."""
        assert self.process is not None, f"worker {self.name} never started"
        try:
            async with asyncio.timeout(deadline):
                return await self.process.wait()
        except TimeoutError:
            return await self.signal(signal.SIGKILL)


@asynccontextmanager
async def worker_processes(root: Path) -> AsyncIterator[list[WorkerProcess]]:
    """Tracks worker processes; any still running at the end is killed."""
    started: list[WorkerProcess] = []
    try:
        yield started
    finally:
        for worker in started:
            if worker.running:
                await worker.signal(signal.SIGKILL)


async def start_app_worker(
    started: list[WorkerProcess],
    root: Path,
    node: NodeProcess,
    app: str,
    redis_url: str,
    env: Mapping[str, str],
    lease: float = 5.0,
) -> WorkerProcess:
    """Start ``forum worker --app app`` (``module:attribute``) against
    ``node`` and ``redis_url``, named ``w-<node>``, with ``env`` beside the
    environment; tracked in ``started`` (:func:`worker_processes`)."""
    name = f"w-{node.name}"
    process = WorkerProcess(
        name, root / name,
        ["--app", app, "--node", node.url, "--redis-url", redis_url, "--take-wait", "0.2",
         "--lease", str(lease)],
        env,
    )  # fmt: skip
    started.append(process)
    await process.start()
    return process


async def peered(nodes: ForumNodes, names: Sequence[str]) -> list[NodeProcess]:
    """Start a node of each name, each peered with every other."""
    made = [nodes.make(name) for name in names]
    for node in made:
        node.args += [arg for other in made if other is not node for arg in ("--peer", other.url)]
    await nodes.start_all()
    return made
