"""The task layer across real processes: ``forum worker --app`` workers on a
real node and Redis, stopped and killed as a crash or a stall would.

A stale holder (SIGSTOPped past its lease, then SIGCONTed) never stores its
result::

    t0  w1 claims stale-1 and runs it (token T1); SIGSTOP: no heartbeat
    t1  w1's lease runs out: the node hands the job to w2, the Lens grants
        it (token T2 > T1); w2 stores its result, fenced, and completes
    t2  SIGCONT: w1's heartbeat or its result's record meets ClaimLost:
        nothing of w1's is stored
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tasks import App, Context, JobState
from tests.coordinator.harness import WorkerProcess, worker_processes
from tests.fixtures.nodes import NodeProcess, eventually

process_app = App(prefix=b"proc-test/")


@process_app.task(retries=1)  # a stalled holder's lapsed lease counts as an attempt
async def slow_effect(ctx: Context) -> dict[str, int]:
    """Runs a while (past a stalled holder's lease), then says who ran it."""
    await asyncio.sleep(3.0)
    return {"pid": os.getpid(), "token": ctx.token}


def worker(name: str, root: Path, node: NodeProcess, redis_url: str) -> WorkerProcess:
    return WorkerProcess(
        name, root / name,
        ["--app", "tests.tasks.test_processes:process_app", "--node", node.url,
         "--redis-url", redis_url, "--take-wait", "0.2", "--lease", "1.5"],
        {},
    )  # fmt: skip


@pytest.mark.slow
async def test_a_stalled_holders_result_is_refused(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    app = process_app.using(nodes=forum_node.url, redis=redis_url)
    async with app, worker_processes(tmp_path) as started:
        # The copy's tasks are the module's: enqueue through the copy, by name.
        handle = await app.enqueue("slow_effect", _key="stale-1")
        w1 = worker("w1", tmp_path, forum_node, redis_url)
        started.append(w1)
        await w1.start()
        await eventually(lambda: _running_on(handle, "w1"), 30, "w1 runs stale-1")
        stalled = (await handle.status()).token
        w1.send_signal(signal.SIGSTOP)
        try:
            w2 = worker("w2", tmp_path, forum_node, redis_url)
            started.append(w2)
            await w2.start()
            result = await handle.result(timeout=30)
        finally:
            w1.send_signal(signal.SIGCONT)
        await eventually(lambda: "lost" in w1.log_text(), 30, "w1 to find its claim lost")
        status = await handle.status()
        assert w2.pid is not None and result == {"pid": w2.pid, "token": status.token}
        assert status.state is JobState.DONE and status.token != stalled
        assert (await handle.status()).result == result  # w1 wrote nothing over it
        for process in started:
            assert await process.signal(signal.SIGTERM) == 0, process.log_text()


async def _running_on(handle, owner: str) -> bool:  # type: ignore[no-untyped-def]
    status = await handle.status()
    return bool(status.state is JobState.RUNNING and status.worker == owner)
