"""The node-wide body budget (``body_budget``, node/forum/node/http/budget.py) against a real node.

A body being sent holds its bytes of the budget from its head on: a second
large body past the budget waits for room, or with no room in time is
refused ``503 busy`` with ``Retry-After``, having changed nothing; over
HTTP and over the stream alike. Small bodies are not held back.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import msgspec
import pytest
import websocket

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually
from tests.service.test_stream import answers, raw_stream, send

#: Two of these do not fit the budget of the nodes below; one does.
BODY = 700_000
BUDGET = "1MiB"


async def metric(node: NodeProcess, name: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(f"{node.url}/metrics") as response:
        text = await response.text()
    found = re.search(rf"^{name} ([0-9.e+]+)$", text, re.MULTILINE)
    assert found is not None, name
    return float(found.group(1))


async def live(node: NodeProcess) -> int:
    async with ForumClient(node.url, transport="http") as client:
        return await client.count(Pattern(b""))


@asynccontextmanager
async def held(node: NodeProcess, size: int = BODY) -> AsyncIterator[asyncio.StreamWriter]:
    """A raw write whose body of ``size`` bytes is sent but for its last byte:
    its bytes are held in the budget until the block ends and it is finished
    (it is written then: 201)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    head = (
        f"POST /v1/tuples HTTP/1.1\r\nHost: 127.0.0.1:{node.port}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n"
    )
    writer.write(head.encode() + b"held-" + b"x" * (size - 6))
    await writer.drain()
    await eventually(
        lambda: _in_flight_at_least(node, size), what="the held body is charged to the budget"
    )
    try:
        yield writer
        writer.write(b"x")
        await writer.drain()
        status = await reader.readline()
        assert status.startswith(b"HTTP/1.1 201"), status
    finally:
        writer.close()


async def _in_flight_at_least(node: NodeProcess, size: int) -> bool:
    return await metric(node, "forum_body_bytes_in_flight") >= size


async def _waiting(node: NodeProcess) -> bool:
    return await metric(node, "forum_body_budget_waiting") >= 1


async def test_past_the_budget_a_body_is_refused_503_with_retry_after(
    forum_nodes: ForumNodes,
) -> None:
    """t0: A's body is being sent (held); t1: B's would put the node past its
    budget and finds no room within body_budget_wait (0): 503 busy,
    Retry-After, nothing written; t2: A ends (201); t3: B again: 201."""
    node = await forum_nodes.start(
        "tight", "--body-budget", BUDGET, "--body-budget-wait", "0", "--fsync", "never"
    )
    async with aiohttp.ClientSession() as http:
        async with held(node):
            async with http.post(f"{node.url}/v1/tuples", data=b"b-" + b"x" * BODY) as response:
                assert response.status == 503, await response.text()
                assert response.headers["Retry-After"] == "1"
                document = await response.json()
            assert document["error"] == "busy" and "body_budget" in document["message"]
            assert await live(node) == 0
            # A small body is not held back by the large ones.
            async with http.post(f"{node.url}/v1/tuples", data=b"small-1") as response:
                assert response.status == 201
        async with http.post(f"{node.url}/v1/tuples", data=b"b-" + b"x" * BODY) as response:
            assert response.status == 201, await response.text()
    assert await live(node) == 3
    assert await metric(node, "forum_body_budget_refusals_total") == 1
    assert await metric(node, "forum_body_bytes_in_flight") == 0


async def test_past_the_budget_a_body_waits_for_room(forum_nodes: ForumNodes) -> None:
    """t0: A's body is being sent (held); t1: B's waits for room, its body
    unread; t2: A ends: its bytes go back, B is charged and written: 201."""
    node = await forum_nodes.start(
        "patient", "--body-budget", BUDGET, "--body-budget-wait", "60", "--fsync", "never"
    )
    async with aiohttp.ClientSession() as http:
        async with held(node):
            second = asyncio.create_task(
                http.post(f"{node.url}/v1/tuples", data=b"b-" + b"x" * BODY)
            )
            await eventually(lambda: _waiting(node), what="the second body waits for room")
            assert not second.done()
        async with await second as response:
            assert response.status == 201, await response.text()
    assert await live(node) == 2
    assert await metric(node, "forum_body_budget_waits_total") == 1
    assert await metric(node, "forum_body_budget_refusals_total") == 0


async def test_a_stream_frame_past_the_budget_waits_before_it_is_read(
    forum_nodes: ForumNodes,
) -> None:
    """The stream's frames are held to the same budget, charged as their
    header arrives: t0: A's body is held; t1: a stream sends a large write,
    which finds no room: the node stops reading that stream (the frame is not
    read, however long it waits), and a count sent after it waits too;
    t2: A ends; t3: the write is read and written (201), then the count."""
    node = await forum_nodes.start(
        "tight-stream", "--body-budget", BUDGET, "--body-budget-wait", "0", "--fsync", "never"
    )
    async with raw_stream(node.url) as ws:
        async with held(node):
            await send(ws, 1, "write", payload=b"s-" + b"x" * BODY)
            await send(ws, 2, "count", prefix=b"")
            await eventually(lambda: _waiting(node), what="the frame waits for room")
            assert await metric(node, "forum_body_bytes_in_flight") < 2 * BODY
        got = {i: (s, b) for i, s, b in await answers(ws, 2)}
    assert got[1][0] == 201
    assert got[2][0] == 200
    assert await live(node) == 2
    assert await metric(node, "forum_body_bytes_in_flight") == 0


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http", "stream"])
async def test_many_concurrent_batches_all_land_within_the_budget(
    forum_nodes: ForumNodes, transport: str
) -> None:
    """Twelve 2 MB batches at once (each on a connection of its own) against
    a budget of three: each is written (those that wait get room as others
    end), none refused, and the node never charged more than its budget:
    over the stream too, whose frames are charged before they are read."""
    node = await forum_nodes.start(
        "crowd", "--body-budget", "6500000", "--body-budget-wait", "60", "--fsync", "never"
    )
    document = {"payloads": [b"c-" + b"x" * 200_000] * 10}
    batch = msgspec.msgpack.encode(document)
    headers = {"Content-Type": "application/msgpack"}
    async with aiohttp.ClientSession() as http:

        async def post() -> int:
            url = f"{node.url}/v1/tuples/batch"
            async with http.post(url, data=io.BytesIO(batch), headers=headers) as response:
                return response.status

        async def stream() -> int:
            async with raw_stream(node.url) as ws:
                await send(ws, 1, "write_many", **document)
                ((_, status, _),) = await answers(ws, 1)
                return status

        statuses = await asyncio.gather(
            *((post if transport == "http" else stream)() for _ in range(12))
        )
    assert statuses == [201] * 12
    assert await live(node) == 120
    assert await metric(node, "forum_body_bytes_in_flight_peak") <= 6_500_000


def _send_fragmented(url: str, frame: bytes, parts: int) -> tuple[int, Any]:
    """Send ``frame`` as one message of ``parts`` fragments (RFC 6455 5.4),
    with websocket-client; the answer's status and body."""
    ws = websocket.create_connection(url.replace("http://", "ws://") + "/v1/stream", timeout=30)
    try:
        step = -(-len(frame) // parts)
        chunks = [frame[i : i + step] for i in range(0, len(frame), step)]
        for i, chunk in enumerate(chunks):
            opcode = websocket.ABNF.OPCODE_BINARY if i == 0 else websocket.ABNF.OPCODE_CONT
            ws.send_frame(websocket.ABNF(fin=int(i == len(chunks) - 1), opcode=opcode, data=chunk))
        ws.ping(b"between")  # a control frame after it, read as the next frame
        while True:  # the pong may come first
            opcode, answer = ws.recv_data_frame(True)
            if opcode == websocket.ABNF.OPCODE_BINARY:
                break
        _, status, body = msgspec.msgpack.decode(answer.data)
    finally:
        ws.shutdown()
    return status, body


async def test_a_fragmented_message_is_charged_whole_and_given_back(
    forum_nodes: ForumNodes,
) -> None:
    """A message sent in fragments (each under 64 KiB, the whole over it) is
    charged as a whole as its fragments arrive, written, and its charge given
    back: nothing stays charged once it is answered."""
    node = await forum_nodes.start("fragments", "--body-budget", BUDGET, "--fsync", "never")
    frame = msgspec.msgpack.encode([1, "write", {"payload": b"f-" + b"x" * 600_000}])
    status, body = await asyncio.to_thread(_send_fragmented, node.url, frame, 12)
    assert status == 201 and body["id"]
    assert await metric(node, "forum_body_bytes_in_flight_peak") >= 600_000
    await eventually(lambda: _nothing_charged(node), what="the charge is given back")
    assert await live(node) == 1


async def _nothing_charged(node: NodeProcess) -> bool:
    return await metric(node, "forum_body_bytes_in_flight") == 0
