"""``enqueue(_copies=...)``: the job's write is answered once so many nodes
hold it, against real ``forum serve`` nodes and a real ``redis-server``."""

from __future__ import annotations

import shutil

import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.errors import CopiesShort, NodeRejected
from forum.node.core.space import Pattern
from forum.tasks import App, Context, InvalidJob, JobState
from tests.fixtures.nodes import ForumNodes, eventually
from tests.replication.conftest import mesh
from tests.tasks.conftest import AppFactory


async def test_a_bad_copies_is_invalid_input_and_enqueues_nothing(make_app: AppFactory) -> None:
    app = make_app()

    @app.task
    async def job(ctx: Context) -> None:
        return None

    async with app:
        with pytest.raises(InvalidJob, match=r"^_copies must be at least 1"):
            await job.enqueue(_copies=0)
        with pytest.raises(InvalidJob, match=r"^_copies is a whole number"):
            await job.enqueue(_copies="2")
        with pytest.raises(NodeRejected, match="copies=2 but the cluster has 1 member"):
            await job.enqueue(_copies=2)  # one node: judged by it, before writing
        assert await app.space.count(Pattern(b"")) == 0
        await job.enqueue(_copies=1)
        assert await app.space.count(Pattern(b"")) == 1


@pytest.mark.slow
async def test_a_job_enqueued_with_copies_2_outlives_its_node_and_disk(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    a_node, b_node = mesh(forum_nodes, "ab", env={"FORUM_REMOTE_HOLD": "0.1"})
    await forum_nodes.start_all()
    app = App(nodes=a_node.url, redis=redis_url)

    @app.task
    async def charge(ctx: Context, order: int) -> None:
        return None

    async with app, ForumClient(b_node.url) as b:
        await eventually(lambda: _sees_peer(app), 20, "A sees B")
        handles = [await charge.enqueue(n, _copies=2) for n in range(5)]
        await a_node.kill()
        shutil.rmtree(a_node.data_dir)
        await eventually(lambda: _count(b, 5), 20, "B holds the five jobs")
    assert len({h.key for h in handles}) == 5


@pytest.mark.slow
async def test_a_job_short_of_its_copies_is_enqueued_all_the_same(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    b_node = forum_nodes.make("b")
    a_node = await forum_nodes.start("a", "--peer", b_node.url, "--copies-timeout", "0.3")
    app = App(nodes=a_node.url, redis=redis_url)

    @app.task
    async def charge(ctx: Context, order: int) -> None:
        return None

    async with app:
        with pytest.raises(CopiesShort) as short:
            await charge.enqueue(7, _key="order-7", _copies=2)
        assert (short.value.held, short.value.copies) == (1, 2)
        status = await app.status("order-7")
        assert status.state is JobState.QUEUED
        assert await app.space.count(Pattern(b"")) == 1


async def _sees_peer(app: App) -> bool:
    peers = (await app.space.status()).peers
    return len(peers) == 1 and peers[0].state == "alive"


async def _count(client: ForumClient, count: int) -> bool:
    return await client.count(Pattern(b"")) == count
