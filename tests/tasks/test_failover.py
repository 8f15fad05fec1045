"""Enqueue fails over across an app's nodes (real ``forum serve`` processes)."""

from __future__ import annotations

import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.errors import NodeUnavailable
from forum.node.core.space import Pattern
from forum.tasks import App, Context, JobFailed, JobNotFound, JobState
from tests.fixtures.nodes import ForumNodes
from tests.tasks.conftest import working


async def test_enqueue_fails_over_when_the_first_node_is_down(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    down = forum_nodes.make("down")  # never started: its port refuses
    first = await forum_nodes.start("first")
    second = await forum_nodes.start("second")
    app = App([down.url, first.url, second.url], redis_url)

    @app.task
    def job(ctx: Context, n: int) -> None: ...

    async with app:
        handle = await job.enqueue(1)
        # Sticky: the next call goes to the node that answered, not back to the first.
        await job.enqueue(2)
        assert (await handle.status()).task == "job"
        await first.kill()
        await job.enqueue(3)
    async with ForumClient(second.url) as space:
        assert await space.count(Pattern(app.prefix)) == 1
    await first.restart()
    async with ForumClient(first.url) as space:
        assert await space.count(Pattern(app.prefix)) == 2


async def test_admin_calls_fail_over_when_the_first_node_is_down(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    down = forum_nodes.make("down")  # never started: its port refuses
    live = await forum_nodes.start("live")
    app = App([down.url, live.url], redis_url)

    @app.task(retries=0)
    def bad(ctx: Context, n: int) -> None:
        raise RuntimeError(f"bad {n}")

    async with app:
        dead = [await bad.enqueue(n, _key=f"bad-{n}") for n in (1, 2)]
        later = await bad.enqueue(3, _key="later", _delay=600)
        async with working(app, url=live.url):
            for handle in dead:
                with pytest.raises(JobFailed):
                    await handle.result(timeout=15)
    # Each call on a newly opened app: its first try is the node that is down.
    async with app:
        listed = {status.key: status.state async for status in app.jobs()}
    assert listed == {"bad-1": JobState.DEAD, "bad-2": JobState.DEAD, "later": JobState.DELAYED}
    async with app:
        assert (await app.status("bad-1")).state is JobState.DEAD
    async with app:
        assert (await app.cancel(later.key)).state == "cancelled"
    async with app:
        await app.retry("bad-1")
    async with app:
        assert await app.purge() == 1
    async with app:
        assert (await app.status("bad-1")).state is JobState.QUEUED
        with pytest.raises(JobNotFound):
            await app.status("bad-2")


async def test_no_node_answering_is_node_unavailable(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    app = App([forum_nodes.make("a").url, forum_nodes.make("b").url], redis_url)

    @app.task
    def job(ctx: Context) -> None: ...

    async with app:
        with pytest.raises(NodeUnavailable):
            await job.enqueue()


def test_bad_node_urls_are_one_line() -> None:
    with pytest.raises(ValueError, match="no http:// or https:// scheme"):
        App("127.0.0.1:7070")
    with pytest.raises(ValueError, match="no node URL"):
        App([])
    assert App("http://a:1, http://b:2/").nodes == ("http://a:1", "http://b:2")
