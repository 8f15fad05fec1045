"""``GET /v1/watch``: the node's :class:`~node.watch.WatchHub` as Server-Sent Events.

Each event is written as the SSE format has it (docs/http-api.md, "Watch",
gives it byte by byte)::

    id: 3f9c2a1b7d4e-42
    event: write
    data: {"id": "n1-a1b2:7", "payload": "job-7", "priority": 5}

followed by a blank line; an idle stream gets a ``: keepalive`` comment every
``heartbeat`` seconds, so proxies and clients know it is alive. A stream
opens with ``ready`` (its id is where the stream starts: a client that
reconnects with it as ``Last-Event-ID`` misses nothing), after the events it
missed when it resumes (or a ``gap``/``reset`` notice when they are gone).

The stream never holds the node up: the hub only queues for it, and a write
of the stream that a client does not read is cut off when its queue
overflows (the hub moves the write's deadline to now), then the stream ends
with ``overflow``. On shutdown the hub ends every stream at once (an
``on_shutdown`` handler, before in-flight requests are awaited).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from typing import Any

import msgspec
from aiohttp import web

from node.entries import PLAIN, Properties, Take, Tuple, Write
from node.watch import HubEvent, Missed, Subscription, WatchHub
from node.web_bodies import ApiProblem, Query, bad_request, tuple_body
from node.web_keys import LIMITS, WATCH_HUB
from node.web_model import EVENT_STREAM, JSON, WATCH

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
_LINGER = 30.0


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
            pattern.prefix, request.headers.get(LAST_EVENT_ID)
        )
    except ValueError as exc:
        raise bad_request("invalid_header", f"{LAST_EVENT_ID}: {exc}") from None
    try:
        opening = _opening(hub, subscription, missed, replay)
        return await _stream(request, hub, subscription, opening)
    finally:
        hub.unsubscribe(subscription)


def _opening(
    hub: WatchHub, subscription: Subscription, missed: Missed | None, replay: list[HubEvent]
) -> bytes:
    frames = [] if missed is None else [frame(missed.kind, {"message": missed.message})]
    frames += [event_frame(hub, event) for event in replay]
    ready = {"heartbeat": hub.heartbeat, "queue": hub.queue}
    frames.append(frame("ready", ready, subscription.start))
    return b"".join(frames)


async def _stream(
    request: web.Request, hub: WatchHub, subscription: Subscription, opening: bytes
) -> web.StreamResponse:
    response = web.StreamResponse(headers=_HEADERS)
    await response.prepare(request)
    sending = opening
    while not subscription.closed:
        if not await _send(response, subscription, sending):
            break
        batch = await subscription.next_batch(hub.heartbeat)
        sending = b"".join(event_frame(hub, e) for e in batch) if batch else KEEPALIVE
    final = b""
    if subscription.overflowed:
        final = frame(
            "overflow",
            {
                "message": f"this watch fell more than {hub.queue} events behind and is cut "
                "off; reconnect with Last-Event-ID to resume from the node's buffer"
            },
        )
    await _finish(request, response, final)
    return response


async def _send(response: web.StreamResponse, subscription: Subscription, data: bytes) -> bool:
    """Write ``data``; ``False`` if the watch ended (an overflow, the node
    stopping, the client gone) before the client took it."""
    cutoff = asyncio.timeout(None)
    subscription.cutoff = cutoff
    try:
        async with cutoff:
            await response.write(data)
    except TimeoutError:
        if cutoff.expired():
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
    """One SSE event. ``json.dumps`` escapes every control and non-ASCII
    character, so the data is one line whatever the payload."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


def event_frame(hub: WatchHub, event: HubEvent) -> bytes:
    return frame(event.kind, event_data(event), hub.event_id(event.n))


def event_data(event: HubEvent) -> dict[str, Any]:
    """The data of a ``write`` (the tuple as the API's JSON has it, and the
    properties that are not plain), a ``take`` or an ``expire``."""
    item = event.item
    if isinstance(item, Take):
        return {"id": str(item.id), "target": str(item.target)}
    if isinstance(item, Write):
        body = tuple_body(Tuple(item.id, item.payload), JSON)
        document: dict[str, Any] = msgspec.to_builtins(body)
        return document | _properties(item.props)
    return {"id": str(item.id)}


def _properties(props: Properties) -> dict[str, Any]:
    if props is PLAIN:
        return {}
    shown: dict[str, Any] = {}
    if props.due:
        shown["due"] = props.due
    if props.expires:
        shown["expires"] = props.expires
    if props.priority:
        shown["priority"] = props.priority
    if props.key is not None:
        try:
            shown["key"] = props.key.decode()
        except UnicodeDecodeError:
            shown["key_b64"] = base64.b64encode(props.key).decode()
    return shown
