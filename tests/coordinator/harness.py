"""Test helpers: waiting on a condition with a deadline; running workers in
process and as ``forum worker`` subprocesses."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from coordinator import Worker


async def eventually(
    predicate: Callable[[], Awaitable[bool]] | Callable[[], bool],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    what: str = "condition",
) -> None:
    """Return once ``predicate()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(interval)


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


class WorkerProcess:
    """One ``forum worker`` subprocess; its output goes to ``log_path``."""

    def __init__(self, name: str, root: Path, args: Sequence[str], env: Mapping[str, str]) -> None:
        self.name = name
        self.args = list(args)
        self.env = dict(env)
        self.log_path = root / f"worker-{name}.log"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("FORUM_")}
        environment.update(self.env)
        environment["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "node.cli", "worker", "--owner", self.name,
                "--no-progress", *self.args,
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                env=environment, cwd=REPO,
            )  # fmt: skip

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def signal(self, signum: int, deadline: float = 30.0) -> int:
        """Send ``signum`` and wait for the exit; the exit code."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signum)
        try:
            async with asyncio.timeout(deadline):
                return await self.process.wait()
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
            raise AssertionError(f"worker {self.name} did not exit:\n{self.log_text()}") from None


REPO = Path(__file__).resolve().parents[2]


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
