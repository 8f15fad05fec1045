"""The stream (``GET /v1/stream``, docs/wire.md) against real ``forum serve`` processes.

Every op answers as its HTTP route does; many requests in flight on one
stream answer by id; a stream dropped mid-pipeline loses nothing acked and
duplicates nothing; a client that sends faster than the node applies is
held to the in-flight bound; bad frames close the stream, having changed
nothing; the token guards it.
"""

from __future__ import annotations

import asyncio
import io
import re
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import msgpack
import msgspec
import pytest

from forum.node.api.operations import MAX_IN_FLIGHT, STREAM_OPS
from forum.node.client.remote import ForumClient, Transport
from forum.node.client.stream import StreamConnection
from forum.node.core.errors import NodeUnavailable, Unauthorized
from forum.node.core.space import Pattern
from forum.node.http.stream_ops import OPS
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually

Frame = tuple[int, int, Any]


@asynccontextmanager
async def raw_stream(
    url: str, token: str | None = None
) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    """A WebSocket to the node's stream, for frames the client would never send."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{url}/v1/stream", headers=headers) as ws,
    ):
        yield ws


async def send(ws: aiohttp.ClientWebSocketResponse, request_id: int, op: str, **args: Any) -> None:
    await ws.send_bytes(msgspec.msgpack.encode([request_id, op, args]))


async def answers(ws: aiohttp.ClientWebSocketResponse, n: int) -> list[Frame]:
    """The next ``n`` answers, in the order they came (a message holds one or
    more, back to back)."""
    got: list[Frame] = []
    while len(got) < n:
        message = await asyncio.wait_for(ws.receive(), 10)
        assert message.type is aiohttp.WSMsgType.BINARY, message
        for request_id, status, body in msgpack.Unpacker(io.BytesIO(message.data), raw=False):
            got.append((request_id, status, body))
    assert len(got) == n
    return got


async def streams(node: NodeProcess) -> dict[str, int]:
    async with ForumClient(node.url, token=node.token, transport="http") as client:
        status = await client.status()
    return {
        "open": status.streams_open,
        "in_flight": status.streams_in_flight,
        "peak": status.streams_peak_in_flight,
        "max": status.streams_max_in_flight,
        "bad_frames": status.streams_bad_frames,
        "long_polls": status.long_polls,
        "live": status.live,
        "reserved": status.reserved,
    }


def test_every_stream_op_is_an_http_route() -> None:
    assert OPS.keys() == STREAM_OPS.keys()


# -- every op answers as over HTTP ------------------------------------------------------


def _cases(o: str) -> list[tuple[str, dict[str, Any]]]:
    """One node's requests, in order; ``o`` is its origin (ids are ``o:seq``)."""
    return [
        ("write", {"payload": b"j-1"}),
        ("write_many", {"payloads": [b"j-2", b"j-3", b"k-1"]}),
        ("write_many", {"payloads": []}),
        ("count", {"prefix": b"j-"}),
        ("read", {"prefix": b"j-"}),
        ("list", {"prefix": b"", "limit": 2}),
        ("list", {"prefix": b"", "cursor": 2, "limit": 2}),
        ("take", {"prefix": b"j-"}),
        ("take_many", {"prefix": b"j-", "limit": 1}),
        ("reserve", {"prefix": b"j-", "lease": 30.0}),
        ("extend_many", {"ids": [f"{o}:3", f"{o}:99"], "lease": 30.0}),
        ("release", {"id": f"{o}:3"}),
        ("reserve_many", {"prefix": b"j-", "lease": 30.0, "limit": 5}),
        ("ack", {"id": f"{o}:3"}),
        ("ack_many", {"ids": [f"{o}:3", f"{o}:4"]}),
        ("reserve", {"prefix": b"j-", "lease": 30.0}),
        ("ack_reserve", {"ids": [f"{o}:2", f"{o}:99"], "prefix": b"k-", "lease": 30.0}),
        ("ack_reserve", {"ids": [], "prefix": b"k-", "lease": 30.0, "limit": 3, "wait": 0.05}),
        ("take", {"prefix": b"j-"}),
        ("take", {"prefix": b"j-", "wait": 0.05}),
        ("take_many", {"prefix": b"j-", "limit": 3, "wait": 0.05}),
        ("read", {"prefix": b"j-", "wait": 0.05}),
        ("reserve", {"prefix": b"", "lease": 30.0, "wait": 0.05}),
        ("write", {"payload": b"d-1", "not_before": 1.9e9}),
        ("withdraw", {"prefix": b"d-"}),  # not due yet, and taken
        ("withdraw", {"prefix": b"d-", "limit": 5}),
        # Refusals: an answer with the route's status and error body.
        ("ack", {"id": "not-an-id"}),
        ("release", {"id": ":1"}),
        ("reserve", {"prefix": b"", "lease": 0.0}),
        ("reserve", {"prefix": b"", "lease": 99999.0}),
        ("reserve_many", {"prefix": b"", "lease": 5.0, "limit": 0}),
        ("take_many", {"prefix": b"", "limit": 10**6}),
        ("withdraw", {"prefix": b"", "limit": 0}),
        ("list", {"prefix": b"", "limit": 5000}),
        ("extend_many", {"ids": [f"{o}:1"], "lease": 0.0}),
        ("ack_reserve", {"ids": ["not-an-id"], "prefix": b"", "lease": 30.0}),
        ("ack_reserve", {"ids": [], "prefix": b"", "lease": 30.0, "limit": 0}),
        ("write", {"payload": b""}),
        ("write", {"payload": b"x" * 65}),
        ("write_many", {"payloads": [b"ok", b""]}),
        ("count", {"prefix": b""}),
    ]


async def test_every_op_answers_as_over_http(forum_nodes: ForumNodes) -> None:
    """The same requests to two fresh nodes, one over the stream and one over
    HTTP: the same statuses and the same documents (ids but for the origin)."""
    options = ("--max-payload", "64", "--max-batch", "1000", "--fsync", "never")
    over_stream = await forum_nodes.start("s", *options)
    over_http = await forum_nodes.start("h", *options)
    got: dict[str, list[tuple[int, Any]]] = {}
    for node, transport in ((over_stream, "stream"), (over_http, "http")):
        async with ForumClient(node.url, transport="http") as client:
            origin = (await client.status()).origin
            if transport == "http":
                calls = [client._over_http(op, args, 0.0) for op, args in _cases(origin)]
            else:
                stream = StreamConnection(node.url, client._open(), connect_timeout=5)
                calls = [stream.call(op, args, 10) for op, args in _cases(origin)]
            answered = [await call for call in calls]
            if transport == "stream":
                await stream.aclose()
        got[transport] = [_normal(status, body, origin) for status, body in answered]
    for (op, args), stream_answer, http_answer in zip(
        _cases("o"), got["stream"], got["http"], strict=True
    ):
        assert stream_answer == http_answer, (op, args)
    statuses = {status for status, _ in got["stream"]}
    assert statuses == {200, 201, 204, 400, 413}


def _normal(status: int, body: Any, origin: str) -> tuple[int, Any]:
    """An answer with the node's origin taken out; an HTTP error's ``(code,
    message)`` and a stream's ``{"error", "message"}`` as one."""
    if isinstance(body, tuple):
        body = {"error": body[0], "message": body[1]}
    text = re.sub(re.escape(origin), "o", repr(body))
    return status, text


# -- many in flight, answered by id -------------------------------------------------


async def test_requests_in_flight_answer_by_id_out_of_order(forum_node: NodeProcess) -> None:
    async with raw_stream(forum_node.url) as ws:
        await send(ws, 1, "take", prefix=b"slow-", wait=10.0)
        await send(ws, 2, "write", payload=b"fast-1")
        await send(ws, 3, "count", prefix=b"slow-")
        # Both answer while the take waits (in either order: requests in
        # flight together run concurrently, as HTTP requests on two connections).
        first = {i: (s, b) for i, s, b in await answers(ws, 2)}
        assert first[2][0] == 201 and first[3] == (200, {"count": 0})
        # The take still waits; the next write on the same stream wakes it.
        await send(ws, 4, "write", payload=b"slow-1")
        rest = {i: (s, b) for i, s, b in await answers(ws, 2)}
        assert rest[4][0] == 201
        assert rest[1] == (200, {"id": rest[4][1]["id"], "payload": b"slow-1"})


async def test_many_callers_share_one_stream(forum_node: NodeProcess) -> None:
    async with ForumClient(forum_node.url) as client:
        ids = await asyncio.gather(*(client.write(f"c-{i}".encode()) for i in range(500)))
        taken = await asyncio.gather(*(client.take_entry(Pattern(b"c-")) for _ in range(500)))
        assert client.transport == "stream"
    assert sorted(t.id for t in taken if t is not None) == sorted(ids)
    assert (await streams(forum_node))["peak"] > 1


# -- a dropped stream ------------------------------------------------------------------


def _drop(ws: aiohttp.ClientWebSocketResponse) -> None:
    """Cut the TCP connection under the stream, with no close frame."""
    sock = ws.get_extra_info("socket")  # asyncio's TransportSocket
    assert sock is not None
    sock.shutdown(socket.SHUT_RDWR)


async def test_a_stream_dropped_mid_pipeline_loses_nothing_acked_and_duplicates_nothing(
    forum_nodes: ForumNodes,
) -> None:
    """t0: 40 reserves pipelined, answered; t1: 20 acks answered; t2: 20 more
    acks and a waiting reserve sent, the stream cut before their answers;
    t3: the leases run out. Every tuple is acked exactly once overall, the
    acked ones never come back, and the waiting reserve took nothing."""
    node = await forum_nodes.start("n1", "--fsync", "never")
    async with ForumClient(node.url) as client:
        written = set(await client.write_many([f"job-{i}".encode() for i in range(40)]))
        async with raw_stream(node.url) as ws:
            for i in range(40):
                await send(ws, i, "reserve", prefix=b"job-", lease=1.0)
            reserved = [b["id"] for _, s, b in await answers(ws, 40) if s == 200]
            assert len(reserved) == 40 and set(reserved) == {str(i) for i in written}
            for i, entry_id in enumerate(reserved[:20]):
                await send(ws, 100 + i, "ack", id=entry_id)
            assert all((s, b) == (200, {"acked": True}) for _, s, b in await answers(ws, 20))
            for i, entry_id in enumerate(reserved[20:]):
                await send(ws, 200 + i, "ack", id=entry_id)
            await send(ws, 300, "reserve", prefix=b"later-", lease=30.0, wait=30.0)
            await eventually(lambda: _waiting(node), what="the reserve waits on the node")
            _drop(ws)
        await eventually(lambda: _closed(node), what="the node saw the stream go")
        # The waiting reserve was cancelled with its stream: it hands nothing over.
        await client.write(b"later-1")
        later = await client.take(Pattern(b"later-"))
        assert later == b"later-1"
        # Leases ran out (1 s): whatever was not acked is live again, once.
        await eventually(lambda: _unreserved(node), what="the leases run out")
        again = set()
        while (found := await client.reserve(Pattern(b"job-"), lease=30)) is not None:
            assert await client.ack(found.id)
            again.add(found.id)
    confirmed = set(reserved[:20])
    came_back = {str(i) for i in again}
    assert not came_back & confirmed
    assert came_back <= {str(i) for i in written} - confirmed


async def _waiting(node: NodeProcess) -> bool:
    return (await streams(node))["long_polls"] == 1


async def _closed(node: NodeProcess) -> bool:
    figures = await streams(node)  # (a client's own stream may be open, idle)
    return figures["in_flight"] == 0 and figures["long_polls"] == 0


async def _unreserved(node: NodeProcess) -> bool:
    return (await streams(node))["reserved"] == 0


# -- ack_reserve: a worker's acks and its next batch in one request -----------------


@pytest.mark.parametrize("transport", ["stream", "http"])
async def test_ack_reserve_acks_then_reserves_and_the_acks_hold_when_nothing_is_found(
    forum_node: NodeProcess, transport: Transport
) -> None:
    """The acks of one request are made whatever its reserve finds: a batch
    (the acked tuples are not among it, being gone), or nothing after its
    wait. An id no longer reserved is a false flag, as in ack_many."""
    async with ForumClient(forum_node.url, transport=transport) as client:
        ids = await client.write_many([f"{transport}-{i}".encode() for i in range(4)])
        first = await client.reserve_many(Pattern(transport.encode()), 30, 2)
        acked, batch = await client.ack_reserve(
            [r.id for r in first], Pattern(transport.encode()), 30, 10
        )
        assert acked == [True, True]
        assert [r.id for r in batch] == ids[2:] and {r.deliveries for r in batch} == {1}
        acked, none = await client.ack_reserve(
            [r.id for r in batch] + [ids[0]], Pattern(b"nothing-"), 30, 10, timeout=0.2
        )
        assert acked == [True, True, False] and none == []
        assert await client.count(Pattern(transport.encode())) == 0
        assert not await client.release(ids[3])  # acked: not reserved any more
    assert (await streams(forum_node))["reserved"] == 0


async def test_a_refused_ack_reserve_acks_nothing(forum_node: NodeProcess) -> None:
    async with ForumClient(forum_node.url) as client:
        entry_id = await client.write(b"refused-1")
        held = await client.reserve(Pattern(b"refused-"), 30)
        assert held is not None and held.id == entry_id
        async with raw_stream(forum_node.url) as ws:
            await send(ws, 1, "ack_reserve", ids=[str(entry_id), "bad"], prefix=b"", lease=30.0)
            [(_, status, body)] = await answers(ws, 1)
        assert status == 400 and body["error"] == "invalid_field"
        assert await client.release(entry_id), "the good id was not acked either"


async def test_a_stream_dropped_during_ack_reserve_leaves_each_job_acked_or_back(
    forum_nodes: ForumNodes,
) -> None:
    """t0: 10 jobs reserved (lease 1 s); t1: one ack_reserve of 5 of them
    whose reserve waits (nothing matches); t2: the stream is cut while it
    waits; t3: a matching tuple is written, t4: the leases run out. The 5
    acks held (the ack part is done before the wait): they never come
    back; the other 5 come back once each; the cut reserve took nothing.
    And a second ack_reserve cut right after it was sent leaves each of its
    jobs either acked or back after its lease: never lost, never twice."""
    node = await forum_nodes.start("n1", "--fsync", "always")
    async with ForumClient(node.url) as client:
        written = await client.write_many([f"job-{i}".encode() for i in range(20)])
        async with raw_stream(node.url) as ws:
            await send(ws, 1, "reserve_many", prefix=b"job-", lease=1.0, limit=10)
            [(_, _, body)] = await answers(ws, 1)
            first = [t["id"] for t in body["tuples"]]
            await send(ws, 2, "ack_reserve", ids=first[:5], prefix=b"later-", lease=30.0,
                       wait=30.0)  # fmt: skip
            await eventually(lambda: _waiting(node), what="the reserve part waits")
            _drop(ws)
        async with raw_stream(node.url) as ws:
            await send(ws, 1, "reserve_many", prefix=b"job-", lease=1.0, limit=10)
            [(_, _, body)] = await answers(ws, 1)
            second = [t["id"] for t in body["tuples"]]
            await send(ws, 2, "ack_reserve", ids=second, prefix=b"job-", lease=30.0)
            _drop(ws)
        await eventually(lambda: _closed(node), what="the node saw the streams go")
        await client.write(b"later-1")
        assert await client.take(Pattern(b"later-")) == b"later-1"
        await eventually(lambda: _unreserved(node), what="the leases run out")
        back = []
        while (found := await client.reserve(Pattern(b"job-"), lease=30)) is not None:
            assert await client.ack(found.id)
            back.append(str(found.id))
    assert set(first) | set(second) == {str(i) for i in written}
    assert len(back) == len(set(back)), "a job came back twice"
    assert not set(back) & set(first[:5]), "an acked job came back"
    assert set(first[5:]) <= set(back), "a job neither acked nor back: lost"
    assert set(back) <= set(first[5:]) | set(second)


async def test_a_client_fails_what_is_in_flight_when_the_stream_drops_and_reconnects(
    forum_node: NodeProcess,
) -> None:
    async with ForumClient(forum_node.url) as client:
        await client.write(b"before")
        waiting = asyncio.create_task(client.take(Pattern(b"never-"), timeout=30))
        await eventually(lambda: _waiting(forum_node), what="the take waits")
        await forum_node.kill()
        with pytest.raises(NodeUnavailable) as raised:
            await waiting
        assert raised.value.retriable
        await forum_node.restart()
        assert await client.take(Pattern(b"before")) == b"before"


async def test_a_take_the_caller_stops_waiting_for_hands_nothing_over(
    forum_node: NodeProcess,
) -> None:
    async with ForumClient(forum_node.url) as client:
        waiting = asyncio.create_task(client.take(Pattern(b"gone-"), timeout=30))
        await eventually(lambda: _waiting(forum_node), what="the take waits")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await eventually(lambda: _no_long_polls(forum_node), what="the node cancelled the take")
        await client.write(b"gone-1")
        assert await client.take(Pattern(b"gone-")) == b"gone-1"


async def _no_long_polls(node: NodeProcess) -> bool:
    return (await streams(node))["long_polls"] == 0


# -- backpressure ----------------------------------------------------------------------


async def test_a_client_that_sends_faster_than_the_node_applies_is_bounded(
    forum_node: NodeProcess,
) -> None:
    """More waiting takes than the bound, then a count: the node holds exactly
    the bound in flight and reads nothing more until answers go out; then
    every request is answered, none lost."""
    sent = MAX_IN_FLIGHT + 150
    async with raw_stream(forum_node.url) as ws:
        for i in range(sent):
            await send(ws, i, "take", prefix=b"bp-", wait=30.0)
        await send(ws, sent, "count", prefix=b"")
        await eventually(lambda: _in_flight(forum_node, MAX_IN_FLIGHT), what="the bound is reached")
        figures = await streams(forum_node)
        assert figures["in_flight"] == figures["peak"] == figures["max"] == MAX_IN_FLIGHT
        async with ForumClient(forum_node.url, transport="http") as client:
            ids = await client.write_many([f"bp-{i}".encode() for i in range(sent)])
        got = {i: (s, b) for i, s, b in await answers(ws, sent + 1)}
    assert got[sent][0] == 200 and "count" in got[sent][1]
    taken = sorted(b["id"] for i, (s, b) in got.items() if i != sent)
    assert taken == sorted(str(i) for i in ids)
    assert (await streams(forum_node))["peak"] == MAX_IN_FLIGHT


async def _in_flight(node: NodeProcess, n: int) -> bool:
    return (await streams(node))["in_flight"] == n


# -- bad frames --------------------------------------------------------------------------

#: A frame that is not of the protocol, and the close code it gets.
BAD_FRAMES = {
    "text": ("text", 1003),
    "not msgpack": (b"\xc1", 1007),
    "trailing bytes": (msgspec.msgpack.encode([1, "count", {}]) + b"\x00", 1007),
    "not a 3-array": (msgspec.msgpack.encode([1, "count"]), 1007),
    "a map": (msgspec.msgpack.encode({"id": 1}), 1007),
    "negative id": (msgspec.msgpack.encode([-1, "count", {}]), 1007),
    "unknown op": (msgspec.msgpack.encode([1, "delete", {}]), 1003),
    "payload as text": (msgspec.msgpack.encode([1, "write", {"payload": "t"}]), 1007),
    "unknown arg": (msgspec.msgpack.encode([1, "write", {"payload": b"t", "x": 1}]), 1007),
    "missing arg": (msgspec.msgpack.encode([1, "reserve", {"prefix": b""}]), 1007),
    "args not a map": (msgspec.msgpack.encode([1, "write_many", [b"t"]]), 1007),
    "oversized": (msgspec.msgpack.encode([1, "write", {"payload": b"x" * 300_000}]), 1009),
}


@pytest.fixture
async def small_node(forum_nodes: ForumNodes) -> NodeProcess:
    # The largest frame is the largest HTTP body: max_batch_bytes plus 64 KiB.
    return await forum_nodes.start(
        "small", "--max-payload", "1024", "--max-batch-bytes", "200000", "--fsync", "never"
    )


@pytest.mark.parametrize("name", BAD_FRAMES)
async def test_a_bad_frame_closes_the_stream_with_a_reason_and_changes_nothing(
    small_node: NodeProcess, name: str
) -> None:
    frame, code = BAD_FRAMES[name]
    async with raw_stream(small_node.url) as ws:
        await send(ws, 7, "take", prefix=b"", wait=30.0)  # in flight when it closes
        await eventually(lambda: _waiting(small_node), what="the take waits")
        if isinstance(frame, str):
            await ws.send_str(frame)
        else:
            await ws.send_bytes(frame)
        message = await asyncio.wait_for(ws.receive(), 10)
    assert message.type is aiohttp.WSMsgType.CLOSE
    assert message.data == code
    assert message.extra and "\n" not in message.extra
    figures = await streams(small_node)
    assert (figures["live"], figures["bad_frames"]) == (0, 1)
    await eventually(lambda: _closed(small_node), what="the stream is gone")


async def test_an_op_refusal_is_an_answer_and_the_stream_goes_on(forum_node: NodeProcess) -> None:
    async with raw_stream(forum_node.url) as ws:
        await send(ws, 1, "ack", id="no-colon")
        await send(ws, 2, "write", payload=b"")
        await send(ws, 3, "count", prefix=b"")
        got = {i: (s, b) for i, s, b in await answers(ws, 3)}
    assert got[1][0] == 400 and got[1][1]["error"] == "invalid_parameter"
    assert got[2] == (400, got[2][1]) and got[2][1]["error"] == "empty_payload"
    assert got[3] == (200, {"count": 0})


async def test_a_request_id_already_in_flight_closes_the_stream(forum_node: NodeProcess) -> None:
    async with raw_stream(forum_node.url) as ws:
        await send(ws, 5, "take", prefix=b"x", wait=30.0)
        await send(ws, 5, "write", payload=b"x-1")
        message = await asyncio.wait_for(ws.receive(), 10)
    assert (message.type, message.data) == (aiohttp.WSMsgType.CLOSE, 1007)
    assert "already in flight" in message.extra
    assert (await streams(forum_node))["live"] == 0


# -- the token --------------------------------------------------------------------------


async def test_the_stream_needs_the_token_when_one_is_set(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("locked", token="t0ken")
    for token in (None, "wrong"):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            async with raw_stream(node.url, token):
                pass
        assert refused.value.status == 401
        async with ForumClient(node.url, token=token) as client:
            with pytest.raises(Unauthorized):
                await client.write(b"job-1")
    async with ForumClient(node.url, token="t0ken") as client:
        await client.write(b"job-1")
        assert await client.count(Pattern(b"job-")) == 1
        assert client.transport == "stream"


# -- shutdown ----------------------------------------------------------------------------


async def test_shutdown_answers_what_is_in_flight_then_closes_the_stream(
    forum_node: NodeProcess,
) -> None:
    """t0: a take waits on a stream; t1: SIGTERM; t2: the take answers 204
    (nothing taken), the stream closes with 1001, the node exits 0."""
    async with raw_stream(forum_node.url) as ws:
        await send(ws, 1, "take", prefix=b"x", wait=30.0)
        await eventually(lambda: _waiting(forum_node), what="the take waits")
        ending = asyncio.create_task(forum_node.end(signal.SIGTERM))
        assert await answers(ws, 1) == [(1, 204, None)]
        message = await asyncio.wait_for(ws.receive(), 10)
    assert (message.type, message.data) == (aiohttp.WSMsgType.CLOSE, 1001)
    assert await ending == 0


# -- the event loop ----------------------------------------------------------------------


async def test_a_node_on_asyncios_own_loop_serves_the_stream(forum_nodes: ForumNodes) -> None:
    """``FORUM_EVENT_LOOP=asyncio`` (uvloop off): the same answers, a reliable job end to end."""
    node = await forum_nodes.start("plain", "--fsync", "never", env={"FORUM_EVENT_LOOP": "asyncio"})
    async with ForumClient(node.url) as client:
        written = await client.write(b"job-1")
        found = await client.reserve(Pattern(b"job-"), lease=30)
        assert found is not None and found.id == written
        assert await client.ack(found.id)
        assert await client.count(Pattern(b"job-")) == 0
        assert client.transport == "stream"
