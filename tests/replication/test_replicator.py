"""The replicator in-process, against a peer that never answers: writes are not
slowed, the push queue stays bounded, and shutdown does not wait for the peer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from forum.node.core.entries import EntryId, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from forum.replication.auth import ClusterAuth
from forum.replication.config import ReplicationConfig
from forum.replication.messages import Member, PullPage, Push
from forum.replication.metrics import ReplicationMetrics
from forum.replication.replicator import Replicator
from forum.replication.transport import HttpTransport
from forum.replication.vector import VersionVector
from tests.fixtures.nodes import free_port


@pytest.fixture
async def hanging_peer() -> AsyncIterator[tuple[str, list[str]]]:
    """A peer that accepts requests and never answers; yields its URL and the paths hit."""
    hits: list[str] = []

    async def hang(request: web.Request) -> web.Response:
        hits.append(request.path)
        await asyncio.sleep(3600)
        return web.Response()

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hang)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", hits
    finally:
        await runner.cleanup()


async def test_a_hanging_peer_never_slows_writes_and_shutdown_does_not_wait_for_it(
    tmp_path: Path, hanging_peer: tuple[str, list[str]]
) -> None:
    url, hits = hanging_peer
    config = ReplicationConfig(
        queue_entries=10,
        batch_delay=0,
        max_batch=4,
        max_in_flight=2,
        request_timeout=60,
        attempts=1,
    )
    registry = CollectorRegistry()
    cfg = StrandConfig().with_storage(tmp_path).with_node_name("w").with_fsync("never")
    async with (
        Forum(await Strand.open(cfg), remote_delay=0) as forum,
        HttpTransport(ClusterAuth(None), config) as transport,
    ):
        replicator = Replicator(
            forum=forum,
            me=Member(forum.strand.origin, None),
            seeds=[url],
            transport=transport,
            metrics=ReplicationMetrics(registry),
            config=config,
        )
        async with replicator:
            # It answered once (a push is signed for its origin), then hung.
            replicator.membership.contacted(url, Member("hanging-1", url))
            for i in range(200):
                await forum.write(b"job-%d" % i)
            # Two pushes wait on the peer; neither holds up the writes.
            while sum(path.endswith("/push") for path in hits) < 2:
                await asyncio.sleep(0.005)
            [row] = replicator.status()
            assert row.url == url
            assert row.queued <= config.queue_entries
            dropped = registry.get_sample_value(
                "forum_replication_push_dropped_total", {"peer": url, "reason": "queue_full"}
            )
            in_flight = config.max_in_flight * config.max_batch
            assert dropped is not None and dropped >= 200 - config.queue_entries - in_flight
            # The peer holds a push and a pull open for an hour: closing must not wait.
            async with asyncio.timeout(5):
                await replicator.aclose()
        assert forum.stats().writes == 200


async def test_entries_go_to_the_peers_that_need_them_and_never_back(tmp_path: Path) -> None:
    """Local entries go to every peer; pushed ones to the peers their sender did not
    cover, never back to it; pulled ones to nobody (each node pulls for itself)."""
    config = ReplicationConfig()
    cfg = StrandConfig().with_storage(tmp_path).with_node_name("me").with_fsync("never")
    async with (
        Forum(await Strand.open(cfg), remote_delay=0) as forum,
        HttpTransport(ClusterAuth(None), config) as transport,
    ):
        urls = {name: f"http://{name}:1" for name in ("p", "q", "r")}
        replicator = Replicator(
            forum=forum,
            me=Member(forum.strand.origin, None),
            seeds=list(urls.values()),
            transport=transport,
            metrics=ReplicationMetrics(CollectorRegistry()),
            config=config,
        )
        # The peer table without the links' tasks: the outboxes only fill.
        forum.add_listener(replicator._on_entries)
        replicator.membership.start(replicator)
        for name, url in urls.items():
            replicator.membership.contacted(url, Member(f"{name}-1", url))

        def queued() -> dict[str, int]:
            return {row.origin[0]: row.queued for row in replicator.status()}

        await forum.write(b"local")
        assert queued() == {"p": 1, "q": 1, "r": 1}

        push = Push(Member("p-1", urls["p"]), frozenset({"q-1"}), (Write(EntryId("p-1", 1), b"x"),))
        await replicator.receive_push(push, 0)
        assert queued() == {"p": 1, "q": 1, "r": 2}  # not back to p, not to q (p covers it)

        page = PullPage(
            Member("q-1", urls["q"]), VersionVector(), (Write(EntryId("q-1", 1), b"y"),), False, ()
        )
        await replicator._apply_page(page)
        assert queued() == {"p": 1, "q": 1, "r": 2}
        assert await forum.count(Pattern(b"")) == 3


async def test_no_push_goes_to_a_peer_before_its_origin_is_known(
    tmp_path: Path, hanging_peer: tuple[str, list[str]]
) -> None:
    """A push is signed for its receiver's origin, so it waits until the peer is known:

    t0  a seed that has not answered yet: the first pull (for anyone) waits on it
    t1  writes queue for it, and no push is sent
    t2  it is known (here: as if that pull had answered): the queued entries go out
    """
    url, hits = hanging_peer
    config = ReplicationConfig(batch_delay=0, attempts=1, request_timeout=60)
    cfg = StrandConfig().with_storage(tmp_path).with_node_name("w").with_fsync("never")
    async with (
        Forum(await Strand.open(cfg), remote_delay=0) as forum,
        HttpTransport(ClusterAuth("s3cret"), config) as transport,
    ):
        replicator = Replicator(
            forum=forum,
            me=Member(forum.strand.origin, None),
            seeds=[url],
            transport=transport,
            metrics=ReplicationMetrics(CollectorRegistry()),
            config=config,
        )
        async with replicator:
            while not hits:  # the first anti-entropy pull, which never gets an answer
                await asyncio.sleep(0.005)
            await forum.write(b"job-1")
            await asyncio.sleep(0.1)  # room for a push that must not be sent
            assert [path.rpartition("/")[2] for path in hits] == ["pull"]
            assert replicator.status()[0].queued == 1
            replicator.membership.contacted(url, Member("hanging-1", url))
            while "push" not in [path.rpartition("/")[2] for path in hits]:
                await asyncio.sleep(0.005)
