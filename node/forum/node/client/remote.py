"""``ForumClient``: a remote node's tuple space, with the same interface as ``Forum``.

::

    async with ForumClient("http://127.0.0.1:7070", token=None) as space:
        await space.write(b"job-1")
        job = await space.take(Pattern(b"job-"), timeout=5)

It satisfies :class:`forum.node.core.space.TupleSpace`, so a worker written against an
in-process ``Forum`` runs unchanged against a node. The tuple-space
operations go over one stream (``GET /v1/stream``, a WebSocket of msgpack
frames, :mod:`forum.node.client.stream`) with many in flight at once; with
``transport="http"`` (or against a node that has no stream) each is an
HTTP request of its own, on a pool of kept-alive connections. Either way an
operation is the same request to the node
(:data:`forum.node.api.operations.STREAM_OPS` names its route) with the same
answer, decoded into the Struct the node declares for it
(:mod:`forum.node.client.answers`). Status, compaction, pauses and readiness
are HTTP requests. Failures are ``ClientError``s naming the node:
``NodeUnavailable`` (no connection), ``NodeTimeout`` (no answer in time),
``NodeRejected`` and its ``Unauthorized``, ``PayloadTooLarge``,
``Throttled`` and ``CopiesShort`` (an error status, with the node's error
code and message; ``CopiesShort``, a write short of its ``copies``, stands).
An answer that is not its document is a ``SerializationError``.

A ``take`` that fails with ``NodeUnavailable`` may have taken a tuple on the
node whose answer was lost: a take is not safe to retry blindly (that is what
the coordinator's claims are for). ``read``, ``count``, ``list`` and
``status`` are.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Literal, Self, TypeVar, Unpack
from urllib.parse import quote_from_bytes

import aiohttp
import msgpack
import msgspec

from forum.node.api import model
from forum.node.api.model import MAP_EPOCH_HEADER
from forum.node.api.operations import STREAM_OPS
from forum.node.api.parameters import bytes_query, prefix_query
from forum.node.api.status import NodeStatus
from forum.node.client.answers import (
    document,
    entry_id,
    flags,
    http_problem,
    read,
    rejected,
    reserved_of,
    tuple_of,
)
from forum.node.client.stream import StreamConnection, StreamUnsupported
from forum.node.client.watch import WatchEvent, watch_events
from forum.node.cluster.directory import Depth
from forum.node.core.entries import EntryId, Reserved, Tuple
from forum.node.core.errors import (
    NodeRejected,
    NodeTimeout,
    NodeUnavailable,
    SerializationError,
)
from forum.node.core.reports import CompactionReport
from forum.node.core.resource import AsyncResource
from forum.node.core.space import ListPage, Pattern
from forum.node.core.tracing import carrier
from forum.node.core.urls import node_url
from forum.node.core.write_options import (
    WRITE_OPTION_NAMES,
    WriteOptions,
    unknown_options,
)

T = TypeVar("T")
#: The headers of a request answered in msgpack, and of one that sends msgpack too.
_ACCEPT = {"Accept": model.MSGPACK}
_SEND = {"Accept": model.MSGPACK, "Content-Type": model.MSGPACK}
#: A long poll is answered by the node up to this much after its wait ends.
_WAIT_SLACK = 5.0
#: Less wait than this left is no wait: answer rather than poll again.
_MIN_WAIT = 0.001


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
        #: The highest cluster map epoch a node's HTTP answer named
        #: (``Forum-Map-Epoch``, docs/scaling.md); ``None``: none named one.
        self.map_epoch: int | None = None

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

    async def write(self, payload: bytes, **options: Unpack[WriteOptions]) -> EntryId:
        """Write one tuple; its id once the node has made it durable. The
        options are ``Forum.write``'s (:class:`~forum.node.core.write_options.WriteOptions`,
        docs/scheduling.md), judged by the node: a bad one is a
        :class:`NodeRejected` 400 (``invalid_option``), a full limited prefix
        a :class:`Throttled` (429) unless ``wait`` finds room, a write short
        of its ``copies`` in time a :class:`CopiesShort` (504; it stands)."""
        args: dict[str, Any] = {"payload": payload}
        if options:
            unknown_options(options, "ForumClient.write")
            args |= _write_args(options)
        written: model.Written = await self._document("write", args, options.get("wait") or 0.0)
        if type(written.map_epoch) is int:  # a node with a map says its epoch
            self.map_epoch = max(written.map_epoch, self.map_epoch or 0)
        return entry_id(self.url, written.id)

    async def write_many(
        self,
        payloads: Sequence[bytes],
        *,
        keys: Sequence[bytes | str] | None = None,
        **options: Unpack[WriteOptions],
    ) -> list[EntryId]:
        """Write many tuples in one request: all become durable, or none;
        the options (:meth:`write`'s) hold for each. ``keys``, one per
        payload, gives each its own key (``Forum.write_many``'s; a node
        older than them refuses the request)."""
        if options:
            unknown_options(options, "ForumClient.write_many")
        if not payloads:
            return []
        args: dict[str, Any] = {"payloads": list(payloads)}
        if options:
            args |= _write_args(options)
        if keys is not None:
            args["keys"] = [k.encode() if isinstance(k, str) else k for k in keys]
        document: model.Ids = await self._document("write_many", args, options.get("wait") or 0.0)
        return [entry_id(self.url, i) for i in document.ids]

    async def read(self, pattern: Pattern) -> bytes | None:
        found = await self.read_entry(pattern)
        return None if found is None else found.payload

    async def read_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        """The oldest live match, left live; waits up to ``timeout`` s for one."""
        found: model.TupleBody | None = await self._single("read", pattern, timeout)
        return None if found is None else tuple_of(self.url, found)

    async def take(self, pattern: Pattern, timeout: float | None = None) -> bytes | None:
        found = await self.take_entry(pattern, timeout)
        return None if found is None else found.payload

    async def take_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        """Take the oldest live match; waits up to ``timeout`` s for one."""
        found: model.TupleBody | None = await self._single("take", pattern, timeout)
        return None if found is None else tuple_of(self.url, found)

    async def reserve(
        self, pattern: Pattern, lease: float, timeout: float | None = None
    ) -> Reserved | None:
        """Reserve the oldest live match for ``lease`` s (see ``Forum.reserve``):
        unlike a take, a reservation whose answer is lost, or whose holder dies,
        runs out and the tuple is live again."""
        found: model.ReservedBody | None = await self._single(
            "reserve", pattern, timeout, {"lease": lease}
        )
        return None if found is None else reserved_of(self.url, found)

    async def reserve_many(
        self, pattern: Pattern, lease: float, limit: int, timeout: float | None = None
    ) -> builtins.list[Reserved]:
        """Reserve up to ``limit`` matches in one request. With ``timeout``,
        waits that long for the first when there are none."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        args = {"prefix": pattern.prefix, "limit": limit, "lease": lease}
        found: builtins.list[model.ReservedBody] = await self._batch("reserve_many", args, timeout)
        return [reserved_of(self.url, item) for item in found]

    async def ack(self, entry_id: EntryId) -> bool:
        """Take a reserved tuple for good; ``False`` if it is no longer there."""
        acked: model.Acked = await self._document("ack", {"id": str(entry_id)})
        return acked.acked

    async def ack_many(self, entry_ids: Sequence[EntryId]) -> builtins.list[bool]:
        """Ack many reserved tuples in one request; one flag per id, in order."""
        if not entry_ids:
            return []
        document: model.AckedMany = await self._document(
            "ack_many", {"ids": [str(i) for i in entry_ids]}
        )
        return flags(self.url, document.acked, len(entry_ids), "acked")

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
        document: model.AckedReserved = await self._document("ack_reserve", args, wait)
        acked = flags(self.url, document.acked, len(ids), "acked")
        found = [reserved_of(self.url, t) for t in document.tuples]
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
        document: model.Extended = await self._document("extend_many", args)
        return flags(self.url, document.extended, len(entry_ids), "extended")

    async def release(self, entry_id: EntryId) -> bool:
        """Give a reserved tuple back now; ``False`` if it was not reserved."""
        released: model.Released = await self._document("release", {"id": str(entry_id)})
        return released.released

    async def take_many(
        self, pattern: Pattern, limit: int, timeout: float | None = None
    ) -> builtins.list[Tuple]:
        """Take up to ``limit`` matches in one request, all or none. With
        ``timeout``, waits that long for the first when there are none."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        args = {"prefix": pattern.prefix, "limit": limit}
        found: builtins.list[model.TupleBody] = await self._batch("take_many", args, timeout)
        return [tuple_of(self.url, item) for item in found]

    async def withdraw(self, pattern: Pattern, limit: int = 100) -> builtins.list[Tuple]:
        """Take up to ``limit`` matches on the node, live or not yet due (a
        reserved one is left), in one append; never waits (docs/http-api.md)."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        args = {"prefix": pattern.prefix, "limit": limit}
        found: model.Tuples = await self._document("withdraw", args)
        return [tuple_of(self.url, item) for item in found.tuples]

    async def _batch(self, op: str, args: dict[str, Any], timeout: float | None) -> Any:
        """The tuples of a batch take or reserve: the answer's ``tuples``,
        waiting up to ``timeout`` s for the first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or 0.0)
        while True:
            # As in _single: the node waits at most its max_wait per request.
            wait = max(0.0, deadline - loop.time())
            if wait:
                args["wait"] = wait
            document: model.Tuples | model.ReservedTuples = await self._document(op, args, wait)
            found = document.tuples
            if found or wait <= _MIN_WAIT or loop.time() >= deadline - _MIN_WAIT:
                return found

    async def count(self, pattern: Pattern) -> int:
        counted: model.Count = await self._document("count", {"prefix": pattern.prefix})
        if counted.count < 0:
            raise SerializationError(f"{self.url}: a count is not negative: {counted.count}")
        return counted.count

    async def list(self, pattern: Pattern, cursor: int = 0, limit: int = 100) -> ListPage:
        """Live matches, oldest first, a page at a time (start with cursor 0)."""
        args = {"prefix": pattern.prefix, "cursor": cursor, "limit": limit}
        page: model.Page = await self._document("list", args)
        return ListPage([tuple_of(self.url, t) for t in page.tuples], page.next_cursor)

    async def status(self) -> NodeStatus:
        body = await self._request("GET", "/v1/status")
        document = self._unpack(body)
        try:
            return NodeStatus.from_document(document)
        except (KeyError, TypeError) as exc:
            raise SerializationError(f"{self.url}: not a status document: {exc}") from exc

    async def compact(self, timeout: float = 600.0) -> CompactionReport:
        """Have the node run one compaction pass now (``POST /v1/compact``);
        what it did, once it is done (waits up to ``timeout`` s for that)."""
        report = await self._route(model.Compacted, "POST", "/v1/compact", wait=timeout)
        return CompactionReport(**msgspec.structs.asdict(report))

    # -- pausing a prefix (HTTP requests, as status is) ----------------------------

    async def pause(self, prefix: bytes) -> EntryId:
        """Pause the takes and reserves of ``prefix`` on every node (writes go
        on); the pause marker's id."""
        paused = await self._route(model.Paused, "POST", _prefix_path(prefix, "pause"))
        return entry_id(self.url, paused.id)

    async def resume(self, prefix: bytes) -> int:
        """End every pause of exactly ``prefix``; how many ended."""
        resumed = await self._route(model.Resumed, "POST", _prefix_path(prefix, "resume"))
        return resumed.resumed

    async def paused(self) -> builtins.list[bytes]:
        """The prefixes paused on the node, sorted."""
        return [prefix for prefix, paused, _ in await self.prefixes() if paused]

    async def prefixes(self) -> builtins.list[tuple[bytes, bool, tuple[int, int] | None]]:
        """Each prefix paused or limited on the node: ``(prefix, paused,
        (held, limit) or None)``, sorted."""
        document = await self._route(model.Prefixes, "GET", "/v1/prefixes")
        rows: builtins.list[tuple[bytes, bool, tuple[int, int] | None]] = []
        for row in document.prefixes:
            if type(row.prefix) is not bytes:
                raise SerializationError(f"{self.url}: a prefix is bytes, not {row.prefix!r:.50}")
            if row.limit is None:
                rows.append((row.prefix, row.paused, None))
            elif row.held is None:
                raise SerializationError(f"{self.url}: a limited prefix without its held count")
            else:
                rows.append((row.prefix, row.paused, (row.held, row.limit)))
        return rows

    async def backlogs(self, separator: bytes = b"/") -> dict[bytes, Depth]:
        """Per group of tuples here (a payload up to its first ``separator``),
        its live count and oldest age, for groups with live tuples
        (``GET /v1/prefixes?separator=``): what a cluster's directory publishes."""
        path = f"/v1/prefixes?separator={quote_from_bytes(separator, safe='')}"
        document = await self._route(model.Prefixes, "GET", path)
        found: dict[bytes, Depth] = {}
        for row in document.prefixes:
            if type(row.prefix) is bytes and isinstance(row.live, int) and row.live > 0:
                age = row.oldest_age if isinstance(row.oldest_age, float | int) else 0.0
                found[row.prefix] = Depth(row.live, float(age))
        return found

    async def cluster_map(self) -> model.ClusterMapBody:
        """The cluster map the node holds (``GET /v1/map``); a
        :class:`NodeRejected` 404 from a node without one."""
        return await self._route(model.ClusterMapBody, "GET", "/v1/map")

    async def ready(self) -> bool:
        """Whether the node says it is ready (``/readyz``); ``False`` if unreachable."""
        try:
            await self._request("GET", "/readyz", headers=None)
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
            rejected=lambda status, code, message: rejected(
                self.url, status, model.Problem(code, message)
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
    ) -> Any:
        """The answer of one tuple by prefix (``None``: none). A node waits at
        most its own ``max_wait``, so a longer timeout is several long polls,
        each for what is left of it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or 0.0)
        args = {"prefix": pattern.prefix, **(extra or {})}
        while True:
            wait = max(0.0, deadline - loop.time())
            if wait:
                args["wait"] = wait
            document = await self._call(op, args, wait)
            if document is not None:
                return document
            if wait <= _MIN_WAIT or loop.time() >= deadline - _MIN_WAIT:
                return None

    async def _document(self, op: str, args: dict[str, Any], wait: float = 0.0) -> Any:
        document = await self._call(op, args, wait)
        if document is None:
            raise SerializationError(f"{self.url}: {op} answered with no document")
        return document

    async def _call(self, op: str, args: dict[str, Any], wait: float = 0.0) -> Any:
        """The answer of one operation as the Struct the node declares for it
        (``None``: nothing matched, a 204); an error status raises its
        :class:`NodeRejected`."""
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
            raise rejected(self.url, status, body)
        return body

    def _stream_of(self) -> StreamConnection:
        if self._stream is None:
            self._stream = StreamConnection(
                self.url, self._open(), connect_timeout=self._connect_timeout
            )
        return self._stream

    async def _over_http(self, op: str, args: Mapping[str, Any], wait: float) -> tuple[int, Any]:
        """One operation as the request to its route: the arguments the route
        takes in its query string there, the others in a msgpack body; the
        answer as the stream's (:func:`forum.node.client.answers.read`)."""
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
        headers = _ACCEPT
        data = None
        if fields:
            headers = _SEND
            data = msgpack.packb(fields, use_bin_type=True)
        status, body, retry_after = await self._send(
            route.method, route.path, params=params, data=data, headers=headers, wait=wait
        )
        if status >= 400:
            return status, http_problem(status, body, retry_after)
        return status, read(self.url, op, status, body)

    # -- requests --------------------------------------------------------------

    async def _route(self, answer: type[T], method: str, path: str, wait: float = 0.0) -> T:
        """The answer of an HTTP route, as its Struct ``answer``."""
        body = await self._request(method, path, wait=wait)
        return document(self.url, answer, body)

    def _unpack(self, body: bytes) -> Any:
        try:
            return msgpack.unpackb(body, raw=False)
        except Exception as exc:  # msgpack raises several unrelated types
            raise SerializationError(f"{self.url}: the answer is not msgpack: {exc}") from exc

    async def _request(
        self, method: str, path: str, headers: Mapping[str, str] | None = _ACCEPT, wait: float = 0.0
    ) -> bytes:
        """One HTTP request with no body: the body of its answer; an error
        status raises its :class:`NodeRejected`."""
        status, body, retry_after = await self._send(method, path, headers=headers, wait=wait)
        if status >= 400:
            raise rejected(self.url, status, http_problem(status, body, retry_after))
        return body

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        wait: float = 0.0,
    ) -> tuple[int, bytes, str]:
        """One HTTP request: its status, body and ``Retry-After`` header."""
        session = self._open()
        timeout = aiohttp.ClientTimeout(
            total=self._timeout + (wait + _WAIT_SLACK if wait else 0.0),
            sock_connect=self._connect_timeout,
        )
        what = f"{method} {path}"
        trace = carrier()  # the caller's span, when tracing is on: the node's span's parent
        if trace is not None:
            headers = {**(headers or {}), **trace}
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
                epoch = response.headers.get(MAP_EPOCH_HEADER)
                if epoch is not None and epoch.isdigit():
                    self.map_epoch = max(int(epoch), self.map_epoch or 0)
        except TimeoutError as exc:
            raise NodeTimeout(self.url, f"{what}: no answer within {timeout.total:g} s") from exc
        except aiohttp.ClientConnectorError as exc:
            raise NodeUnavailable(self.url, f"{what}: cannot connect: {exc.os_error}") from exc
        except aiohttp.ClientError as exc:
            raise NodeUnavailable(self.url, f"{what}: {type(exc).__name__}: {exc}") from exc
        return response.status, body, response.headers.get("Retry-After", "")


def _write_args(options: WriteOptions) -> dict[str, Any]:
    """The options a write gives, as the op's arguments in their declared
    order: only those set, so a plain write is the same request whatever its
    caller spelt. The node judges them; a text key goes as its UTF-8 bytes."""
    args: dict[str, Any] = {
        name: value for name in WRITE_OPTION_NAMES if (value := options.get(name)) is not None
    }
    key = args.get("key")
    if isinstance(key, str):
        args["key"] = key.encode()
    if args.get("priority") == 0:
        del args["priority"]
    return args


def _prefix_path(prefix: bytes, action: str) -> str:
    """The path of a pause route: the prefix's bytes percent-encoded, ``/`` too."""
    if not prefix:
        raise ValueError("a prefix to pause or resume must not be empty")
    return f"/v1/prefixes/{quote_from_bytes(prefix, safe='')}/{action}"


def _seconds(value: float) -> str:
    return f"{value:.3f}"
