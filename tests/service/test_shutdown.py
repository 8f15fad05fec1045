"""Graceful shutdown and restarts: SIGTERM ends long polls at once and exits 0;
every write the node acknowledged is there after a restart (SIGTERM or kill -9)."""

from __future__ import annotations

import asyncio
import signal

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.entries import EntryId
from forum.node.core.errors import ClientError
from forum.node.core.space import Pattern
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually


async def _waiting(http: aiohttp.ClientSession, url: str) -> bool:
    async with http.get(f"{url}/v1/status") as response:
        return int((await response.json())["long_polls"]) > 0


async def test_sigterm_during_a_long_poll(forum_node: NodeProcess) -> None:
    """t0: a take waits (wait=60); t1: SIGTERM; t2: the take gets 204 at once;
    t3: the node exits 0, long before the wait would have ended."""
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as http:
        async with asyncio.TaskGroup() as group:
            poll = group.create_task(
                _take_status(http, f"{forum_node.url}/v1/take?prefix=j&wait=60")
            )
            await eventually(lambda: _waiting(http, forum_node.url), what="the take waiting")
            started = loop.time()
            code = await forum_node.stop()
        assert poll.result() == 204
        assert code == 0
        assert loop.time() - started < 10
    assert "shutting down" in forum_node.log_text()


async def _take_status(http: aiohttp.ClientSession, url: str) -> int:
    async with http.post(url) as response:
        await response.read()
        return response.status


async def test_sigint_also_shuts_down_cleanly(forum_node: NodeProcess) -> None:
    # end() sends only SIGINT and waits; a SIGTERM sent after it could land
    # once the node has removed its handlers, on its way out.
    assert await forum_node.end(signal.SIGINT) == 0


async def test_restart_keeps_tuples_and_origin(forum_node: NodeProcess) -> None:
    async with ForumClient(forum_node.url) as client:
        first = await client.write(b"keep-1")
        await client.write(b"keep-2")
        await client.take(Pattern(b"keep-"))
    await forum_node.restart()
    async with ForumClient(forum_node.url) as client:
        assert await client.read(Pattern(b"keep-")) == b"keep-2"
        assert (await client.status()).origin == first.origin
        assert (await client.write(b"keep-3")).seq == 4  # keep-1, keep-2, a take, then this


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
async def test_no_acknowledged_write_is_lost(forum_nodes: ForumNodes, how: str) -> None:
    """Writers keep writing while the node is stopped (gracefully or by kill -9):
    every write acknowledged with an id is live after the restart."""
    node = await forum_nodes.start("durable")
    acknowledged: list[EntryId] = []

    async def writer(n: int) -> None:
        async with ForumClient(node.url, timeout=5) as client:
            for i in range(10_000):
                try:
                    acknowledged.append(await client.write(f"w{n}-{i}".encode()))
                except ClientError:
                    return

    async with asyncio.TaskGroup() as group:
        for n in range(8):
            group.create_task(writer(n))
        await eventually(lambda: len(acknowledged) >= 200, timeout=30, what="200 writes")
        if how == "sigterm":
            assert await node.stop() == 0
        else:
            await node.kill()
    await node.start()
    live: set[EntryId] = set()
    async with ForumClient(node.url) as client:
        cursor: int | None = 0
        while cursor is not None:
            page = await client.list(Pattern(b"w"), cursor=cursor, limit=1000)
            live.update(t.id for t in page.tuples)
            cursor = page.next_cursor
    missing = set(acknowledged) - live
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {sorted(missing)[:3]}"
