"""Looking after jobs (what ``forum jobs`` calls): listing in every state,
a dead job retried back to work, purging the dead, a key's claim history,
and periodic tasks run by an app's workers. Real node and Redis."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

import pytest

from forum.coordinator import Backoff, KeyState, Lens
from forum.node.core.space import Pattern
from forum.tasks import App, Context, InvalidJob, JobFailed, JobNotFound, JobState
from forum.tasks.authority import TaskAuthority
from tests.fixtures.nodes import eventually
from tests.tasks.conftest import AppFactory, working

QUICK = Backoff(base=0.01, cap=0.02, jitter=0.0)


async def test_jobs_lists_each_state_from_the_space_and_the_lens(make_app: AppFactory) -> None:
    app = make_app()
    go = asyncio.Event()

    @app.task(retries=0)
    async def work(ctx: Context, what: str) -> str:
        if what == "fail":
            raise RuntimeError("as asked")
        if what == "hold":
            await go.wait()
        return what

    async with app:
        done = await work.enqueue("done", _key="j-done")
        dead = await work.enqueue("fail", _key="j-dead")
        async with working(app):
            await done.result(timeout=10)
            with pytest.raises(JobFailed):
                await dead.result(timeout=10)
        await work.enqueue("queued", _key="j-queued")
        await work.enqueue("later", _key="j-delayed", _delay=600)
        async with working(app, concurrency=1):
            held = await work.enqueue("hold", _key="j-running")
            await eventually(lambda: _state_is(held, JobState.RUNNING), what="j-running runs")
            states = {status.key: status.state async for status in app.jobs()}
            running = [status.key async for status in app.jobs(JobState.RUNNING)]
            go.set()
    assert running == ["j-running"]
    assert states["j-running"] is JobState.RUNNING
    assert states["j-done"] is JobState.DONE
    assert states["j-dead"] is JobState.DEAD
    assert states["j-delayed"] is JobState.DELAYED
    # j-queued is queued, or (the worker had a free slot once j-running finished) done.
    assert states["j-queued"] in (JobState.QUEUED, JobState.RUNNING, JobState.DONE)
    async with app:
        assert len([s async for s in app.jobs(limit=2)]) == 2
        with pytest.raises(InvalidJob, match="limit"):
            [s async for s in app.jobs(limit=0)]


async def _state_is(handle, state: JobState) -> bool:  # type: ignore[no-untyped-def]
    return bool((await handle.status()).state is state)


async def test_jobs_reads_the_index_and_the_lens_a_page_of_keys_at_a_time(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()

    @app.task
    async def noop(ctx: Context, n: int) -> None:
        return None

    pages: list[int] = []
    inspect_many = Lens.inspect_many

    async def counted(lens: Lens, keys: Sequence[str]) -> list[KeyState]:
        pages.append(len(keys))
        return await inspect_many(lens, keys)

    async def one_by_one(lens: Lens, key: str) -> KeyState:
        raise AssertionError("a listing inspects a page of keys at once")

    async with app:
        for n in range(250):
            await noop.enqueue(n)
        # Each record is written just after its enqueue returns (forum.tasks.enqueued).
        await eventually(lambda: _indexed(app, 250), what="every record indexed")
        monkeypatch.setattr(Lens, "inspect_many", counted)
        monkeypatch.setattr(Lens, "inspect", one_by_one)
        listed = [status async for status in app.jobs(limit=1000)]
    assert len({status.key for status in listed}) == 250
    assert {(status.task, status.state) for status in listed} == {("noop", JobState.QUEUED)}
    assert pages == [250]  # one page of the index (at most 500), one inspect_many


async def _indexed(app: App, total: int) -> bool:
    return (await app.counts()).total == total


async def test_a_running_job_without_a_record_is_not_listed_but_found(
    make_app: AppFactory, redis_url: str
) -> None:
    # The producer's Redis is down: its enqueue is safe in the space, with no record.
    producer = make_app(redis="redis://127.0.0.1:9/0")
    app = make_app()
    go = asyncio.Event()
    for each in (producer, app):

        @each.task(name="hold")
        async def hold(ctx: Context) -> None:
            await go.wait()

    async with producer:
        await producer.enqueue("hold", _key="unrecorded")
    async with app:
        assert (await app.lens.inspect("unrecorded")).record == {}
        async with working(app, concurrency=1):
            await eventually(_claimed(app.lens, "unrecorded"), what="it runs")
            running = [status async for status in app.jobs(JobState.RUNNING)]
            status = await app.status("unrecorded")
            go.set()
    # No record names its task, so the job index never held it (docs/tasks.md,
    # "The CLI"); its status is still worked out from its claim.
    assert running == []
    assert status.state is JobState.RUNNING


def _claimed(lens: TaskAuthority, key: str) -> Callable[[], Awaitable[bool]]:
    async def claimed() -> bool:
        return (await lens.inspect(key)).claim is not None

    return claimed


async def test_a_dead_job_is_retried_back_to_work_and_dead_ones_purged(
    make_app: AppFactory,
) -> None:
    app = make_app()
    healthy = asyncio.Event()

    @app.task(retries=1, backoff=QUICK)
    async def fragile(ctx: Context, n: int) -> int:
        if not healthy.is_set():
            raise OSError("backend down")
        return n

    async with app:
        first = await fragile.enqueue(1, _key="fragile-1")
        second = await fragile.enqueue(2, _key="fragile-2")
        async with working(app):
            for handle in (first, second):
                with pytest.raises(JobFailed):
                    await handle.result(timeout=10)
            healthy.set()
            retried = await app.retry("fragile-1")
            assert (await retried.status()).state in (JobState.QUEUED, JobState.RUNNING,
                                                     JobState.DONE)  # fmt: skip
            assert await first.result(timeout=10) == 1
        with pytest.raises(InvalidJob, match="no dead letter"):
            await app.retry("fragile-1")
        assert await app.purge() == 1  # fragile-2's letter, and its dead record
        assert await app.space.count(Pattern(app.dead_prefix)) == 0
        with pytest.raises(JobNotFound):
            await app.status("fragile-2")
        assert [s.key async for s in app.jobs(JobState.DEAD)] == []
        with pytest.raises(InvalidJob, match="only dead and done"):
            await app.purge(JobState.QUEUED)
        events = [(e.event, e.attempt) for e in await app.history("fragile-1")]
    assert events == [
        ("claimed", 1), ("released", 1), ("claimed", 2), ("released", 2),
        ("claimed", 1), ("completed", 1),
    ]  # fmt: skip


async def test_a_retried_job_reserved_before_its_claim_is_queued_not_dead(
    make_app: AppFactory,
) -> None:
    """Just after a retry, a worker's node has reserved the requeued tuple
    (hidden on its node) and its claim is not in the Lens yet: the record
    still says dead, the letter is gone, nothing is live. That is a job
    queued again, not dead (reserved here by hand, and never claimed)."""
    app = make_app()

    @app.task(retries=0)
    async def broken(ctx: Context) -> None:
        raise OSError("backend down")

    async with app:
        handle = await broken.enqueue(_key="reserved-1")
        async with working(app):
            with pytest.raises(JobFailed):
                await handle.result(timeout=10)
        await app.retry("reserved-1")
        assert await app.space.reserve(Pattern(app.prefix), lease=30) is not None
        assert (await handle.status()).state is JobState.QUEUED
        assert [s.state async for s in app.jobs()] == [JobState.QUEUED]


async def test_workers_run_each_periodic_slot_once(make_app: AppFactory) -> None:
    app = make_app()
    slots: Counter[str] = Counter()

    @app.cron(every=0.2)
    async def tick(ctx: Context) -> None:
        slots[ctx.key] += 1

    async with working(app, count=2):
        await eventually(lambda: len(slots) >= 3, what="three slots")
    assert all(key.startswith("cron:tick:") for key in slots)
    assert set(slots.values()) == {1}
