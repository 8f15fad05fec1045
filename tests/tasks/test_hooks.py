"""Lifecycle hooks and middleware (forum.tasks.hooks), run by real workers
against a real node and Redis: their order around a job, what each is
given, what their errors do, and a ``forum worker`` process's startup state
and its shutdown after a SIGTERM drain."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from forum.coordinator import Backoff
from forum.tasks import App, Context, JobFailed, JobInfo, JobState, StartupFailed
from tests.coordinator.harness import WorkerProcess, worker_processes
from tests.fixtures.nodes import NodeProcess, eventually
from tests.tasks.conftest import AppFactory, working

#: Retries come back at once (the hooks, not the wait, are under test).
QUICK = Backoff(base=0.01, cap=0.02, jitter=0.0)

Next = Callable[[], Awaitable[Any]]


def test_hooks_are_checked_when_registered() -> None:
    app = App()
    with pytest.raises(ValueError, match="a before_job hook is a function, not 42"):
        app.before_job(42)  # type: ignore[type-var]

    def sync_middleware(job: JobInfo, call_next: Next) -> Any:
        return call_next()

    with pytest.raises(ValueError, match="a middleware is an async callable"):
        app.add_middleware(sync_middleware)  # type: ignore[arg-type]

    class Timing:
        async def __call__(self, job: JobInfo, call_next: Next) -> Any:
            return await call_next()

    with pytest.raises(ValueError, match="a middleware is an async callable"):
        app.add_middleware(Timing)  # type: ignore[arg-type]  # the class, not an instance
    app.add_middleware(Timing())

    @app.on_startup
    def start(state: dict[str, Any]) -> None: ...

    assert start.__name__ == "start"  # the function itself, still callable as it was
    assert app.using(redis="redis://elsewhere:1/0").hooks is app.hooks  # forum worker's copy


async def test_middleware_and_hooks_run_in_order_around_async_and_sync_tasks(
    make_app: AppFactory,
) -> None:
    app = make_app()
    events: list[str] = []

    async def outer(job: JobInfo, call_next: Next) -> Any:
        events.append(f"outer in {job.task}")
        try:
            return await call_next()
        finally:
            events.append("outer out")

    class Inner:
        async def __call__(self, job: JobInfo, call_next: Next) -> Any:
            events.append("inner in")
            result = await call_next()
            events.append(f"inner out {result}")
            return result

    app.add_middleware(outer)
    app.add_middleware(Inner())

    @app.before_job
    async def first(job: JobInfo) -> None:
        events.append(f"before {job.key} {job.attempt} {job.args} {dict(job.kwargs)}")

    @app.before_job
    def second(job: JobInfo) -> None:  # a sync hook: in a thread, off the loop
        assert threading.current_thread() is not threading.main_thread()
        events.append("before (sync)")

    @app.after_job
    async def after(job: JobInfo, result: Any) -> None:
        # Its result is recorded before the after_job hooks run (the claim
        # is completed once they have: the job's status says running until then).
        record = (await app.lens.inspect(job.key)).record
        events.append(f"after {result} (recorded: {record['state'].decode()})")

    @app.task
    async def add(ctx: Context, a: int, b: int) -> int:
        events.append("add")
        return a + b

    @app.task
    def shout(ctx: Context, word: str) -> str:
        events.append(f"shout on {threading.current_thread().name.split('_')[0]}")
        return word.upper()

    async with app:
        one = await add.enqueue(1, b=2, _key="add-1")
        async with working(app):
            assert await one.result(timeout=15) == 3
            await eventually(lambda: events[-1].startswith("after"), what="after_job")
            first_run = list(events)
            events.clear()
            two = await shout.enqueue("hi", _key="shout-1")
            assert await two.result(timeout=15) == "HI"
            await eventually(lambda: events[-1].startswith("after"), what="after_job")
    assert first_run == [
        "outer in add",
        "inner in",
        "before add-1 1 (1,) {'b': 2}",
        "before (sync)",
        "add",
        "inner out 3",
        "outer out",
        "after 3 (recorded: done)",
    ]
    assert events == [
        "outer in shout",
        "inner in",
        "before shout-1 1 ('hi',) {}",
        "before (sync)",
        "shout on task",  # the worker's task thread pool, inside the middleware
        "inner out HI",
        "outer out",
        "after HI (recorded: done)",
    ]


async def test_on_failure_sees_the_error_and_whether_it_is_retried(make_app: AppFactory) -> None:
    app = make_app()
    failures: list[tuple[int, str, bool]] = []
    seen: list[str] = []

    @app.on_failure
    def failed(job: JobInfo, error: Exception, retrying: bool) -> None:
        failures.append((job.attempt, repr(error), retrying))

    @app.after_job
    def after(job: JobInfo, result: Any) -> None:
        seen.append(job.key)

    @app.task(retries=1, backoff=QUICK)
    async def broken(ctx: Context) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    async with app:
        handle = await broken.enqueue(_key="broken")
        async with working(app):
            with pytest.raises(JobFailed, match="attempt 2"):
                await handle.result(timeout=15)
            await eventually(lambda: len(failures) == 2, what="the second on_failure")
    assert failures == [
        (1, "ValueError('attempt 1')", True),
        (2, "ValueError('attempt 2')", False),
    ]
    assert seen == []  # no after_job for a failure


async def test_a_raising_after_job_or_on_failure_changes_no_outcome(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    runs: list[str] = []

    @app.after_job
    async def broken_after(job: JobInfo, result: Any) -> None:
        raise RuntimeError("metrics are down")

    @app.on_failure
    def broken_on_failure(job: JobInfo, error: Exception, retrying: bool) -> None:
        raise RuntimeError("alerts are down")

    @app.task(retries=0)
    async def works(ctx: Context) -> str:
        runs.append(ctx.key)
        return "kept"

    @app.task(retries=1, backoff=QUICK)
    async def flaky(ctx: Context) -> str:
        runs.append(f"{ctx.key} {ctx.attempt}")
        if ctx.attempt == 1:
            raise OSError("once")
        return "second time"

    async with app:
        done = await works.enqueue(_key="works")
        retried = await flaky.enqueue(_key="flaky")
        with caplog.at_level(logging.ERROR, logger="forum.tasks.hooks"):
            async with working(app):
                assert await done.result(timeout=15) == "kept"
                assert await retried.result(timeout=15) == "second time"
        status = await done.status()
        assert (status.state, status.attempt) == (JobState.DONE, 1)  # completed, not re-run
    assert sorted(runs) == ["flaky 1", "flaky 2", "works"]
    logged = [r.getMessage() for r in caplog.records]
    assert any("after_job hook" in m and "broken_after raised" in m for m in logged), logged
    assert any("on_failure hook" in m and "broken_on_failure raised" in m for m in logged), logged


async def test_a_raising_before_job_fails_the_attempt_and_a_middleware_sets_the_result(
    make_app: AppFactory,
) -> None:
    app = make_app()

    async def tenfold(job: JobInfo, call_next: Next) -> Any:
        return 10 * await call_next()

    app.add_middleware(tenfold)
    ran: list[int] = []

    @app.before_job
    async def gate(job: JobInfo) -> None:
        if job.attempt == 1:
            raise ConnectionError("not yet")

    @app.task(retries=1, backoff=QUICK)
    async def guarded(ctx: Context) -> int:
        ran.append(ctx.attempt)
        return ctx.attempt

    async with app:
        handle = await guarded.enqueue()
        async with working(app):
            assert await handle.result(timeout=15) == 20  # what the middleware returned
    assert ran == [2]  # attempt 1 failed in its hook: the task did not run


async def test_startup_state_reaches_tasks_and_shutdown_follows_the_drain(
    make_app: AppFactory,
) -> None:
    app = make_app()
    events: list[str] = []
    running = asyncio.Event()

    @app.on_startup
    async def open_pool(state: dict[str, Any]) -> None:
        events.append("startup")
        state["pool"] = "pool-1"

    @app.on_shutdown
    def close_pool(state: dict[str, Any]) -> None:
        events.append(f"shutdown {state.pop('pool')}")

    @app.task
    async def uses_pool(ctx: Context) -> str:
        events.append("job")
        running.set()
        await asyncio.sleep(0.5)  # still running when the worker is stopped
        events.append("job done")
        return str(ctx.state["pool"])

    async with app:
        handle = await uses_pool.enqueue()
        async with working(app):
            await asyncio.wait_for(running.wait(), 15)
        assert await handle.result(timeout=15) == "pool-1"
    assert events == ["startup", "job", "job done", "shutdown pool-1"]


async def test_a_failing_startup_hook_stops_the_worker_before_any_job(
    make_app: AppFactory,
) -> None:
    app = make_app()

    @app.on_startup
    def no_db(state: dict[str, Any]) -> dict[str, str]:
        return {"db": "a value returned, not put in the state"}

    stopped: list[str] = []

    @app.on_shutdown
    def close(state: dict[str, Any]) -> None:
        stopped.append("shutdown")

    @app.task
    async def never(ctx: Context) -> None: ...

    with pytest.raises(ExceptionGroup) as raised:
        async with working(app):
            await asyncio.sleep(0)
    assert raised.group_contains(StartupFailed, match="put.* in its state argument")
    assert stopped == []  # nothing was started, so nothing is shut down


# -- a real worker process -----------------------------------------------------------

#: The process test's app: its hooks write their events to $HOOKS_LOG.
process_app = App(prefix=b"hooks-test/")


@process_app.on_startup
async def _open(state: dict[str, Any]) -> None:
    state["log"] = Path(os.environ["HOOKS_LOG"])
    state["pid"] = os.getpid()
    _note(state, "startup")


@process_app.on_shutdown
def _close(state: dict[str, Any]) -> None:
    _note(state, "shutdown")


@process_app.task(retries=0)
async def slow(ctx: Context) -> int:
    _note(ctx.state, "job started")
    await asyncio.sleep(1.0)  # SIGTERM comes meanwhile: the drain lets it finish
    _note(ctx.state, "job finished")
    return int(ctx.state["pid"])


def _note(state: dict[str, Any], event: str) -> None:
    with state["log"].open("a") as log:
        log.write(event + "\n")


@pytest.mark.slow
async def test_a_worker_process_runs_startup_then_shutdown_after_its_sigterm_drain(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    events = tmp_path / "events"
    app = process_app.using(nodes=forum_node.url, redis=redis_url)
    async with app, worker_processes(tmp_path) as started:
        handle = await app.enqueue("slow", _key="slow-1")
        worker = WorkerProcess(
            "w1", tmp_path / "w1",
            ["--app", "tests.tasks.test_hooks:process_app", "--node", forum_node.url,
             "--redis-url", redis_url, "--take-wait", "0.2"],
            {"HOOKS_LOG": str(events)},
        )  # fmt: skip
        started.append(worker)
        await worker.start()
        await eventually(lambda: "job started" in _read(events), 30, "the worker to start the job")
        pid = worker.pid
        assert await worker.signal(signal.SIGTERM) == 0, worker.log_text()
        assert _read(events) == ["startup", "job started", "job finished", "shutdown"]
        assert await handle.result(timeout=10) == pid  # the startup state, in the task


def _read(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


#: An app whose startup hook fails, as one whose database is down would.
broken_app = App(prefix=b"hooks-broken/")


@broken_app.on_startup
async def _connect(state: dict[str, Any]) -> None:
    raise ConnectionRefusedError("the database is down")


@broken_app.task
async def _never(ctx: Context) -> None: ...


@pytest.mark.slow
async def test_a_worker_process_whose_startup_hook_fails_says_so_in_one_line_and_exits_1(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    async with worker_processes(tmp_path) as started:
        worker = WorkerProcess(
            "w1", tmp_path / "w1",
            ["--app", "tests.tasks.test_hooks:broken_app", "--node", forum_node.url,
             "--redis-url", redis_url],
            {},
        )  # fmt: skip
        started.append(worker)
        await worker.start()
        assert await worker.exit_code() == 1, worker.log_text()
    log = worker.log_text()
    assert log.splitlines()[-1] == (
        "forum worker: startup hook _connect failed: ConnectionRefusedError: the database is down"
    ), log
    assert "ExceptionGroup" not in log  # the hook's own traceback is logged, once
    assert log.count("Traceback") == 1
