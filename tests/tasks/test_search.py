"""Counting and searching an app's jobs by the Lens's job index
(``App.counts``, ``App.search``), and the arguments kept after the run.
Real node, Redis and worker."""

from __future__ import annotations

import time

import pytest

from forum.tasks import App, Context, InvalidJob, JobFailed, JobState
from forum.tasks.search import ARGS_PREVIEW, args_preview
from tests.fixtures.nodes import eventually
from tests.tasks.conftest import AppFactory, working


async def _counted(app: App, total: int) -> bool:
    return (await app.counts()).total == total


async def test_counts_and_search_follow_jobs_through_their_run(make_app: AppFactory) -> None:
    app = make_app()

    @app.task(retries=0)
    async def work(ctx: Context, what: str, *, size: int = 1) -> str:
        if what == "fail":
            raise RuntimeError("as asked")
        return what

    @app.task
    async def other(ctx: Context, n: int) -> int:
        return n

    async with app:
        started = time.time()
        done = await work.enqueue("apple pie", size=3, _key="s-done")
        dead = await work.enqueue("fail", _key="s-dead")
        async with working(app):
            assert await done.result(timeout=10) == "apple pie"
            with pytest.raises(JobFailed):
                await dead.result(timeout=10)
        await work.enqueue("later", _key="s-delayed", _delay=600)
        await other.enqueue(7, _key="s-other")
        await app.enqueue_many([work.s("queued", _key="s-queued")])
        # A job due now has its record written just after its enqueue returns.
        await eventually(lambda: _counted(app, 5), what="every record indexed")
        counts = await app.counts()
        assert counts.by_task["work"] == {
            JobState.DONE: 1, JobState.DEAD: 1, JobState.DELAYED: 1, JobState.QUEUED: 1
        }  # fmt: skip
        assert counts.by_task["other"] == {JobState.QUEUED: 1}
        assert counts.by_state[JobState.QUEUED] == 2 and counts.total == 5

        page = await app.search(limit=2)
        assert len(page.jobs) == 2 and page.total == 5 and page.next_cursor is not None
        rest = await app.search(limit=10, cursor=page.next_cursor)
        everything = [job.key for job in page.jobs + rest.jobs]
        assert sorted(everything) == ["s-dead", "s-delayed", "s-done", "s-other", "s-queued"]
        assert rest.next_cursor is None

        (found,) = (await app.search(text="APPLE")).jobs
        # Its arguments outlive the run, as the record that replaced the producer's kept them.
        assert (found.key, found.state, found.args) == (
            "s-done",
            JobState.DONE,
            "'apple pie', size=3",
        )
        assert found.enqueued is not None and started <= found.enqueued <= time.time()
        assert (await app.status("s-done")).args == "'apple pie', size=3"
        dead_page = await app.search(state=JobState.DEAD)
        assert [(job.key, job.state, job.error) for job in dead_page.jobs] == [
            ("s-dead", JobState.DEAD, "RuntimeError: as asked")
        ]
        assert [job.key for job in (await app.search(task="other")).jobs] == ["s-other"]
        assert [job.key for job in (await app.search(key="s-de")).jobs] == ["s-delayed", "s-dead"]
        assert (await app.search(until=started - 1)).jobs == []
        # A delayed job is placed by when it is due.
        assert [job.key for job in (await app.search(since=time.time() + 60)).jobs] == ["s-delayed"]
        with pytest.raises(InvalidJob, match="limit"):
            await app.search(limit=0)
        with pytest.raises(InvalidJob, match="cursor"):
            await app.search(cursor="!!")
        with pytest.raises(InvalidJob, match="expired"):
            await app.search(state=JobState.EXPIRED)


def test_an_arguments_preview_is_bounded_and_says_it_was_cut() -> None:
    assert args_preview((1, "a"), {"k": [1, 2]}) == "1, 'a', k=[1, 2]"
    long = args_preview(("x" * 5000,), {})
    assert len(long) == ARGS_PREVIEW and long.endswith("…")
    assert len(args_preview((list(range(100_000)),), {})) < ARGS_PREVIEW
