"""The process executor (forum.tasks.executor): sync tasks in a pool of
child processes, a soft timeout the task can catch, a hard one that kills
its process (the attempt failed: retried, then dead), the killed process
replaced, its holder's token refused. A real node, a real redis-server,
workers of the app in this process and their real child processes; the
tasks are this module's, which each child imports.

A hard timeout, as it happens::

    t0  attempt 1 runs in child P1 under token T1; it never returns
    t1  its timeout: P1 is SIGKILLed, the claim released as failed (T1
        holds nothing from now on), the retry written
    t2  attempt 2 runs in a new child P2 under T2 > T1; killed likewise
    t3  no retries left: the job is dead (TimeoutError); P1, P2 are gone
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from forum.coordinator import Backoff, Claim, ClaimLost, Lens
from forum.tasks import App, Context, InvalidJob, JobFailed, SoftTimeout
from forum.tasks.executor import ProcessContext, process_pool
from tests.coordinator.harness import WorkerProcess, worker_processes
from tests.fixtures.nodes import NodeProcess, eventually
from tests.tasks.conftest import process_alive, working

executor_app = App(prefix=b"executor-test/")


@executor_app.task(executor="process", soft_timeout=0.5, timeout=60)
def soft(ctx: ProcessContext, pid_file: str) -> dict[str, Any]:
    """Sleep past its soft limit, catch it, and say where it ran."""
    Path(pid_file).write_text(str(os.getpid()))
    try:
        time.sleep(30)
    except SoftTimeout:
        ctx.verify_sync()  # the claim is still held: through the worker to the Lens
        ctx.progress({"caught": True})
        return {"caught": True, "pid": os.getpid(), "key": ctx.key, "attempt": ctx.attempt}
    return {"caught": False}


@executor_app.task(executor="process", timeout=1, retries=1, backoff=Backoff(0.05, 0.05))
def hang(ctx: ProcessContext, marks: str) -> None:
    """Leave this attempt's pid and token, then never return."""
    Path(marks, f"attempt-{ctx.attempt}").write_text(f"{os.getpid()} {ctx.token}")
    while True:
        time.sleep(0.05)


@executor_app.task
def where(ctx: Any) -> int:
    """A sync task naming no executor: the worker's decides."""
    return os.getpid()


async def test_a_soft_timeout_is_caught_by_the_task(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    app = executor_app.using(nodes=forum_node.url, redis=redis_url)
    async with app, working(app) as _:
        handle = await app.enqueue("soft", str(tmp_path / "pid"), _key="soft-1")
        result = await handle.result(timeout=60)
        assert result == {
            "caught": True, "pid": int((tmp_path / "pid").read_text()), "key": "soft-1",
            "attempt": 1,
        }  # fmt: skip
        assert result["pid"] != os.getpid()
        assert (await handle.status()).progress == {"caught": True}


@pytest.mark.slow
async def test_a_hard_timeout_kills_the_process_retries_then_buries(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    app = executor_app.using(nodes=forum_node.url, redis=redis_url)
    async with app, working(app, concurrency=1) as (worker,):
        handle = await app.enqueue("hang", str(tmp_path), _key="hang-1")
        with pytest.raises(JobFailed, match="TimeoutError"):
            await handle.result(timeout=60)
        attempts = [(tmp_path / f"attempt-{n}").read_text().split() for n in (1, 2)]
        (pid1, token1), (pid2, token2) = [(int(p), int(t)) for p, t in attempts]
        assert pid1 != pid2 and int(token2) > int(token1)
        for pid in (pid1, pid2):
            await eventually(lambda pid=pid: not process_alive(pid), 30, f"process {pid} killed")
        # The killed holders' tokens hold nothing: a late effect under them is refused.
        lens = app.lens
        assert isinstance(lens, Lens)
        for token in (token1, token2):
            late = Claim(lens, key="hang-1", owner=worker.owner, token=token, lease=60,
                         deadline=lens.clock() + 60)  # fmt: skip
            with pytest.raises(ClaimLost):
                await lens.record(late, {"state": "done"}, ttl=60)
        # The pool replaced the killed process: the next job runs (in a new child).
        later = await app.enqueue("soft", str(tmp_path / "pid"), _key="soft-after")
        assert (await later.result(timeout=60))["caught"] is True
        assert int((tmp_path / "pid").read_text()) not in (pid1, pid2)


async def test_a_worker_wide_process_executor(forum_node: NodeProcess, redis_url: str) -> None:
    app = executor_app.using(nodes=forum_node.url, redis=redis_url)
    async with app, working(app, executor="process") as _:
        handle = await app.enqueue("where", _key="where-process")
        assert await handle.result(timeout=60) != os.getpid()
    app = executor_app.using(nodes=forum_node.url, redis=redis_url)
    async with app, working(app) as _:
        handle = await app.enqueue("where", _key="where-thread")
        assert await handle.result(timeout=60) == os.getpid()  # threads by default


def test_options_a_process_cannot_honour_are_refused_at_definition() -> None:
    app = App()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"executor": "fork"}, "executor must be 'thread' or 'process'"),
        ({"soft_timeout": 1, "executor": "thread"}, "soft_timeout needs executor='process'"),
        ({"soft_timeout": 5, "timeout": 5}, "must be below timeout"),
        ({"soft_timeout": -1}, "soft_timeout must be a positive number"),
        ({"executor": "process"}, "define it at the top level"),  # a local function
    ]
    for options, said in cases:
        with pytest.raises(InvalidJob, match=said):

            @app.task(**options)
            def local(ctx: Context) -> None: ...

    with pytest.raises(InvalidJob, match="coroutine function"):

        @app.task(executor="process")
        async def coroutine(ctx: Context) -> None: ...


def test_a_worker_refuses_what_its_executor_cannot_run() -> None:
    """App.worker makes its pool with process_pool: refused before any worker runs."""
    local = App()

    @local.task
    def nested(ctx: Context) -> None: ...

    with pytest.raises(InvalidJob, match="define it at the top level"):
        process_pool(local.tasks.values(), "process", 1)
    with pytest.raises(InvalidJob, match="executor must be"):
        process_pool(local.tasks.values(), "fork", 1)
    soft_only = App()
    soft_only.task(soft_timeout=1)(soft.function)
    with pytest.raises(InvalidJob, match="runs in a thread"):
        process_pool(soft_only.tasks.values(), "thread", 1)
    # No task in a process: no pool, no child; the thread executor as it was.
    assert process_pool(local.tasks.values(), "thread", 1) is None
    assert process_pool(executor_app.tasks.values(), "process", 1) is not None


@pytest.mark.slow
async def test_forum_worker_runs_sync_tasks_in_processes(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    """``forum worker --executor process``, a real worker process: a sync
    task naming no executor runs in a child of it; SIGTERM still drains."""
    app = executor_app.using(nodes=forum_node.url, redis=redis_url)
    async with app, worker_processes(tmp_path) as started:
        worker = WorkerProcess(
            "w1", tmp_path / "w1",
            ["--app", "tests.tasks.test_executor:executor_app", "--node", forum_node.url,
             "--redis-url", redis_url, "--take-wait", "0.2", "--executor", "process"],
            {},
        )  # fmt: skip
        started.append(worker)
        await worker.start()
        handle = await app.enqueue("where", _key="where-cli")
        ran_in = await handle.result(timeout=60)
        assert ran_in not in (os.getpid(), worker.pid)
        assert await worker.signal(signal.SIGTERM) == 0
        await eventually(lambda: not process_alive(ran_in), 30, "the worker's child gone with it")
