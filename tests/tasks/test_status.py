"""A job's status in each state, and its result, against a real node and
Redis (the algorithm: tasks/forum/tasks/status.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from forum.coordinator import Backoff
from forum.coordinator.deadletter import bury
from forum.coordinator.envelope import Envelope
from forum.node.core.space import Pattern
from forum.tasks import (
    App,
    Context,
    JobCancelled,
    JobExpired,
    JobNotFound,
    JobState,
    JobStatus,
    ResultTimeout,
)
from forum.tasks.handle import JobHandle
from forum.tasks.message import Message
from forum.tasks.status import job_status
from tests.fixtures.nodes import eventually
from tests.tasks.conftest import AppFactory, working


async def status_reaching(handle: JobHandle, state: JobState) -> JobStatus:
    """Poll ``handle`` until its state is ``state``; that status."""
    found: list[JobStatus] = []

    async def reached() -> bool:
        found.append(await handle.status())
        return found[-1].state is state

    await eventually(reached, what=f"state {state}")
    return found[-1]


async def test_queued_running_with_progress_then_done(make_app: AppFactory) -> None:
    app = make_app()
    go = asyncio.Event()

    @app.task
    async def slow(ctx: Context, n: int) -> dict[str, int]:
        ctx.progress({"step": 1})
        await go.wait()
        return {"n": n}

    async with app:
        handle = await slow.enqueue(5, _key="slow-5")
        queued = await handle.status()
        assert (queued.state, queued.task, queued.key) == (JobState.QUEUED, "slow", "slow-5")
        async with working(app, owner="worker-x"):
            running = await status_reaching(handle, JobState.RUNNING)
            assert (running.worker, running.attempt, running.task) == ("worker-x", 1, "slow")
            await eventually(
                lambda: _progress(handle, {"step": 1}), what="the progress in the record"
            )
            with pytest.raises(ResultTimeout, match="it is running"):
                await handle.result(timeout=0.1)
            go.set()
            assert await handle.result(timeout=10) == {"n": 5}
        done = await handle.status()
        assert (done.state, done.result, done.attempt) == (JobState.DONE, {"n": 5}, 1)
        assert done.token == running.token


async def _progress(handle: JobHandle, value: object) -> bool:
    return (await handle.status()).progress == value


async def test_a_delayed_job_is_delayed_until_due(make_app: AppFactory) -> None:
    app = make_app()

    @app.task
    async def later(ctx: Context) -> None: ...

    async with app:
        before = time.time()
        handle = await later.enqueue(_delay=600)
        status = await handle.status()
        assert status.state is JobState.DELAYED
        assert status.due is not None and status.due >= before + 600
        at = await later.enqueue(_key="at", _not_before=before + 900)
        assert (await at.status()).due == pytest.approx(before + 900)


async def test_a_job_whose_ttl_ran_out_is_expired(make_app: AppFactory) -> None:
    app = make_app()

    @app.task
    async def brief(ctx: Context) -> None: ...

    async with app:
        handle = await brief.enqueue(_ttl=0.2)
        await status_reaching(handle, JobState.EXPIRED)
        with pytest.raises(JobExpired):
            await handle.result(timeout=1)


async def test_a_cancelled_job_never_runs(make_app: AppFactory) -> None:
    app = make_app()
    ran: list[str] = []

    @app.task
    async def unwanted(ctx: Context) -> None:
        ran.append(ctx.key)

    async with app:
        handle = await unwanted.enqueue(_key="unwanted")
        outcome = await app.cancel("unwanted")
        assert outcome.state == "cancelled"
        assert (await handle.status()).state is JobState.CANCELLED
        async with working(app):
            # The copy in the space is turned away as done, and acked.
            await eventually(
                lambda: _count(app.space, app.prefix, 0), what="the cancelled copy acked"
            )
        with pytest.raises(JobCancelled):
            await handle.result(timeout=1)
        assert (await app.cancel("unwanted")).state == "done"
    assert ran == []


async def _count(space, prefix: bytes, n: int) -> bool:  # type: ignore[no-untyped-def]
    return bool(await space.count(Pattern(prefix)) == n)


async def test_a_key_nothing_knows_is_not_found(make_app: AppFactory) -> None:
    app = make_app()
    async with app:
        with pytest.raises(JobNotFound, match="'never'"):
            await app.job("never").status()
        with pytest.raises(JobNotFound):
            await app.job("never").result(timeout=1)
        with pytest.raises(JobNotFound):
            await app.cancel("never")


async def test_a_dead_letter_outranks_a_retrying_record(make_app: AppFactory) -> None:
    """A job buried by a worker (its workers kept dying: forum.coordinator.worker's
    LOST_WORKER) leaves the record of its last failure as it was: the dead
    letter in the space decides."""
    app = make_app()

    @app.task(retries=3, backoff=Backoff(base=600, cap=600, jitter=0.0))
    async def fails(ctx: Context) -> None:
        raise OSError("first attempt")

    async with app:
        handle = await fails.enqueue(_key="buried")
        async with working(app):
            await status_reaching(handle, JobState.RETRYING)
        letter = Envelope(
            Message("buried", "fails").encode(app.prefix, app.serializer),
            key="buried", attempt=2, error="the worker was lost: its lease expired",
        )  # fmt: skip
        await app.space.write(bury(letter, app.dead_prefix))
        status = await handle.status()
        assert (status.state, status.attempt) == (JobState.DEAD, 2)
        assert status.error == "the worker was lost: its lease expired"


class _ClaimsAfterFirstLook:
    """The app's node, whose dead-letter read (the last of a look's reads)
    has a worker claim the job right after it: the job is caught between its
    node reservation and its claim at the first look."""

    def __init__(self, app: App, key: str) -> None:
        self._app, self._key = app, key
        self.looks = 0

    async def read(self, pattern: Pattern) -> bytes | None:
        found = await self._app.space.read(pattern)
        if pattern.prefix.startswith(self._app.dead_prefix):
            self.looks += 1
            if self.looks == 1:
                await self._app.lens.claim(self._key, owner="worker-late", lease=30)
        return found


async def test_a_job_between_its_reservation_and_its_claim_is_running_not_missing(
    make_app: AppFactory,
) -> None:
    """No producer record (written by hand), the tuple reserved (hidden on its
    node), no claim yet at the first look: the second look sees the claim."""
    app = make_app()
    async with app:
        payload = Message("late-1", "late").encode(app.prefix, app.serializer)
        await app.space.write(payload)
        assert await app.space.reserve(Pattern(app.prefix), lease=30) is not None
        space = _ClaimsAfterFirstLook(app, "late-1")
        status = await job_status(
            "late-1",
            lens=app.lens,
            space=space,
            prefix=app.prefix,
            dead_prefix=app.dead_prefix,
            serializer=app.serializer,
        )
        # Two looks, each reading two dead letters: in the default queue, and
        # as written before queues.
        assert (status.state, status.worker, space.looks) == (JobState.RUNNING, "worker-late", 4)
