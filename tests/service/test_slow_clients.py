"""Slow clients against a real ``forum serve`` short of file descriptors.

The node runs under ``prlimit --nofile=256``; more sockets than that trickle
their request heads a byte at a time. Before the fix the node held every one
(no header timeout, no cap) until ``accept`` failed with EMFILE and nobody was
served. Now each is closed after ``idle_timeout``, the cap (the limit less a
reserve) pushes the silent ones out for new connections, and a normal client
is answered meanwhile. A body that trickles is answered 408 after
``body_timeout``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.fixtures.nodes import ForumNodes, NodeProcess

FD_LIMIT = 256
SLOW_SOCKETS = 320
IDLE_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
#: How long a slow socket may stay open at most: the idle timeout, plus
#: aiohttp's timer rounding (it ceils timeouts over 5 s only) and scheduling.
CLOSED_WITHIN = IDLE_TIMEOUT + 6.0

pytestmark = [
    pytest.mark.slow,
    # Under CI a missing prlimit fails the tests instead of hiding them.
    pytest.mark.skipif(
        shutil.which("prlimit") is None and os.environ.get("CI") != "true",
        reason="needs util-linux prlimit (these tests never skip under CI)",
    ),
]


class LimitedNode(NodeProcess):
    """``forum serve`` with its open-file limit lowered to :data:`FD_LIMIT`."""

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}", *super().command()]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeProcess]:
    nodes = ForumNodes(tmp_path)
    limited = LimitedNode(
        "slow",
        tmp_path,
        env={"FORUM_IDLE_TIMEOUT": str(IDLE_TIMEOUT), "FORUM_BODY_TIMEOUT": str(BODY_TIMEOUT)},
    )
    nodes.nodes["slow"] = limited
    try:
        await limited.start()
        yield limited
    finally:
        await nodes.aclose()


async def trickle(port: int, opened: asyncio.Event, deadline: float) -> float | None:
    """Open a socket and send a request head a byte every 0.3 s; how long the
    node kept it open (``None``: still open at ``deadline``)."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    opened.set()
    began = loop.time()
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"y" * 1000
    try:
        for byte in head:
            writer.write(bytes([byte]))
            await writer.drain()
            try:
                async with asyncio.timeout(0.3):
                    if await reader.read(1024) == b"":
                        return loop.time() - began
            except TimeoutError:
                pass
            if loop.time() > deadline:
                return None
        return None
    except ConnectionError:
        return loop.time() - began
    finally:
        writer.close()


async def test_slow_heads_are_closed_and_a_normal_client_is_served(node: NodeProcess) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    async with asyncio.TaskGroup() as group:
        tasks = []
        for _ in range(SLOW_SOCKETS):
            opened = asyncio.Event()
            tasks.append(group.create_task(trickle(node.port, opened, deadline)))
            await opened.wait()
        # More sockets than the node has descriptors, all trickling: it still answers.
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            for _ in range(3):
                async with http.get(f"{node.url}/v1/count") as response:
                    assert response.status == 200
                    assert await response.json() == {"count": 0}
    held = [task.result() for task in tasks]
    assert all(h is not None for h in held), f"{held.count(None)} slow sockets never closed"
    assert max(h for h in held if h is not None) < CLOSED_WITHIN
    async with aiohttp.ClientSession() as http, http.get(f"{node.url}/healthz") as response:
        assert response.status == 200


async def test_a_slow_body_is_answered_408_and_closed(node: NodeProcess) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    try:
        writer.write(
            b"POST /v1/tuples HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\njob-"
        )
        await writer.drain()
        async with asyncio.timeout(BODY_TIMEOUT + 5):
            answer = await reader.read()  # until the node closes
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert json.loads(body)["error"] == "request_timeout"
    async with aiohttp.ClientSession() as http, http.get(f"{node.url}/v1/count") as response:
        assert await response.json() == {"count": 0}
