"""``GET /v1/watch``: the node's :class:`~forum.node.space.watch.WatchHub` as Server-Sent Events.

Each event is written as the SSE format has it (docs/http-api.md, "Watch",
gives it byte by byte)::

    id: 3f9c2a1b7d4e-42
    event: write
    data: {"id":"n1-a1b2:7","payload":"job-7","priority":5}

followed by a blank line; an idle stream gets a ``: keepalive`` comment every
``heartbeat`` seconds, so proxies and clients know it is alive. A stream
opens with ``ready`` (its id is where the stream starts: a client that
reconnects with it as ``Last-Event-ID`` misses nothing), after the events it
missed when it resumes (or a ``gap``/``reset`` notice when they are gone).

Every stream of one prefix sends the same bytes of an event, encoded once
(:func:`sse_event` is this format's :data:`~forum.node.space.watch.Encoder`), and takes
them from its channel at most :data:`~forum.node.space.watch.PIECE` bytes at a time,
writing the next only once the kernel took the last (a small send buffer
until the client shows it reads, :data:`SEND_BUFFER`), so a client that
reads nothing holds one piece of the node's memory, not a copy of every
event. The stream never holds the node up: a write that waits more than the
hub's ``stall`` seconds for the client to read, or that the hub cuts off
(the watcher fell too far behind: the hub moves the write's deadline to
now), ends the stream with ``overflow``, and the connection is closed
behind it (dropped :data:`_LINGER` s later if the client still reads nothing). On
shutdown the hub ends every stream at once (an ``on_shutdown`` handler,
before in-flight requests are awaited).
"""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from forum.node.api.model import EVENT_STREAM
from forum.node.api.operations import WATCH
from forum.node.core.entries import PLAIN, Properties, Take, Write
from forum.node.http.bodies import ApiProblem, bad_request
from forum.node.http.keys import LIMITS, WATCH_HUB
from forum.node.http.query import Query
from forum.node.space.watch import PIECE, HubEvent, Missed, Subscription, WatchHub

_json = msgspec.json.Encoder().encode
#: The request header that resumes a stream (the SSE standard's).
LAST_EVENT_ID = "Last-Event-ID"
KEEPALIVE = b": keepalive\n\n"
_HEADERS = {
    "Content-Type": EVENT_STREAM,
    "Cache-Control": "no-cache",
    # nginx buffers answers unless told not to: events would come late.
    "X-Accel-Buffering": "no",
}
#: Seconds the last bytes of a stream (its overflow event, its end) get to go
#: out before the connection is closed behind them.
_FINAL_WRITE = 1.0
#: Seconds a stream's last bytes may wait for a client that reads nothing.
_LINGER = 10.0
#: The kernel's send buffer of a watch's socket, in bytes (Linux doubles it,
#: and has a floor of some 4.5 KiB): a client that reads nothing stops taking
#: bytes after about this much, so its stream waits (costing nothing) and is
#: cut off, instead of being sent a burst into a buffer grown to megabytes
#: (as the kernel grows it unasked): a thousand such clients would cost the
#: node the sending and the machine the memory.
SEND_BUFFER = 4 * 1024
#: Once a client has taken this many bytes (it reads), its socket's send
#: buffer is :data:`SEND_BUFFER_READING`: some 10 MB/s over a 50 ms round trip.
PROVEN = 64 * 1024
SEND_BUFFER_READING = 256 * 1024


async def watch(request: web.Request) -> web.StreamResponse:
    """``GET /v1/watch?prefix=``: an endless stream of the matching events."""
    pattern = Query(request, WATCH, request.app[LIMITS]).pattern()
    hub = request.app[WATCH_HUB]
    if hub.closed:
        raise ApiProblem(
            503, "unavailable", "the node is shutting down", headers={"Retry-After": "1"}
        )
    if request.method == "HEAD":  # the headers alone: a stream would never end
        return web.Response(headers=_HEADERS)
    try:
        subscription, missed, replay = hub.subscribe(
            pattern.prefix, request.headers.get(LAST_EVENT_ID), encode=sse_event
        )
    except ValueError as exc:
        raise bad_request("invalid_header", f"{LAST_EVENT_ID}: {exc}") from None
    try:
        return await _stream(
            request, hub, subscription, _opening(hub, subscription, missed, replay)
        )
    finally:
        hub.unsubscribe(subscription)


def _opening(
    hub: WatchHub, subscription: Subscription, missed: Missed | None, replay: list[HubEvent]
) -> Iterator[bytes]:
    """What a stream starts with, a piece at a time: the notice of what it
    missed, or the events it missed (encoded as it goes), then ``ready``."""
    piece = [] if missed is None else [frame(missed.kind, {"message": missed.message})]
    size = 0
    for event in replay:
        piece.append(sse_event(hub.event_id(event.n), event))
        size += len(piece[-1])
        if size >= PIECE:
            yield b"".join(piece)
            piece, size = [], 0
    ready = {"heartbeat": hub.heartbeat, "queue": hub.queue, "queue_bytes": hub.queue_bytes}
    piece.append(frame("ready", ready, subscription.start))
    yield b"".join(piece)


def _pieces(hub: WatchHub, subscription: Subscription, opening: Iterator[bytes]) -> Iterator[bytes]:
    """The opening, then the watcher's events a piece at a time; ``b""``
    when there is nothing to send yet (the caller waits, or keeps alive)."""
    yield from opening
    while not subscription.closed:
        yield b"".join(subscription.pending())


async def _stream(
    request: web.Request, hub: WatchHub, subscription: Subscription, opening: Iterator[bytes]
) -> web.StreamResponse:
    response = web.StreamResponse(headers=_HEADERS)
    response.force_close()  # a stream that ended (cut off, or the node stopping) is not reused
    await response.prepare(request)
    transport = request.transport
    if transport is None:
        return response  # the client left
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    # Paused as soon as the kernel leaves a byte to the transport, resumed
    # once it took them all: the stream's drain waits for that (see _send).
    transport.set_write_buffer_limits(high=0)
    sent = 0
    for piece in _pieces(hub, subscription, opening):
        sending = piece
        if not sending:
            if await subscription.wait(hub.heartbeat):
                continue
            sending = KEEPALIVE
        if not await _send(response, request.writer, hub, subscription, sending):
            break
        sent += len(sending)
        if sent >= PROVEN and sent - len(sending) < PROVEN and sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_READING)
    final = b""
    if subscription.overflowed:
        final = frame(
            "overflow",
            {
                "message": f"{subscription.reason} and is cut off; reconnect with "
                "Last-Event-ID to resume from the node's buffer"
            },
        )
    else:  # the node stopping: what was made just before still goes out
        final = b"".join(subscription.leftover())
    await _finish(request, response, final)
    return response


async def _send(
    response: web.StreamResponse,
    writer: AbstractStreamWriter,
    hub: WatchHub,
    subscription: Subscription,
    data: bytes,
) -> bool:
    """Write ``data`` and wait until the kernel took it all; ``False`` if the
    watch ended (an overflow, the node stopping, the client gone) before.
    A client that does not take it within ``hub.stall`` seconds is cut off.

    aiohttp's ``write`` waits for a client only once 64 KiB were written
    since it last did, and lets them pile up in the transport's buffer: a
    copy per client that reads nothing, 64 MiB for a thousand. The stream
    drains after each write instead (its transport pauses at one byte left
    to it): such a client holds one piece of the node's memory, and costs
    nothing while it waits."""
    cutoff = asyncio.timeout(hub.stall)
    subscription.cutoff = cutoff
    try:
        async with cutoff:
            await response.write(data)
            await writer.drain()
    except TimeoutError:
        if cutoff.expired():
            subscription.cut_off(f"this watch's client read nothing for {hub.stall:g} s")
            return False
        raise
    except ConnectionError:
        return False  # the client left (its handler is being cancelled)
    finally:
        subscription.cutoff = None
    return True


async def _finish(request: web.Request, response: web.StreamResponse, final: bytes) -> None:
    """End the stream with ``final``. A client that reads nothing gets its
    bytes queued and the connection closed once they are out (the
    transport's close sends what it holds first), or dropped after
    :data:`_LINGER` s: the node holds no task for it."""
    try:
        async with asyncio.timeout(_FINAL_WRITE):
            await response.write_eof(final)
    except TimeoutError:
        transport = request.transport
        if transport is not None:
            transport.close()
            asyncio.get_running_loop().call_later(_LINGER, transport.abort)
    except ConnectionError:
        pass  # the client left


# -- the event format ----------------------------------------------------------------


def frame(kind: str, data: Mapping[str, Any], event_id: str | None = None) -> bytes:
    """One SSE event. JSON escapes every control character, so the data is
    one line whatever the payload (the rest of UTF-8 goes as it is)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return b"%sevent: %s\ndata: %s\n\n" % (head.encode(), kind.encode(), _json(data))


def sse_event(event_id: str, event: HubEvent) -> bytes:
    """One event of the node, as every stream sends it (an
    :data:`~forum.node.space.watch.Encoder`)."""
    return frame(event.kind, event_data(event), event_id)


def event_data(event: HubEvent) -> dict[str, Any]:
    """The data of a ``write`` (the tuple as the API's JSON has it, and the
    properties that are not plain), a ``take`` or an ``expire``."""
    item = event.item
    if isinstance(item, Take):
        return {"id": str(item.id), "target": str(item.target)}
    if isinstance(item, Write):
        document = {"id": str(item.id)} | _text("payload", item.payload)
        return document if item.props is PLAIN else document | _properties(item.props)
    return {"id": str(item.id)}


def _properties(props: Properties) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    if props.due:
        shown["due"] = props.due
    if props.expires:
        shown["expires"] = props.expires
    if props.priority:
        shown["priority"] = props.priority
    if props.key is not None:
        shown |= _text("key", props.key)
    return shown


def _text(name: str, value: bytes) -> dict[str, str]:
    """``value`` as the API's JSON spells bytes: text, or ``<name>_b64``."""
    try:
        return {name: value.decode()}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(value).decode()}
