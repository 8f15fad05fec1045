"""Per-task policy, run by real workers against a real node and Redis:
retries with backoff, exhaustion to dead with the traceback kept, timeouts,
retry_on / give_up_on, per-enqueue overrides."""

from __future__ import annotations

import asyncio
import threading

import pytest

from forum.coordinator import Backoff, GiveUp, RetryAfter
from forum.node.core.space import Pattern
from forum.tasks import Context, JobFailed, JobState
from forum.tasks.queues import DEFAULT_QUEUE, queue_prefix
from tests.fixtures.nodes import eventually
from tests.tasks.conftest import AppFactory, working

#: Retries come back at once (the policy, not the wait, is under test).
QUICK = Backoff(base=0.01, cap=0.02, jitter=0.0)


async def test_a_failing_task_is_retried_with_backoff_then_succeeds(make_app: AppFactory) -> None:
    app = make_app()
    attempts: list[int] = []

    @app.task(retries=3, backoff=Backoff(base=0.5, cap=10.0, jitter=0.0))
    async def flaky(ctx: Context) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise OSError("disk busy")
        return "ok"

    async with app:
        handle = await flaky.enqueue(_key="flaky")
        async with working(app):
            await eventually(lambda: attempts == [1], what="the first attempt")
            status = await _status_in(handle, JobState.RETRYING)
            assert status.error == "OSError: disk busy" and status.attempt == 1
            # Due one backoff (base 0.5 s, no jitter) after the failure was recorded.
            assert status.due is not None and status.updated is not None
            assert status.due == pytest.approx(status.updated + 0.5, abs=0.05)
            assert await handle.result(timeout=15) == "ok"
    assert attempts == [1, 2]


async def test_exhausted_retries_make_the_job_dead_with_its_traceback(
    make_app: AppFactory,
) -> None:
    app = make_app()
    attempts: list[int] = []

    @app.task(retries=2, backoff=QUICK)
    def always_fails(ctx: Context, n: int) -> None:
        attempts.append(ctx.attempt)
        raise ValueError(f"boom {n}")

    async with app:
        handle = await always_fails.enqueue(3)
        async with working(app):
            with pytest.raises(JobFailed, match="boom 3") as raised:
                await handle.result(timeout=15)
        assert attempts == [1, 2, 3]
        failed = raised.value
        assert failed.error == "ValueError: boom 3"
        assert failed.traceback is not None
        assert "in always_fails" in failed.traceback and "ValueError: boom 3" in failed.traceback
        status = await handle.status()
        assert (status.state, status.attempt) == (JobState.DEAD, 3)
        # The dead letter is in the space, under dead/ + the job's prefix, traceback and all.
        head = queue_prefix(app.prefix, DEFAULT_QUEUE) + handle.key.encode()
        letter = await app.space.read(Pattern(b"dead/" + head))
        assert letter is not None and b"in always_fails" in letter


async def test_a_timeout_cancels_a_hung_async_task(make_app: AppFactory) -> None:
    app = make_app()
    cancelled = asyncio.Event()

    @app.task(timeout=0.2, retries=0)
    async def hangs(ctx: Context) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async with app:
        handle = await hangs.enqueue()
        async with working(app):
            with pytest.raises(JobFailed, match="TimeoutError") as raised:
                await handle.result(timeout=15)
    assert cancelled.is_set()
    assert raised.value.traceback is not None


async def test_a_sync_task_past_its_timeout_fails_its_attempt(make_app: AppFactory) -> None:
    app = make_app()
    unblock = threading.Event()

    @app.task(retries=0)
    def blocks(ctx: Context) -> None:
        unblock.wait(30)

    async with app:
        handle = await blocks.enqueue(_timeout=0.2)  # per enqueue
        try:
            async with working(app):
                with pytest.raises(JobFailed, match="TimeoutError"):
                    await handle.result(timeout=15)
        finally:
            unblock.set()  # the thread itself cannot be stopped: let it end


async def test_give_up_on_and_retry_on_decide_at_once(make_app: AppFactory) -> None:
    app = make_app()
    attempts: dict[str, list[int]] = {"give_up": [], "not_retried": []}

    @app.task(retries=5, backoff=QUICK, give_up_on=KeyError)
    async def give_up(ctx: Context) -> None:
        attempts["give_up"].append(ctx.attempt)
        raise KeyError("missing")

    @app.task(retries=5, backoff=QUICK, retry_on=(OSError,))
    async def not_retried(ctx: Context) -> None:
        attempts["not_retried"].append(ctx.attempt)
        raise ValueError("not an OSError")

    async with app:
        handles = [await give_up.enqueue(), await not_retried.enqueue()]
        async with working(app):
            for handle in handles:
                with pytest.raises(JobFailed):
                    await handle.result(timeout=15)
    assert attempts == {"give_up": [1], "not_retried": [1]}


async def test_retries_are_overridden_per_enqueue(make_app: AppFactory) -> None:
    app = make_app()
    attempts: list[int] = []

    @app.task(retries=0, backoff=QUICK)
    async def once(ctx: Context) -> int:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise RuntimeError("again")
        return ctx.attempt

    async with app:
        handle = await once.enqueue(_retries=2)
        async with working(app):
            assert await handle.result(timeout=15) == 3
    assert attempts == [1, 2, 3]


async def _status_in(handle, state: JobState):  # type: ignore[no-untyped-def]
    found = []

    async def reached() -> bool:
        status = await handle.status()
        found.append(status)
        return status.state is state

    await eventually(reached, what=f"state {state}")
    return found[-1]


async def test_a_task_raising_retry_after_gets_its_own_delay_not_the_backoff(
    make_app: AppFactory,
) -> None:
    app = make_app()
    attempts: list[int] = []

    # A backoff of 100 s: the retry can only come back soon by the task's own delay,
    # and retry_on does not name RetryAfter: asked for, it is retried all the same.
    @app.task(retries=2, backoff=Backoff(base=100.0, cap=300.0, jitter=0.0), retry_on=(OSError,))
    async def rate_limited(ctx: Context) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RetryAfter(0.5, "429: try again in 0.5 s")
        return "ok"

    async with app:
        handle = await rate_limited.enqueue(_key="limited")
        async with working(app):
            status = await _status_in(handle, JobState.RETRYING)
            assert status.error == "429: try again in 0.5 s" and status.attempt == 1
            assert status.due is not None and status.updated is not None
            assert status.due == pytest.approx(status.updated + 0.5, abs=0.05)
            assert await handle.result(timeout=15) == "ok"
    assert attempts == [1, 2]


async def test_a_task_raising_give_up_is_dead_at_once(make_app: AppFactory) -> None:
    app = make_app()
    attempts: list[int] = []

    @app.task(retries=3, backoff=QUICK)
    async def hopeless(ctx: Context) -> None:
        attempts.append(ctx.attempt)
        raise GiveUp("the image is gone")

    async with app:
        handle = await hopeless.enqueue(_key="hopeless")
        async with working(app):
            with pytest.raises(JobFailed, match="the image is gone"):
                await handle.result(timeout=15)
    assert attempts == [1]
