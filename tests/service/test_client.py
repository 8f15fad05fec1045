"""ForumClient and SyncForumClient against real nodes: batches, status, auth,
and clear errors for every way a request can fail."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.client.sync import SyncForumClient
from forum.node.core.errors import (
    ClientError,
    ForumError,
    NodeRejected,
    NodeTimeout,
    NodeUnavailable,
    PayloadTooLarge,
    Unauthorized,
)
from forum.node.core.space import Pattern
from tests.fixtures.nodes import ForumNodes, NodeProcess, free_port


async def test_batches(client: ForumClient) -> None:
    payloads = [f"b-{i}".encode() for i in range(100)] + [b"b-\x00\xff"]
    ids = await client.write_many(payloads)
    assert len(set(ids)) == 101
    assert await client.write_many([]) == []
    taken = await client.take_many(Pattern(b"b-"), 60)
    assert [t.payload for t in taken] == payloads[:60]
    assert [t.id for t in taken] == ids[:60]
    rest = await client.take_many(Pattern(b"b-"), 1000, timeout=0.1)
    assert [t.payload for t in rest] == payloads[60:]
    assert await client.take_many(Pattern(b"b-"), 10) == []


async def test_list_and_status(client: ForumClient, forum_node: NodeProcess) -> None:
    await client.write_many([b"l-1", b"l-2", b"l-3"])
    page = await client.list(Pattern(b"l-"), limit=2)
    assert [t.payload for t in page.tuples] == [b"l-1", b"l-2"]
    assert page.next_cursor is not None
    page = await client.list(Pattern(b"l-"), cursor=page.next_cursor, limit=2)
    assert ([t.payload for t in page.tuples], page.next_cursor) == ([b"l-3"], None)
    status = await client.status()
    assert (status.node_id, status.live, status.writes) == ("n1", 3, 3)
    assert status.advertise == forum_node.url
    assert await client.ready()


async def test_token(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("locked", token="t0ken")
    async with ForumClient(node.url, token="t0ken") as client:
        await client.write(b"job-1")
        assert await client.count(Pattern(b"job-")) == 1
    for token in (None, "wrong"):
        async with ForumClient(node.url, token=token) as client:
            with pytest.raises(Unauthorized) as raised:
                await client.take(Pattern(b"job-"))
            assert raised.value.status == 401 and raised.value.code == "unauthorized"
            assert node.url in str(raised.value)
            # The probes stay open: load balancers carry no secrets.
            assert await client.ready()
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{node.url}/metrics") as response:
            assert response.status == 401
        headers = {"Authorization": "Bearer t0ken"}
        async with http.get(f"{node.url}/metrics", headers=headers) as response:
            assert response.status == 200


async def test_cluster_routes_need_the_cluster_secret_not_the_token(
    forum_nodes: ForumNodes,
) -> None:
    node = await forum_nodes.start("cluster", "--cluster-secret", "c1", token="t0ken")
    async with aiohttp.ClientSession() as http:
        url = f"{node.url}/v1/cluster/anything"
        for header, status in (("Bearer t0ken", 401), ("Bearer c1", 404)):
            async with http.get(url, headers={"Authorization": header}) as response:
                assert response.status == status


async def test_payload_too_large(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("small", "--max-payload", "100")
    async with ForumClient(node.url) as client:
        with pytest.raises(PayloadTooLarge) as raised:
            await client.write(b"x" * 101)
        assert raised.value.code == "payload_too_large"
        with pytest.raises(PayloadTooLarge):
            await client.write_many([b"ok", b"x" * 101])
        assert await client.count(Pattern(b"")) == 0


async def test_node_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with ForumClient(url) as client:
        with pytest.raises(NodeUnavailable) as raised:
            await client.write(b"x")
    assert raised.value.retriable and url in str(raised.value)
    assert isinstance(raised.value, ClientError) and isinstance(raised.value, ForumError)


async def test_node_timeout() -> None:
    """A peer that accepts connections and never answers (a hung node)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        async with ForumClient(url, timeout=0.3) as client:
            with pytest.raises(NodeTimeout) as raised:
                await client.count(Pattern(b""))
    assert isinstance(raised.value, TimeoutError) and isinstance(raised.value, NodeUnavailable)
    assert "no answer within" in str(raised.value)


async def test_rejected_request_has_code_and_message(client: ForumClient) -> None:
    with pytest.raises(ValueError, match="limit"):
        await client.take_many(Pattern(b""), 0)
    with pytest.raises(NodeRejected) as raised:
        await client.list(Pattern(b""), limit=5000)
    assert (raised.value.status, raised.value.code) == (400, "invalid_parameter")
    assert not raised.value.retriable


async def test_bad_url() -> None:
    with pytest.raises(ValueError, match="http"):
        ForumClient("127.0.0.1:7070")


async def test_many_concurrent_requests_share_the_pool(client: ForumClient) -> None:
    ids = await asyncio.gather(*(client.write(f"c-{i}".encode()) for i in range(200)))
    assert len(set(ids)) == 200
    taken = await asyncio.gather(*(client.take(Pattern(b"c-")) for _ in range(200)))
    assert sorted(t for t in taken if t is not None) == sorted(
        f"c-{i}".encode() for i in range(200)
    )


def test_sync_client(forum_node: NodeProcess) -> None:
    with SyncForumClient(forum_node.url) as space:
        entry_id = space.write(b"sync-1")
        space.write_many([b"sync-2", b"sync-3"])
        assert space.count(Pattern(b"sync-")) == 3
        assert space.read(Pattern(b"sync-")) == b"sync-1"
        taken = space.take_entry(Pattern(b"sync-"))
        assert taken is not None and taken.id == entry_id
        assert [t.payload for t in space.take_many(Pattern(b"sync-"), 5)] == [b"sync-2", b"sync-3"]
        assert space.take(Pattern(b"sync-"), timeout=0.1) is None
        assert space.status().takes == 3
    space.close()  # idempotent
