"""The client's stream against a real aiohttp WebSocket server that never answers.

A request past its deadline fails with NodeTimeout and is cancelled on the
node (a ``cancel`` frame); each request keeps its own deadline, whichever
was sent first (the stream has one timer, due at the soonest deadline).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web

from forum.node.client.stream import StreamConnection
from forum.node.core.errors import NodeTimeout


class SilentNode:
    """Accepts streams and records each frame; answers nothing."""

    def __init__(self) -> None:
        self.frames: list[list[Any]] = []

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        async for message in socket:
            self.frames.append(msgspec.msgpack.decode(message.data))
        return socket

    def cancelled(self) -> list[int]:
        return [args["id"] for _, op, args in self.frames if op == "cancel"]


@pytest.fixture
async def silent() -> AsyncIterator[tuple[SilentNode, str]]:
    node = SilentNode()
    app = web.Application()
    app.router.add_get("/v1/stream", node.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield node, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def _eventually(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not check():
            await asyncio.sleep(0.01)


async def test_a_request_past_its_deadline_fails_and_is_cancelled_on_the_node(
    silent: tuple[SilentNode, str],
) -> None:
    node, url = silent
    async with aiohttp.ClientSession() as session:
        stream = StreamConnection(url, session, connect_timeout=5)
        try:
            with pytest.raises(NodeTimeout, match=r"count: no answer within 0\.2 s"):
                await stream.call("count", {"prefix": b""}, 0.2)
            await _eventually(lambda: node.cancelled() == [1])
            assert node.frames[0] == [1, "count", {"prefix": b""}]
        finally:
            await stream.aclose()


async def test_each_request_keeps_its_own_deadline(silent: tuple[SilentNode, str]) -> None:
    """t0: a request with 30 s; t1: one with 0.2 s. The second fails at its
    deadline while the first still waits; cancelling the first ends it."""
    node, url = silent
    async with aiohttp.ClientSession() as session:
        stream = StreamConnection(url, session, connect_timeout=5)
        try:
            patient = asyncio.create_task(stream.call("count", {"prefix": b"a"}, 30))
            await _eventually(lambda: len(node.frames) == 1)
            with pytest.raises(NodeTimeout):
                await stream.call("count", {"prefix": b"b"}, 0.2)
            assert not patient.done()
            patient.cancel()
            with pytest.raises(asyncio.CancelledError):
                await patient
            await _eventually(lambda: sorted(node.cancelled()) == [1, 2])
        finally:
            await stream.aclose()
