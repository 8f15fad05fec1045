"""The task layer across real processes: ``forum worker --app`` workers on a
real node and Redis, stopped and killed as a crash or a stall would.

A stale holder (SIGSTOPped past its lease, then SIGCONTed) never stores its
result::

    t0  w1 claims stale-1 and runs it (token T1); SIGSTOP: no heartbeat
    t1  w1's lease runs out: the node hands the job to w2, the Lens grants
        it (token T2 > T1); w2 stores its result, fenced, and completes
    t2  SIGCONT: w1's heartbeat or its result's record meets ClaimLost:
        nothing of w1's is stored

And an app of sync and async tasks across two peered nodes and two workers,
one SIGKILLed mid-run: every job's result is there, and its effect (a SQLite
row kept by the highest fencing token, so a re-run replaces rather than adds)
is there once, under the token that completed the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from forum.tasks import App, Context, JobState
from tests.coordinator.harness import WorkerProcess, worker_processes
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually

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


#: Where mixed_app's tasks record their effects (SQLite; set per test).
EFFECTS_DB = "TASKS_EFFECTS_DB"

mixed_app = App(prefix=b"mixed-test/")


def _effect(ctx: Context, value: int) -> int:
    """The job's effect, idempotent by its fencing token: one row per job key,
    kept by the highest token that wrote it (a re-run replaces, never adds)."""
    path = os.environ[EFFECTS_DB]
    with contextlib.closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as db:
        db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, token INTEGER,"
                   " value INTEGER, runs INTEGER)")  # fmt: skip
        db.execute(
            "INSERT INTO effects VALUES (?, ?, ?, 1) ON CONFLICT(key) DO UPDATE SET"
            " token = excluded.token, value = excluded.value, runs = runs + 1"
            " WHERE excluded.token > effects.token",
            (ctx.key, ctx.token, value),
        )
    return value


@mixed_app.task
async def double(ctx: Context, n: int) -> int:
    await asyncio.sleep(0.05)
    await ctx.verify()
    return await asyncio.to_thread(_effect, ctx, 2 * n)


@mixed_app.task
def square(ctx: Context, n: int) -> int:
    time.sleep(0.05)
    ctx.verify_sync()
    return _effect(ctx, n * n)


@pytest.mark.slow
async def test_jobs_across_two_nodes_survive_a_killed_worker(
    tmp_path: Path, forum_nodes: ForumNodes, redis_url: str
) -> None:
    a, b = forum_nodes.make("a"), forum_nodes.make("b")
    a.args += ["--peer", b.url]
    b.args += ["--peer", a.url]
    await forum_nodes.start_all()
    database = tmp_path / "effects.db"
    env = {EFFECTS_DB: str(database)}
    app = mixed_app.using(nodes=[a.url, b.url], redis=redis_url)
    jobs = 40
    async with app, worker_processes(tmp_path) as started:
        handles = {}
        for n in range(jobs):
            task = "double" if n % 2 else "square"
            handles[n] = (task, await app.enqueue(task, n, _key=f"job-{n}"))
        for name, node in (("k1", a), ("k2", b)):
            process = WorkerProcess(
                name, tmp_path / name,
                ["--app", "tests.tasks.test_processes:mixed_app", "--node", node.url,
                 "--redis-url", redis_url, "--take-wait", "0.2", "--lease", "2",
                 "--concurrency", "4"],
                env,
            )  # fmt: skip
            started.append(process)
            await process.start()
        await eventually(lambda: len(_effects(database)) >= 8, 60, "some jobs done")
        await started[0].signal(signal.SIGKILL)
        for n, (task, handle) in handles.items():
            expected = 2 * n if task == "double" else n * n
            assert await handle.result(timeout=60) == expected, n
        assert await started[1].signal(signal.SIGTERM) == 0, started[1].log_text()
    effects = _effects(database)
    # Every job's effect is there, one row each, written under the token that completed it.
    assert sorted(effects) == sorted(f"job-{n}" for n in range(jobs))
    async with app:
        for _, handle in handles.values():
            status = await handle.status()
            assert status.state is JobState.DONE and effects[handle.key] == status.token


def _effects(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
        try:
            return {str(k): int(t) for k, t in db.execute("SELECT key, token FROM effects")}
        except sqlite3.OperationalError:
            return {}
