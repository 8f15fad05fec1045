"""The stream holds the HTTP API's bounds and promises (docs/wire.md), against
real ``forum serve`` processes and real WebSocket clients.

Found by a client written from docs/wire.md alone: a batch over
``max_batch_bytes`` was written on the stream and refused over HTTP; a frame
over the limit got a bare disconnect, not the documented 1009, by a client
that sends its frame whole before it reads (websocket-client, as most
libraries); on shutdown, new requests went unanswered and a write waiting
for room waited out its wait.
"""

from __future__ import annotations

import asyncio
import io
import signal
from typing import Any

import aiohttp
import msgpack
import msgspec
import websocket

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually
from tests.service.test_stream import answers, raw_stream, send, streams


async def test_a_batch_over_max_batch_bytes_is_413_on_the_stream_as_over_http(
    forum_nodes: ForumNodes,
) -> None:
    node = await forum_nodes.start(
        "bounded", "--max-payload", "1024", "--max-batch-bytes", "200000", "--fsync", "never"
    )
    # Within the frame limit (max_batch_bytes + 64 KiB), over max_batch_bytes.
    payloads = [b"b-" + b"x" * 998] * 230
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{node.url}/v1/tuples/batch",
            data=msgspec.msgpack.encode({"payloads": payloads}),
            headers={"Content-Type": "application/msgpack"},
        ) as response,
    ):
        assert response.status == 413
        over_http = (await response.json())["error"]
    async with raw_stream(node.url) as ws:
        await send(ws, 1, "write_many", payloads=payloads)
        await send(ws, 2, "write_many", payloads=payloads[:100])
        got = {i: (s, b) for i, s, b in await answers(ws, 2)}
    assert got[1][0] == 413 and got[1][1]["error"] == over_http == "payload_too_large"
    assert got[2][0] == 201 and len(got[2][1]["ids"]) == 100
    figures = await streams(node)
    assert (figures["live"], figures["bad_frames"]) == (100, 0)


def _send_one_large_frame(url: str, size: int) -> tuple[int, bytes]:
    """What websocket-client (a blocking client: the frame is sent whole,
    then the answer read) gets for one frame of ``size`` bytes: the close
    frame's code and reason."""
    ws = websocket.create_connection(url.replace("http://", "ws://") + "/v1/stream", timeout=30)
    try:
        ws.send_binary(msgspec.msgpack.encode([1, "write", {"payload": b"x" * size}]))
        opcode, frame = ws.recv_data_frame(True)  # (it answers the close itself)
    finally:
        ws.shutdown()
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    return int.from_bytes(frame.data[:2], "big"), frame.data[2:]


async def test_a_client_sending_one_frame_too_big_reads_1009_not_a_reset(
    forum_nodes: ForumNodes,
) -> None:
    node = await forum_nodes.start(
        "small", "--max-payload", "1024", "--max-batch-bytes", "200000", "--fsync", "never"
    )
    code, reason = await asyncio.to_thread(_send_one_large_frame, node.url, 8_000_000)
    assert code == 1009
    assert reason == b"a frame is over 265536 bytes"
    figures = await streams(node)
    assert (figures["live"], figures["bad_frames"]) == (0, 1)
    await eventually(lambda: _open_streams(node, 0), what="the stream is gone")
    async with ForumClient(node.url) as client:  # and the node serves on
        await client.write(b"after")


async def _open_streams(node: NodeProcess, n: int) -> bool:
    return (await streams(node))["open"] == n


async def test_on_shutdown_a_write_waiting_for_room_ends_503(forum_nodes: ForumNodes) -> None:
    """t0: job/ is at its limit of 1; a write of job/2 waits for room (30 s);
    t1: SIGTERM; t2: the write answers 503 unavailable at once (nothing
    written), the stream closes with 1001, the node exits 0."""
    node = await forum_nodes.start("limited", "--limits", "job/=1", "--fsync", "never")
    async with raw_stream(node.url) as ws:
        await send(ws, 1, "write", payload=b"job/1")
        assert (await answers(ws, 1))[0][:2] == (1, 201)
        await send(ws, 2, "write", payload=b"job/2", wait=30.0)
        await eventually(lambda: _in_flight(node, 1), what="the write waits for room")
        ending = asyncio.create_task(node.end(signal.SIGTERM))
        ((request_id, status, body),) = await answers(ws, 1)
        message = await asyncio.wait_for(ws.receive(), 10)
    assert (request_id, status, body["error"]) == (2, 503, "unavailable")
    assert (message.type, message.data) == (aiohttp.WSMsgType.CLOSE, 1001)
    assert await ending == 0
    await node.start()
    async with ForumClient(node.url) as client:
        assert await client.count(Pattern(b"job/")) == 1


async def _in_flight(node: NodeProcess, n: int) -> bool:
    return (await streams(node))["in_flight"] == n


async def test_on_shutdown_a_new_request_on_an_open_stream_gets_503(
    forum_nodes: ForumNodes,
) -> None:
    """t0: stream A has reads in flight whose answers it does not read
    (16 MB: they wait in the node's socket buffer); stream B has a take
    waiting; t1: SIGTERM: B's take answers 204 (the node is draining); t2: a
    count on A; t3: A reads: every read answered 200, the count 503
    unavailable, then the stream closes with 1001. (A node that stopped
    reading its streams on SIGTERM left the count unanswered.)"""
    node = await forum_nodes.start("draining", "--fsync", "never")
    big = b"big-" + b"x" * 1_000_000
    async with ForumClient(node.url) as client:
        await client.write_many([big] * 4)
    reads = 16
    # websocket-client reads only when asked (aiohttp's client reads ahead).
    a = await asyncio.to_thread(
        websocket.create_connection, node.url.replace("http://", "ws://") + "/v1/stream"
    )
    try:
        for i in range(reads):
            a.send_binary(msgspec.msgpack.encode([i, "read", {"prefix": b"big-"}]))
        async with raw_stream(node.url) as b:
            await send(b, 1, "take", prefix=b"none-", wait=30.0)
            await eventually(lambda: _held(node), what="A's answers wait, B's take waits")
            ending = asyncio.create_task(node.end(signal.SIGTERM))
            assert await answers(b, 1) == [(1, 204, None)]
        a.send_binary(msgspec.msgpack.encode([reads, "count", {"prefix": b""}]))
        got, close = await asyncio.to_thread(_read_to_close, a)
    finally:
        a.shutdown()
    assert sorted(got) == list(range(reads + 1))
    assert all(got[i][0] == 200 for i in range(reads))
    assert got[reads][0] == 503 and got[reads][1]["error"] == "unavailable"
    assert close == 1001
    assert await ending == 0


def _read_to_close(ws: websocket.WebSocket) -> tuple[dict[int, tuple[int, Any]], int]:
    """Every answer until the close frame, by id, and the close code."""
    got: dict[int, tuple[int, Any]] = {}
    while True:
        opcode, frame = ws.recv_data_frame(True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            return got, int.from_bytes(frame.data[:2], "big")
        for request_id, status, body in msgpack.Unpacker(io.BytesIO(frame.data), raw=False):
            got[request_id] = (status, body)


async def _held(node: NodeProcess) -> bool:
    """B's take waits, and some of A's reads (more than B's one request) are in flight."""
    figures = await streams(node)
    return figures["in_flight"] > 1 and figures["long_polls"] == 1


async def test_a_stream_take_or_reserve_needs_a_prefix(forum_node: NodeProcess) -> None:
    """As over HTTP (a 400 there): a take without ``prefix`` is not of the
    protocol (1007: a required argument missing) and takes nothing; an empty
    ``prefix`` takes from every prefix."""
    async with ForumClient(forum_node.url, transport="http") as client:
        await client.write_many([b"a-1", b"b-1"])
    for op, args in (
        ("take", {}),
        ("take_many", {"limit": 2}),
        ("reserve", {"lease": 30.0}),
        ("reserve_many", {"lease": 30.0}),
        ("ack_reserve", {"ids": [], "lease": 30.0}),
    ):
        async with raw_stream(forum_node.url) as ws:
            await send(ws, 1, op, **args)
            message = await asyncio.wait_for(ws.receive(), 10)
        assert (message.type, message.data) == (aiohttp.WSMsgType.CLOSE, 1007), op
        assert "prefix" in message.extra, op
        assert (await streams(forum_node))["live"] == 2, op
    async with raw_stream(forum_node.url) as ws:
        await send(ws, 1, "take_many", prefix=b"", limit=2)
        ((_, status, body),) = await answers(ws, 1)
    assert status == 200 and len(body["tuples"]) == 2


async def test_a_cancelled_requests_id_is_free_at_once(forum_node: NodeProcess) -> None:
    """t0: a take waits (id 5); t1: ``cancel`` 5 and a new take with id 5,
    back to back: the id is free from the cancel on (no 1007), the first take
    never answers, the second gets the tuple written at t2."""
    async with raw_stream(forum_node.url) as ws:
        await send(ws, 5, "take", prefix=b"c-", wait=30.0)
        await eventually(lambda: _in_flight(forum_node, 1), what="the take waits")
        # Back to back: the node reads both in the turn that reads the first.
        await send(ws, 6, "cancel", id=5)
        await send(ws, 5, "take", prefix=b"c-", wait=30.0)
        await eventually(lambda: _in_flight(forum_node, 1), what="the second take waits")
        async with ForumClient(forum_node.url, transport="http") as client:
            written = await client.write(b"c-1")
        ((request_id, status, body),) = await answers(ws, 1)
    assert (request_id, status, body["id"]) == (5, 200, str(written))
    assert (await streams(forum_node))["bad_frames"] == 0


def _send_a_frame_with_a_reserved_bit(url: str) -> int:
    ws = websocket.create_connection(url.replace("http://", "ws://") + "/v1/stream", timeout=30)
    try:
        frame = websocket.ABNF(
            fin=1, rsv1=1, opcode=websocket.ABNF.OPCODE_BINARY, data=b"\x93\x01\xa5count\x80"
        )
        ws.send_frame(frame)
        opcode, answer = ws.recv_data_frame(True)
    finally:
        ws.shutdown()
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    return int.from_bytes(answer.data[:2], "big")


async def test_a_frame_that_breaks_rfc_6455_closes_the_stream_with_1002(
    forum_node: NodeProcess,
) -> None:
    """docs/wire.md's close code 1002: a reserved bit set (no extension was agreed)."""
    assert await asyncio.to_thread(_send_a_frame_with_a_reserved_bit, forum_node.url) == 1002
    assert (await streams(forum_node))["bad_frames"] == 1


async def test_the_stream_is_opened_with_a_get_only(forum_node: NodeProcess) -> None:
    """docs/wire.md's handshake answers: a HEAD (which the router takes for a
    GET) or a POST is 405, a Content-Encoding 415, with the API's error body."""
    upgrade = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    async with aiohttp.ClientSession() as http:
        for method in ("HEAD", "POST"):
            async with http.request(
                method, f"{forum_node.url}/v1/stream", headers=upgrade
            ) as response:
                assert response.status == 405, method
        headers = {**upgrade, "Content-Encoding": "gzip"}
        async with http.get(f"{forum_node.url}/v1/stream", headers=headers) as response:
            assert response.status == 415
            assert (await response.json())["error"] == "unsupported_encoding"
        # Not a handshake: 400, and the connection serves HTTP on as before.
        for _ in range(2):
            async with http.get(f"{forum_node.url}/v1/stream") as response:
                assert response.status == 400
                assert (await response.json())["error"] == "bad_request"
            async with http.get(f"{forum_node.url}/v1/count?prefix=") as response:
                assert response.status == 200
