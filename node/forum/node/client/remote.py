"""``ForumClient``: a remote node's tuple space, with the same interface as ``Forum``.

::

    async with ForumClient("http://127.0.0.1:7070", token=None) as space:
        await space.write(b"job-1")
        job = await space.take(Pattern(b"job-"), timeout=5)

It satisfies :class:`forum.node.core.space.TupleSpace`, so a worker written against an
in-process ``Forum`` runs unchanged against a node. The tuple-space
operations go over one stream (``GET /v1/stream``, a WebSocket of msgpack
frames, :mod:`forum.node.client.stream`) with many in flight at once; with
``transport="http"`` (or against a node older than the stream) each is an
HTTP request of its own, on a pool of kept-alive connections. Either way an
operation is the same request to the node (:data:`forum.node.api.model.STREAM_OPS`
names its route) with the same answer document, read here once. Status,
compaction and readiness are HTTP requests. Failures are ``ClientError``s
naming the node:
``NodeUnavailable`` (no connection), ``NodeTimeout`` (no answer in time),
``NodeRejected`` and its ``Unauthorized`` and ``PayloadTooLarge`` (an error
status, with the node's error code and message).

A ``take`` that fails with ``NodeUnavailable`` may have taken a tuple on the
node whose answer was lost: a take is not safe to retry blindly (that is what
the coordinator's claims are for). ``read``, ``count``, ``list`` and
``status`` are.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Literal, Self
from urllib.parse import quote_from_bytes, urlsplit

import aiohttp
import msgpack
from multidict import CIMultiDictProxy

from forum.node.api.model import MSGPACK, STREAM_OPS, bytes_query, prefix_query
from forum.node.api.status import NodeStatus
from forum.node.client.stream import StreamConnection, StreamUnsupported
from forum.node.client.watch import WatchEvent, watch_events
from forum.node.core.entries import PLAIN, EntryId, Properties, Reserved, Tuple
from forum.node.core.errors import (
    NodeRejected,
    NodeTimeout,
    NodeUnavailable,
    PayloadTooLarge,
    SerializationError,
    Throttled,
    Unauthorized,
    error_body,
)
from forum.node.core.reports import CompactionReport
from forum.node.core.resource import AsyncResource
from forum.node.core.space import ListPage, Pattern

#: A long poll is answered by the node up to this much after its wait ends.
_WAIT_SLACK = 5.0
#: Less wait than this left is no wait: answer rather than poll again.
_MIN_WAIT = 0.001


def node_url(url: str) -> str:
    """``url`` without a trailing slash, if it is a node's base URL
    (``http(s)://host[:port]``); ``ValueError`` saying what is wrong otherwise."""
    example = "like http://127.0.0.1:7070"
    try:
        parts = urlsplit(url)
        port = parts.port  # a port out of range or not a number raises
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a node URL ({exc}); give one {example}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r} has no http:// or https:// scheme; give one {example}")
    if not parts.hostname:
        raise ValueError(f"{url!r} has no host; give one {example}")
    if port is None and parts.netloc.endswith(":"):
        raise ValueError(f"{url!r} has an empty port; give one {example}")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r} has a query or fragment; give one {example}")
    return url.rstrip("/")


class _Response:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: CIMultiDictProxy[str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


Transport = Literal["stream", "http"]


class ForumClient(AsyncResource):
    """The tuple space of the node at ``url`` (``http://host:port``).

    ``timeout`` bounds each request (plus its wait, for long polls);
    ``connect_timeout`` bounds making a connection; ``pool_size`` is the most
    HTTP connections kept open to the node; ``transport`` is ``"stream"``
    (one WebSocket, many requests in flight) or ``"http"`` (a request each).
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        pool_size: int = 100,
        transport: Transport = "stream",
    ) -> None:
        if transport not in ("stream", "http"):
            raise ValueError(f"transport is 'stream' or 'http', not {transport!r}")
        self.url = node_url(url)
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._pool_size = pool_size
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session: aiohttp.ClientSession | None = None
        self._transport: Transport = transport
        self._stream: StreamConnection | None = None

    def __repr__(self) -> str:
        return f"ForumClient({self.url!r})"

    @property
    def transport(self) -> Transport:
        """How the operations go: ``"http"`` once a node turned out to have no stream."""
        return self._transport

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._open()
        return self

    async def aclose(self) -> None:
        """Close the stream and the pooled connections. Idempotent."""
        stream, self._stream = self._stream, None
        session, self._session = self._session, None
        try:
            if stream is not None:
                await stream.aclose()
        finally:
            if session is not None:
                await session.close()

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size),
                cookie_jar=aiohttp.DummyCookieJar(),
                headers=self._headers,
            )
        return self._session

    # -- the tuple-space interface ----------------------------------------------

    async def write(
        self,
        payload: bytes,
        *,
        delay: float | None = None,
        not_before: float | None = None,
        ttl: float | None = None,
        priority: int = 0,
        key: bytes | str | None = None,
        dedup_window: float | None = None,
        wait: float | None = None,
    ) -> EntryId:
        """Write one tuple; its id once the node has made it durable. The
        options are ``Forum.write``'s (docs/scheduling.md), judged by the node:
        a bad one is a :class:`NodeRejected` 400 (``invalid_option``), a full
        limited prefix a :class:`Throttled` (429) unless ``wait`` finds room."""
        args = {"payload": payload}
        args |= _write_options(
            delay=delay,
            not_before=not_before,
            ttl=ttl,
            priority=priority,
            key=key,
            dedup_window=dedup_window,
            wait=wait,
        )
        document = await self._document("write", args, wait or 0.0)
        return self._entry_id(document.get("id"))

    async def write_many(
        self,
        payloads: Sequence[bytes],
        *,
        delay: float | None = None,
        not_before: float | None = None,
        ttl: float | None = None,
        priority: int = 0,
        key: bytes | str | None = None,
        dedup_window: float | None = None,
        wait: float | None = None,
    ) -> list[EntryId]:
        """Write many tuples in one request: all become durable, or none;
        the options (:meth:`write`'s) hold for each."""
        if not payloads:
            return []
        args: dict[str, Any] = {"payloads": list(payloads)}
        args |= _write_options(
            delay=delay,
            not_before=not_before,
            ttl=ttl,
            priority=priority,
            key=key,
            dedup_window=dedup_window,
            wait=wait,
        )
        document = await self._document("write_many", args, wait or 0.0)
        return [self._entry_id(i) for i in self._list(document, "ids")]

    async def read(self, pattern: Pattern) -> bytes | None:
        found = await self.read_entry(pattern)
        return None if found is None else found.payload

    async def read_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        """The oldest live match, left live; waits up to ``timeout`` s for one."""
        return await self._single("read", pattern, timeout)

    async def take(self, pattern: Pattern, timeout: float | None = None) -> bytes | None:
        found = await self.take_entry(pattern, timeout)
        return None if found is None else found.payload

    async def take_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        """Take the oldest live match; waits up to ``timeout`` s for one."""
        return await self._single("take", pattern, timeout)

    async def reserve(
        self, pattern: Pattern, lease: float, timeout: float | None = None
    ) -> Reserved | None:
        """Reserve the oldest live match for ``lease`` s (see ``Forum.reserve``):
        unlike a take, a reservation whose answer is lost, or whose holder dies,
        runs out and the tuple is live again."""
        found = await self._single("reserve", pattern, timeout, {"lease": lease})
        return None if found is None else _as_reserved(found)

    async def reserve_many(
        self, pattern: Pattern, lease: float, limit: int, timeout: float | None = None
    ) -> builtins.list[Reserved]:
        """Reserve up to ``limit`` matches in one request. With ``timeout``,
        waits that long for the first when there are none."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        args = {"prefix": pattern.prefix, "limit": limit, "lease": lease}
        found = await self._batch_of_tuples("reserve_many", args, timeout)
        return [_as_reserved(item) for item in found]

    async def ack(self, entry_id: EntryId) -> bool:
        """Take a reserved tuple for good; ``False`` if it is no longer there."""
        document = await self._document("ack", {"id": str(entry_id)})
        return document.get("acked") is True

    async def ack_many(self, entry_ids: Sequence[EntryId]) -> builtins.list[bool]:
        """Ack many reserved tuples in one request; one flag per id, in order."""
        if not entry_ids:
            return []
        document = await self._document("ack_many", {"ids": [str(i) for i in entry_ids]})
        return self._flags(document, "acked", len(entry_ids))

    async def ack_reserve(
        self,
        entry_ids: Sequence[EntryId],
        pattern: Pattern,
        lease: float,
        limit: int,
        timeout: float | None = None,
    ) -> tuple[builtins.list[bool], builtins.list[Reserved]]:
        """Ack ``entry_ids`` (one flag per id, as :meth:`ack_many`), then
        reserve up to ``limit`` matches for ``lease`` s (as :meth:`reserve_many`,
        waiting up to ``timeout`` s for the first), in one request: a worker's
        completed jobs and its next batch. The acks are made first, whatever
        the reserve then finds."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or 0.0)
        ids = [str(i) for i in entry_ids]
        args = {"ids": ids, "prefix": pattern.prefix, "limit": limit, "lease": float(lease)}
        wait = timeout or 0.0
        if wait:
            args["wait"] = wait
        document = await self._document("ack_reserve", args, wait)
        acked = self._flags(document, "acked", len(ids))
        found = [_as_reserved(self._tuple(t)) for t in self._list(document, "tuples")]
        left = deadline - loop.time()
        if not found and left > _MIN_WAIT:
            # The node waited its max_wait at most: the rest of the wait, without the acks.
            found = await self.reserve_many(pattern, lease, limit, left)
        return acked, found

    async def extend(self, entry_id: EntryId, lease: float) -> bool:
        """Renew a reservation to ``lease`` seconds from now; ``False`` if the
        tuple is no longer reserved."""
        return (await self.extend_many([entry_id], lease))[0]

    async def extend_many(self, entry_ids: Sequence[EntryId], lease: float) -> builtins.list[bool]:
        """Renew many reservations in one request; one flag per id, in order."""
        if not entry_ids:
            return []
        args = {"ids": [str(i) for i in entry_ids], "lease": float(lease)}
        document = await self._document("extend_many", args)
        return self._flags(document, "extended", len(entry_ids))

    async def release(self, entry_id: EntryId) -> bool:
        """Give a reserved tuple back now; ``False`` if it was not reserved."""
        document = await self._document("release", {"id": str(entry_id)})
        return document.get("released") is True

    async def take_many(
        self, pattern: Pattern, limit: int, timeout: float | None = None
    ) -> builtins.list[Tuple]:
        """Take up to ``limit`` matches in one request, all or none. With
        ``timeout``, waits that long for the first when there are none."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        args = {"prefix": pattern.prefix, "limit": limit}
        return await self._batch_of_tuples("take_many", args, timeout)

    async def _batch_of_tuples(
        self, op: str, args: dict[str, Any], timeout: float | None
    ) -> builtins.list[Tuple]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or 0.0)
        while True:
            # As in _single: the node waits at most its max_wait per request.
            wait = max(0.0, deadline - loop.time())
            if wait:
                args["wait"] = wait
            document = await self._document(op, args, wait)
            found = [self._tuple(t) for t in self._list(document, "tuples")]
            if found or wait <= _MIN_WAIT or loop.time() >= deadline - _MIN_WAIT:
                return found

    async def count(self, pattern: Pattern) -> int:
        count = (await self._document("count", {"prefix": pattern.prefix})).get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise SerializationError(f"{self.url}: a count is an integer, not {count!r:.50}")
        return count

    async def list(self, pattern: Pattern, cursor: int = 0, limit: int = 100) -> ListPage:
        """Live matches, oldest first, a page at a time (start with cursor 0)."""
        args = {"prefix": pattern.prefix, "cursor": cursor, "limit": limit}
        document = await self._document("list", args)
        tuples = [self._tuple(t) for t in self._list(document, "tuples")]
        next_cursor = document.get("next_cursor")
        if next_cursor is not None and not isinstance(next_cursor, int):
            raise SerializationError(f"{self.url}: next_cursor is not an integer")
        return ListPage(tuples, next_cursor)

    async def status(self) -> NodeStatus:
        document = await self._msgpack("GET", "/v1/status")
        try:
            return NodeStatus.from_document(document)
        except (KeyError, TypeError) as exc:
            raise SerializationError(f"{self.url}: not a status document: {exc}") from exc

    async def compact(self, timeout: float = 600.0) -> CompactionReport:
        """Have the node run one compaction pass now (``POST /v1/compact``);
        what it did, once it is done (waits up to ``timeout`` s for that)."""
        document = await self._msgpack("POST", "/v1/compact", wait=timeout)
        try:
            return CompactionReport(
                bytes_before=int(document["bytes_before"]),
                bytes_after=int(document["bytes_after"]),
                entries_dropped=int(document["entries_dropped"]),
                segments_rewritten=int(document["segments_rewritten"]),
                segments_removed=int(document["segments_removed"]),
                floors={str(o): int(s) for o, s in document["floors"].items()},
                seconds=float(document["seconds"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SerializationError(f"{self.url}: not a compaction report: {exc}") from exc

    # -- pausing a prefix (HTTP requests, as status is) ----------------------------

    async def pause(self, prefix: bytes) -> EntryId:
        """Pause the takes and reserves of ``prefix`` on every node (writes go
        on); the pause marker's id."""
        document = await self._msgpack("POST", _prefix_path(prefix, "pause"))
        return self._entry_id(document.get("id"))

    async def resume(self, prefix: bytes) -> int:
        """End every pause of exactly ``prefix``; how many ended."""
        document = await self._msgpack("POST", _prefix_path(prefix, "resume"))
        resumed = document.get("resumed")
        if not isinstance(resumed, int) or isinstance(resumed, bool):
            raise SerializationError(f"{self.url}: resumed is not a count: {resumed!r:.50}")
        return resumed

    async def paused(self) -> builtins.list[bytes]:
        """The prefixes paused on the node, sorted."""
        return [prefix for prefix, paused, _ in await self.prefixes() if paused]

    async def prefixes(self) -> builtins.list[tuple[bytes, bool, tuple[int, int] | None]]:
        """Each prefix paused or limited on the node: ``(prefix, paused,
        (held, limit) or None)``, sorted."""
        document = await self._msgpack("GET", "/v1/prefixes")
        try:
            return [
                (
                    bytes(row["prefix"]),
                    bool(row["paused"]),
                    None if row.get("limit") is None else (int(row["held"]), int(row["limit"])),
                )
                for row in self._list(document, "prefixes")
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise SerializationError(f"{self.url}: not a prefixes document: {exc}") from exc

    async def ready(self) -> bool:
        """Whether the node says it is ready (``/readyz``); ``False`` if unreachable."""
        try:
            await self._request("GET", "/readyz")
        except (NodeUnavailable, NodeRejected):
            return False
        return True

    # -- watching --------------------------------------------------------------

    def watch(
        self, pattern: Pattern, *, last_event_id: str | None = None, reconnects: int = 10
    ) -> AsyncGenerator[WatchEvent, None]:
        """The node's writes, takes and expiries of tuples that start with the
        prefix, as they happen (``GET /v1/watch``; :mod:`forum.node.client.watch`):
        an endless async iterator, resumed after ``last_event_id`` when given.
        A dropped connection is made again from the last event; an
        ``overflow`` event ends it. Close it (``contextlib.aclosing``) to stop."""
        return watch_events(
            self._open(),
            f"{self.url}/v1/watch",
            prefix_query(pattern),
            rejected=lambda status, code, message: self._rejected(
                status, {"error": code, "message": message}
            ),
            last_event_id=last_event_id,
            connect_timeout=self._connect_timeout,
            first_byte_timeout=self._timeout,
            reconnects=reconnects,
        )

    # -- operations ------------------------------------------------------------

    async def _single(
        self,
        op: str,
        pattern: Pattern,
        timeout: float | None,
        extra: Mapping[str, Any] | None = None,
    ) -> Tuple | None:
        """One tuple by prefix. A node waits at most its own ``max_wait``, so a
        longer timeout is several long polls, each for what is left of it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or 0.0)
        args = {"prefix": pattern.prefix, **(extra or {})}
        while True:
            wait = max(0.0, deadline - loop.time())
            if wait:
                args["wait"] = wait
            document = await self._call(op, args, wait)
            if document is not None:
                return self._tuple(document)
            if wait <= _MIN_WAIT or loop.time() >= deadline - _MIN_WAIT:
                return None

    async def _document(self, op: str, args: dict[str, Any], wait: float = 0.0) -> dict[str, Any]:
        document = await self._call(op, args, wait)
        if document is None:
            raise SerializationError(f"{self.url}: {op} answered with no document")
        return document

    async def _call(
        self, op: str, args: dict[str, Any], wait: float = 0.0
    ) -> dict[str, Any] | None:
        """The answer document of one operation (``None``: nothing matched, a
        204); an error status raises its :class:`NodeRejected`."""
        limit = self._timeout + (wait + _WAIT_SLACK if wait else 0.0)
        if self._transport == "stream":
            try:
                status, body = await self._stream_of().call(op, args, limit)
            except StreamUnsupported:
                self._transport = "http"
                return await self._call(op, args, wait)
        else:
            status, body = await self._over_http(op, args, wait)
        if status >= 400:
            raise self._rejected(status, body)
        if status == 204:
            return None
        if not isinstance(body, dict):
            raise SerializationError(f"{self.url}: the answer to {op} is not a map")
        return body

    def _stream_of(self) -> StreamConnection:
        if self._stream is None:
            self._stream = StreamConnection(
                self.url, self._open(), connect_timeout=self._connect_timeout
            )
        return self._stream

    async def _over_http(self, op: str, args: Mapping[str, Any], wait: float) -> tuple[int, Any]:
        """One operation as the request to its route: the arguments the route
        takes in its query string there, the others in a msgpack body."""
        route = STREAM_OPS[op]
        params: dict[str, str] = {}
        fields: dict[str, Any] = {}
        for name, value in args.items():
            if name == "prefix":
                params |= prefix_query(Pattern(value))
            elif name == "key" and name in route.names:
                params |= bytes_query("key", value)
            elif name in route.names:
                params[name] = _seconds(value) if isinstance(value, float) else str(value)
            else:
                fields[name] = value
        headers = {"Accept": MSGPACK}
        data = None
        if fields:
            headers["Content-Type"] = MSGPACK
            data = msgpack.packb(fields, use_bin_type=True)
        response = await self._request(
            route.method,
            route.path,
            params=params,
            data=data,
            headers=headers,
            wait=wait,
            errors=False,
        )
        if response.status >= 400:
            return response.status, _error_document(response)
        if response.status == 204:
            return 204, None
        return response.status, self._unpack(response.body)

    # -- requests --------------------------------------------------------------

    async def _msgpack(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        headers = {"Accept": MSGPACK, **kwargs.pop("headers", {})}
        response = await self._request(method, path, headers=headers, **kwargs)
        document = self._unpack(response.body)
        if not isinstance(document, dict):
            raise SerializationError(f"{self.url}: the answer is not a map")
        return document

    def _unpack(self, body: bytes) -> Any:
        try:
            return msgpack.unpackb(body, raw=False)
        except Exception as exc:  # msgpack raises several unrelated types
            raise SerializationError(f"{self.url}: the answer is not msgpack: {exc}") from exc

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        wait: float = 0.0,
        errors: bool = True,
    ) -> _Response:
        """One HTTP request; an error status raises its :class:`NodeRejected`
        unless ``errors`` is false."""
        session = self._open()
        timeout = aiohttp.ClientTimeout(
            total=self._timeout + (wait + _WAIT_SLACK if wait else 0.0),
            sock_connect=self._connect_timeout,
        )
        what = f"{method} {path}"
        try:
            async with session.request(
                method,
                self.url + path,
                params=params,
                data=data,
                headers=headers,
                timeout=timeout,
            ) as response:
                body = await response.read()
        except TimeoutError as exc:
            raise NodeTimeout(self.url, f"{what}: no answer within {timeout.total:g} s") from exc
        except aiohttp.ClientConnectorError as exc:
            raise NodeUnavailable(self.url, f"{what}: cannot connect: {exc.os_error}") from exc
        except aiohttp.ClientError as exc:
            raise NodeUnavailable(self.url, f"{what}: {type(exc).__name__}: {exc}") from exc
        answer = _Response(response.status, response.headers, body)
        if errors and response.status >= 400:
            raise self._rejected(response.status, _error_document(answer))
        return answer

    def _rejected(self, status: int, document: Any) -> NodeRejected:
        """The error of an error answer: its ``{"error", "message", ...}`` map
        (over HTTP as :func:`_error_document` read it)."""
        code, message = _error_fields(status, document)
        if status == 429:
            return _throttled(self.url, code, message, document)
        kind = {401: Unauthorized, 413: PayloadTooLarge}.get(status, NodeRejected)
        return kind(self.url, status, code, message)

    # -- decoding --------------------------------------------------------------

    def _entry_id(self, text: Any) -> EntryId:
        try:
            return EntryId.parse(text)
        except (TypeError, ValueError, AttributeError) as exc:
            raise SerializationError(f"{self.url}: not an entry id: {text!r}") from exc

    def _list(self, document: Mapping[str, Any], name: str) -> builtins.list[Any]:
        value = document.get(name)
        if not isinstance(value, list):
            raise SerializationError(f"{self.url}: the answer has no list {name!r}")
        return value

    def _flags(self, document: Mapping[str, Any], name: str, count: int) -> builtins.list[bool]:
        flags = self._list(document, name)
        if len(flags) != count or not all(isinstance(f, bool) for f in flags):
            raise SerializationError(f"{self.url}: {name} is not one flag per id")
        return flags

    def _tuple(self, document: Any) -> Tuple:
        if not isinstance(document, dict) or not isinstance(document.get("payload"), bytes):
            raise SerializationError(f"{self.url}: not a tuple: {document!r:.200}")
        entry_id = self._entry_id(document.get("id"))
        # A plain tuple's answer has no more than its id, payload (and deliveries).
        plain = len(document) == (3 if "deliveries" in document else 2)
        props = PLAIN if plain else self._props(document)
        if "deliveries" not in document:
            return Tuple(entry_id, document["payload"], props)
        return Reserved(
            entry_id,
            document["payload"],
            props,
            deliveries=self._deliveries(document["deliveries"]),
        )

    def _props(self, document: Mapping[str, Any]) -> Properties:
        """The properties an answer shows (``docs/http-api.md``): each only when set."""
        due, expires = document.get("due", 0), document.get("expires", 0)
        priority, key = document.get("priority", 0), document.get("key")
        if not all(
            isinstance(v, int) and not isinstance(v, bool) for v in (due, expires, priority)
        ):
            raise SerializationError(f"{self.url}: not a tuple's properties: {document!r:.200}")
        if key is not None and not isinstance(key, bytes):
            raise SerializationError(f"{self.url}: a tuple's key is bytes, not {key!r:.50}")
        props = Properties(due=due, expires=expires, priority=priority, key=key)
        return PLAIN if props == PLAIN else props

    def _deliveries(self, value: object) -> int:
        if isinstance(value, str) and value.isascii() and value.isdigit():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SerializationError(f"{self.url}: deliveries is not a count: {value!r:.50}")
        return value


def _as_reserved(item: Tuple) -> Reserved:
    """A reserved tuple; from a node older than the delivery count, the first."""
    return item if isinstance(item, Reserved) else Reserved(item.id, item.payload, item.props)


def _write_options(**options: Any) -> dict[str, Any]:
    """The options a write gives (``ForumClient.write``'s keywords), as the
    op's arguments: only those set, so a plain write is the same request it
    always was. The node judges them; a text key goes as its UTF-8 bytes."""
    key = options.get("key")
    if isinstance(key, str):
        options["key"] = key.encode()
    if options.get("priority") == 0:
        del options["priority"]
    return {name: value for name, value in options.items() if value is not None}


def _prefix_path(prefix: bytes, action: str) -> str:
    """The path of a pause route: the prefix's bytes percent-encoded, ``/`` too."""
    if not prefix:
        raise ValueError("a prefix to pause or resume must not be empty")
    return f"/v1/prefixes/{quote_from_bytes(prefix, safe='')}/{action}"


def _error_document(response: _Response) -> dict[str, Any]:
    """An HTTP error answer as the map the stream would give: the node's JSON
    error body (else :func:`error_body`'s reading), ``Retry-After`` too."""
    try:
        document = json.loads(response.body)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        code, message = error_body(response.status, response.body)
        document = {"error": code, "message": message}
    retry_after = response.headers.get("Retry-After", "")
    if "retry_after" not in document and retry_after.isdigit():
        document["retry_after"] = float(retry_after)
    return document


def _throttled(url: str, code: str, message: str, document: Any) -> Throttled:
    details = document if isinstance(document, dict) else {}
    prefix, limit = details.get("prefix"), details.get("limit")
    retry_after = details.get("retry_after")
    return Throttled(
        url,
        429,
        code,
        message,
        prefix=prefix.encode() if isinstance(prefix, str) else b"",
        limit=limit if isinstance(limit, int) and not isinstance(limit, bool) else 0,
        retry_after=float(retry_after) if isinstance(retry_after, int | float) else 1.0,
    )


def _error_fields(status: int, body: Any) -> tuple[str, str]:
    """The ``(error, message)`` of an error answer's ``{"error", "message"}`` map."""
    code = body.get("error") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    return (
        code if isinstance(code, str) else f"http_{status}",
        message if isinstance(message, str) else f"{body!r:.200}",
    )


def _seconds(value: float) -> str:
    return f"{value:.3f}"
