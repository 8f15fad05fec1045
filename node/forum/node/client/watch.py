"""The client side of ``GET /v1/watch``: Server-Sent Events read as :class:`WatchEvent` s.

:func:`watch_events` follows one node's stream, and when the connection drops
(the node restarts, a proxy cuts it, no byte came for three heartbeats) it
connects again with the id of the last event it gave as ``Last-Event-ID``, so
the node sends what was missed (or says it cannot: ``gap``, ``reset``). It
gives up with :class:`~forum.node.core.errors.NodeUnavailable` after ``reconnects``
failed attempts in a row, or at once when the first connection fails (a
wrong URL, a node that is down); an error status (4xx) raises at once as
the client's other calls do. An ``overflow`` (the watcher fell too far behind and
the node cut it off) is the last event: the iteration ends, and the caller
decides whether to watch again from its ``event_id``.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from forum.node.core.backoff import Backoff
from forum.node.core.entries import EntryId
from forum.node.core.errors import (
    NodeRejected,
    NodeUnavailable,
    SerializationError,
    error_body,
    retriable_status,
)

#: The kinds of event a watch gives: the node's (``write``, ``take``,
#: ``expire``) and the stream's (``ready``: the watch is live, the first of
#: each connection; ``gap``, ``reset``: events were missed; ``overflow``: cut off).
KINDS = frozenset({"write", "take", "expire", "ready", "gap", "reset", "overflow"})
#: Seconds of silence, beyond three heartbeats, after which a stream is taken as dropped.
_IDLE_SLACK = 5.0
#: The longest line of a stream read: a write event of the largest tuple a
#: node takes (``max_payload``, up to a segment) as JSON, with room to spare.
_MAX_LINE = 512 * 1024 * 1024
_BACKOFF = Backoff(base=0.1, cap=2.0)


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch.

    ``event_id`` resumes after it (``ForumClient.watch(last_event_id=...)``).
    ``id``: the tuple's (``write``, ``expire``) or the Take's (``take``);
    ``target``: the tuple a ``take`` took; ``payload`` and the properties
    that are not plain (``due``, ``expires`` in ms since the epoch,
    ``priority``, ``key``): a ``write``'s. ``message``: a ``gap``, ``reset``
    or ``overflow``'s explanation."""

    kind: str
    event_id: str | None = None
    id: EntryId | None = None
    target: EntryId | None = None
    payload: bytes | None = None
    due: int = 0
    expires: int = 0
    priority: int = 0
    key: bytes | None = None
    message: str | None = None
    #: ``ready``: the node's seconds between keep-alives.
    heartbeat: float | None = None


#: ``rejected(status, code, message)``: the client's error for an error answer.
Rejected = Callable[[int, str, str], NodeRejected]


async def watch_events(
    session: aiohttp.ClientSession,
    url: str,
    params: Mapping[str, str],
    *,
    rejected: Rejected,
    last_event_id: str | None = None,
    connect_timeout: float = 5.0,
    first_byte_timeout: float = 30.0,
    reconnects: int = 10,
) -> AsyncGenerator[WatchEvent, None]:
    """The events of the watch at ``url`` (``.../v1/watch``) with ``params``."""
    stream = _Stream(session, url, params, rejected, connect_timeout, first_byte_timeout)
    last = last_event_id
    failures = 0
    connected = False
    while True:
        try:
            async for event in stream.events(last):
                failures, connected = 0, True
                last = event.event_id or last
                yield event
                if event.kind == "overflow":
                    return
            problem = "the stream ended"
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        except NodeRejected as exc:
            if not retriable_status(exc.status):
                raise
            problem = str(exc)
        failures += 1
        if not connected:  # a wrong URL or a node that is down: say so at once
            raise NodeUnavailable(url, f"watch: {problem}")
        if failures > reconnects:
            raise NodeUnavailable(url, f"watch: {problem} ({reconnects} reconnects failed)")
        await asyncio.sleep(_BACKOFF.delay(failures))


@dataclass(slots=True)
class _Stream:
    """How to connect to one watch, and how long it may be silent."""

    session: aiohttp.ClientSession
    url: str
    params: Mapping[str, str]
    rejected: Rejected
    connect_timeout: float
    #: Until ``ready`` says the node's heartbeat.
    idle: float

    async def events(self, last: str | None) -> AsyncIterator[WatchEvent]:
        """The events of one connection, resumed after ``last``."""
        headers = {"Accept": "text/event-stream"}
        if last is not None:
            headers["Last-Event-ID"] = last
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout)
        get = self.session.get(self.url, params=self.params, headers=headers, timeout=timeout)
        async with get as response:
            if response.status >= 400:
                body = await response.read()
                raise self.rejected(response.status, *error_body(response.status, body))
            async for kind, event_id, data in self._frames(response.content):
                event = _event(self.url, kind, event_id, data)
                if event is None:
                    continue
                if event.heartbeat is not None:
                    self.idle = 3 * event.heartbeat + _IDLE_SLACK
                yield event

    async def _lines(self, content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
        """The lines of a stream, without their ends, however long (a
        ``readline`` refuses one past 512 KiB: a write event of a large
        tuple); a partial line at the end of the stream is dropped."""
        buffer = bytearray()
        while True:
            async with asyncio.timeout(self.idle):
                chunk = await content.readany()
            if not chunk:
                return
            start = len(buffer)
            buffer += chunk
            begin = 0
            while (end := buffer.find(b"\n", start)) >= 0:
                yield bytes(buffer[begin:end])
                begin = start = end + 1
            del buffer[:begin]
            if len(buffer) > _MAX_LINE:
                raise SerializationError(f"{self.url}: an event line longer than {_MAX_LINE} bytes")

    async def _frames(
        self, content: aiohttp.StreamReader
    ) -> AsyncIterator[tuple[str, str | None, str]]:
        """The SSE events of a stream, as ``(event, id, data)``: fields up to
        a blank line; comments (``:``) and unknown fields skipped."""
        kind, event_id, data = "message", None, list[str]()
        async for raw in self._lines(content):
            line = raw.decode("utf-8", "replace").rstrip("\r")
            if not line:
                if data:
                    yield kind, event_id, "\n".join(data)
                kind, event_id, data = "message", None, []
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "id":
                event_id = value
            elif name == "data":
                data.append(value)


def _event(url: str, kind: str, event_id: str | None, data: str) -> WatchEvent | None:
    """The event of one frame; ``None`` for a kind this client does not know."""
    if kind not in KINDS:
        return None
    try:
        document = json.loads(data)
        if not isinstance(document, dict):
            raise TypeError("not an object")
        return WatchEvent(kind, event_id, **_fields(kind, document))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SerializationError(f"{url}: not a {kind} event: {data[:200]!r} ({exc})") from exc


def _fields(kind: str, document: dict[str, Any]) -> dict[str, Any]:
    if kind in ("gap", "reset", "overflow"):
        return {"message": str(document["message"])}
    if kind == "ready":
        return {"heartbeat": float(document["heartbeat"])}
    fields: dict[str, Any] = {"id": EntryId.parse(document["id"])}
    if kind == "take":
        fields["target"] = EntryId.parse(document["target"])
    elif kind == "write":
        fields["payload"] = _bytes(document, "payload")
        fields["key"] = (
            _bytes(document, "key") if "key" in document or "key_b64" in document else None
        )
        for name in ("due", "expires", "priority"):
            value = document.get(name, 0)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} is not an integer")
            fields[name] = value
    return fields


def _bytes(document: dict[str, Any], name: str) -> bytes:
    """A text field, or its ``_b64`` twin (the API's JSON spelling of bytes)."""
    if f"{name}_b64" in document:
        return base64.b64decode(document[f"{name}_b64"], validate=True)
    value = document[name]
    if not isinstance(value, str):
        raise TypeError(f"{name} is not text")
    return value.encode()
