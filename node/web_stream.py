"""The stream: the client API over one WebSocket, many requests in flight at once.

``GET /v1/stream`` (behind the token, as every client route) upgrades to a
WebSocket that carries binary messages of msgpack arrays (the bytes, each
operation's arguments and answers, the close codes: docs/wire.md)::

    request   [id, op, args]      uint, str, map; one per message
    answer    [id, status, body]  uint, int (the HTTP status the same
                                  operation gives), map or nil; one or
                                  more per message, back to back

Each request runs as a task of its own, so a take that waits holds up
nothing behind it, and answers go out as they are ready, by id, in any
order; those ready in the same turn of the loop share one message (one
write to the socket). The operations are :class:`node.web_ops.Space`'s, with the checks of
:mod:`node.web_bodies`: those of the HTTP routes, so an operation answers
the same whichever way it is asked. An operation's refusal (an id that is
not ``origin:seq``, a lease too long) is an answer with its 4xx status and
``{"error", "message"}`` body, and leaves the stream open.

A frame that is not of this protocol closes the stream, having changed
nothing: not binary (1003), an unknown op (1003), not a msgpack
``[uint, str, map]`` or arguments of the wrong names or types, or an id
already in flight (1007), over the node's largest HTTP body (1009).

Backpressure: at most ``max_in_flight`` requests of one stream are in
flight; at that many the node reads no more from the socket until one is
answered, so a client that sends faster than the node applies fills its
own TCP window instead of the node's memory. A request whose answer cannot
be written (the client reads none) stays in flight.

When the stream drops, what is in flight is cancelled, as an HTTP request
whose client left (``NodeRunner``'s ``handler_cancellation``): a waiting
take or reserve hands nothing over (the Forum puts back a tuple it was
handing out), a take already durable is written back, and a reservation
already made comes back when its lease runs out. A ``cancel`` request does
the same for one request (a client that stopped waiting for it).

On shutdown the long polls end first; then each stream answers what it has
in flight (new requests get 503), within ``shutdown_timeout``, and closes
with 1001.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from aiohttp import WSCloseCode, WSMsgType, web

from node.errors import ForumError
from node.space import Pattern
from node.web_bodies import (
    ApiProblem,
    Query,
    check_entry_id,
    check_extend_lease,
    check_ids,
    check_integer,
    check_payload,
    check_payloads,
    check_seconds,
    reserved_body,
    tuple_body,
)
from node.web_model import (
    BATCH_LIMIT,
    CURSOR,
    DEFAULT_LIMIT,
    ENTRY_ID,
    LEASE,
    MSGPACK,
    PAGE_LIMIT,
    STREAM,
    WAIT,
    AckedReserved,
    Page,
    Problem,
    ReservedTuples,
    Tuples,
)
from node.web_ops import Space, problem_of
from node.web_status import StreamFigures

log = logging.getLogger(__name__)

#: The most requests in flight on one stream (docs/wire.md).
MAX_IN_FLIGHT = 256
#: A close frame's reason is at most 123 bytes (RFC 6455 5.5.1).
_REASON_BYTES = 123
#: What a close for a frame too big says (aiohttp sends that close itself).
_CLOSE_REASONS = {WSCloseCode.MESSAGE_TOO_BIG: "a frame is over {max_frame} bytes"}

RequestId = Annotated[int, msgspec.Meta(ge=0)]
_FRAME = msgspec.msgpack.Decoder(tuple[RequestId, str, msgspec.Raw])
_ENCODE = msgspec.msgpack.Encoder().encode


# -- the arguments of each op: a msgpack map of these names and types ---------------


class Args(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An op's arguments. Another name, a missing one or another type is not a
    frame of the protocol (1007); a value out of range is the op's refusal."""


class PayloadArgs(Args, frozen=True):
    payload: bytes


class PayloadsArgs(Args, frozen=True):
    payloads: list[bytes]


class PatternArgs(Args, frozen=True):
    prefix: bytes = b""


class WaitArgs(PatternArgs, frozen=True):
    wait: float = 0.0


class BatchArgs(WaitArgs, frozen=True):
    limit: int = DEFAULT_LIMIT


class ReserveArgs(WaitArgs, frozen=True, kw_only=True):
    lease: float


class ReserveBatchArgs(ReserveArgs, frozen=True):
    limit: int = DEFAULT_LIMIT


class AckReserveArgs(ReserveBatchArgs, frozen=True, kw_only=True):
    ids: list[str]


class IdArgs(Args, frozen=True):
    id: str


class IdsArgs(Args, frozen=True):
    ids: list[str]


class ExtendArgs(IdsArgs, frozen=True):
    lease: float


class PageArgs(PatternArgs, frozen=True):
    cursor: int = 0
    limit: int = DEFAULT_LIMIT


class CancelArgs(Args, frozen=True):
    id: RequestId


#: An answer: the HTTP status and the document (``None``: no body, a 204).
Answer = tuple[int, msgspec.Struct | None]


async def _write(space: Space, a: PayloadArgs) -> Answer:
    return 201, await space.write(check_payload("payload", a.payload, space.limits.max_payload))


async def _write_many(space: Space, a: PayloadsArgs) -> Answer:
    return 201, await space.write_many(check_payloads("payloads", a.payloads, space.limits))


async def _read(space: Space, a: WaitArgs) -> Answer:
    found = await space.read(Pattern(a.prefix), check_seconds(WAIT, a.wait, space.limits))
    return (204, None) if found is None else (200, tuple_body(found, MSGPACK))


async def _take(space: Space, a: WaitArgs) -> Answer:
    found = await space.take(Pattern(a.prefix), check_seconds(WAIT, a.wait, space.limits))
    return (204, None) if found is None else (200, tuple_body(found, MSGPACK))


async def _take_many(space: Space, a: BatchArgs) -> Answer:
    limits = space.limits
    taken = await space.take_many(
        Pattern(a.prefix),
        check_integer(BATCH_LIMIT, a.limit, limits),
        check_seconds(WAIT, a.wait, limits),
    )
    return 200, Tuples([tuple_body(t, MSGPACK) for t in taken])


async def _reserve(space: Space, a: ReserveArgs) -> Answer:
    limits = space.limits
    found = await space.reserve(
        Pattern(a.prefix),
        check_seconds(LEASE, a.lease, limits),
        check_seconds(WAIT, a.wait, limits),
    )
    return (204, None) if found is None else (200, reserved_body(found, MSGPACK))


async def _reserve_many(space: Space, a: ReserveBatchArgs) -> Answer:
    limits = space.limits
    reserved = await space.reserve_many(
        Pattern(a.prefix),
        check_seconds(LEASE, a.lease, limits),
        check_integer(BATCH_LIMIT, a.limit, limits),
        check_seconds(WAIT, a.wait, limits),
    )
    return 200, ReservedTuples([reserved_body(t, MSGPACK) for t in reserved])


async def _ack(space: Space, a: IdArgs) -> Answer:
    return 200, await space.ack(check_entry_id(ENTRY_ID, a.id))


async def _ack_many(space: Space, a: IdsArgs) -> Answer:
    return 200, await space.ack_many(check_ids(a.ids, space.limits))


async def _ack_reserve(space: Space, a: AckReserveArgs) -> Answer:
    limits = space.limits
    acked, reserved = await space.ack_reserve(
        check_ids(a.ids, limits),
        Pattern(a.prefix),
        check_seconds(LEASE, a.lease, limits),
        check_integer(BATCH_LIMIT, a.limit, limits),
        check_seconds(WAIT, a.wait, limits),
    )
    return 200, AckedReserved(acked, [reserved_body(t, MSGPACK) for t in reserved])


async def _extend_many(space: Space, a: ExtendArgs) -> Answer:
    ids = check_ids(a.ids, space.limits)
    return 200, await space.extend_many(ids, check_extend_lease(a.lease, space.limits))


async def _release(space: Space, a: IdArgs) -> Answer:
    return 200, await space.release(check_entry_id(ENTRY_ID, a.id))


async def _count(space: Space, a: PatternArgs) -> Answer:
    return 200, await space.count(Pattern(a.prefix))


async def _list(space: Space, a: PageArgs) -> Answer:
    limits = space.limits
    page = space.list(
        Pattern(a.prefix),
        check_integer(CURSOR, a.cursor, limits),
        check_integer(PAGE_LIMIT, a.limit, limits),
    )
    return 200, Page([tuple_body(t, MSGPACK) for t in page.tuples], page.next_cursor)


@dataclass(frozen=True, slots=True)
class StreamOp:
    """One op of the stream: its arguments' decoder, and what it does with them."""

    decoder: msgspec.msgpack.Decoder[Any]
    run: Callable[[Space, Any], Awaitable[Answer]]

    @classmethod
    def of(cls, args: type[Args], run: Callable[[Space, Any], Awaitable[Answer]]) -> StreamOp:
        return cls(msgspec.msgpack.Decoder(args), run)


#: Every op, by the name a request gives (``cancel`` is the stream's own).
OPS: dict[str, StreamOp] = {
    "write": StreamOp.of(PayloadArgs, _write),
    "write_many": StreamOp.of(PayloadsArgs, _write_many),
    "read": StreamOp.of(WaitArgs, _read),
    "take": StreamOp.of(WaitArgs, _take),
    "take_many": StreamOp.of(BatchArgs, _take_many),
    "reserve": StreamOp.of(ReserveArgs, _reserve),
    "reserve_many": StreamOp.of(ReserveBatchArgs, _reserve_many),
    "ack": StreamOp.of(IdArgs, _ack),
    "ack_many": StreamOp.of(IdsArgs, _ack_many),
    "ack_reserve": StreamOp.of(AckReserveArgs, _ack_reserve),
    "extend_many": StreamOp.of(ExtendArgs, _extend_many),
    "release": StreamOp.of(IdArgs, _release),
    "count": StreamOp.of(PatternArgs, _count),
    "list": StreamOp.of(PageArgs, _list),
}
CANCEL = "cancel"
_CANCEL = msgspec.msgpack.Decoder(CancelArgs)


class BadFrame(Exception):
    """A frame that is not of the protocol: the stream closes with ``code``."""

    def __init__(self, code: WSCloseCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


# -- the streams of one node ------------------------------------------------------------


class Streams:
    """The open streams of one node, the route that opens them, and their figures."""

    def __init__(
        self,
        space: Space,
        *,
        max_frame: int,
        shutdown_timeout: float,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.space = space
        self.max_frame = max_frame
        self.max_in_flight = max_in_flight
        self._shutdown_timeout = shutdown_timeout
        self._open: set[_Stream] = set()
        self.draining = False
        self.peak_in_flight = 0
        self.requests = 0
        self.bad_frames = 0

    def figures(self) -> StreamFigures:
        return StreamFigures(
            open=len(self._open),
            in_flight=sum(s.in_flight for s in self._open),
            peak_in_flight=self.peak_in_flight,
            max_in_flight=self.max_in_flight,
            requests=self.requests,
            bad_frames=self.bad_frames,
        )

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/stream``: upgrade, then serve the stream until it closes."""
        Query(request, STREAM, self.space.limits)
        if self.draining:
            raise ApiProblem(503, "unavailable", "the node is shutting down", {"Retry-After": "1"})
        socket = _Socket(self.max_frame)
        await socket.prepare(request)
        stream = _Stream(self, socket)
        self._open.add(stream)
        try:
            await stream.serve()
        finally:
            self._open.discard(stream)
            await stream.abandon()
        return socket

    async def drain(self) -> None:
        """Answer what is in flight (new requests get 503), then close every stream."""
        self.draining = True
        if not self._open:
            return
        try:
            async with asyncio.timeout(self._shutdown_timeout):
                await asyncio.gather(*(s.close_when_answered() for s in list(self._open)))
        except TimeoutError:
            log.warning("shutdown: streams still had requests in flight; they are cancelled")
            for stream in list(self._open):
                await stream.close()


class _Socket(web.WebSocketResponse):
    """aiohttp's WebSocket, whose own closes (a frame too big) say why."""

    def __init__(self, max_frame: int) -> None:
        super().__init__(max_msg_size=max_frame, compress=False, autoping=True)
        self.reasons: dict[int, str] = {
            c: r.format(max_frame=max_frame) for c, r in _CLOSE_REASONS.items()
        }

    async def close(
        self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True
    ) -> bool:
        if not message and code in self.reasons:
            message = self.reasons[code].encode()
        return await super().close(code=code, message=message, drain=drain)


@dataclass(slots=True)
class _Batch:
    """Answers to write in one message, and when they are written."""

    answers: list[bytes]
    written: asyncio.Future[None]


class _Stream:
    """One client's stream: its requests in flight, by id."""

    def __init__(self, streams: Streams, socket: _Socket) -> None:
        self._streams = streams
        self._socket = socket
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._room = asyncio.Event()
        self._room.set()
        self._idle = asyncio.Event()
        self._idle.set()
        #: The answers waiting for the next write, and the writes under way.
        self._batch: _Batch | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def serve(self) -> None:
        socket, limit = self._socket, self._streams.max_in_flight
        while True:
            if len(self._tasks) >= limit:
                # Backpressure: no more reads until an answer is out.
                self._room.clear()
                await self._room.wait()
            message = await socket.receive()
            try:
                if message.type is WSMsgType.BINARY:
                    self._start(message.data)
                elif message.type is WSMsgType.TEXT:
                    raise BadFrame(
                        WSCloseCode.UNSUPPORTED_DATA, "frames are binary (msgpack), not text"
                    )
                elif message.type is WSMsgType.ERROR:  # aiohttp closed it: a frame too big
                    self._streams.bad_frames += 1
                    return
                else:  # closed, by the client or by drain
                    return
            except BadFrame as bad:
                self._streams.bad_frames += 1
                log.info("stream closed for a bad frame: %s", bad.reason)
                await socket.close(code=bad.code, message=_reason(bad.reason))
                return

    def _start(self, data: bytes) -> None:
        """Start the request ``data`` holds, or raise :class:`BadFrame` having started nothing."""
        try:
            request_id, name, raw = _FRAME.decode(data)
        except msgspec.ValidationError as exc:
            raise BadFrame(WSCloseCode.INVALID_TEXT, f"a frame is [id, op, args]: {exc}") from None
        except msgspec.DecodeError as exc:
            raise BadFrame(WSCloseCode.INVALID_TEXT, f"a frame is msgpack: {exc}") from None
        if name == CANCEL:
            self._cancel(_args(_CANCEL, name, raw).id)
            return
        op = OPS.get(name)
        if op is None:
            raise BadFrame(WSCloseCode.UNSUPPORTED_DATA, f"unknown op {name[:40]!r}")
        args = _args(op.decoder, name, raw)
        if request_id in self._tasks:
            raise BadFrame(
                WSCloseCode.INVALID_TEXT, f"request id {request_id} is already in flight"
            )
        task = asyncio.get_running_loop().create_task(self._run(request_id, op, args))
        self._tasks[request_id] = task
        self._idle.clear()
        task.add_done_callback(lambda _: self._finished(request_id))
        self._streams.peak_in_flight = max(self._streams.peak_in_flight, len(self._tasks))

    def _cancel(self, request_id: int) -> None:
        task = self._tasks.get(request_id)
        if task is not None:
            task.cancel()

    def _finished(self, request_id: int) -> None:
        del self._tasks[request_id]
        self._room.set()
        if not self._tasks:
            self._idle.set()

    async def _run(self, request_id: int, op: StreamOp, args: Any) -> None:
        body: msgspec.Struct | None
        try:
            if self._streams.draining:
                raise ApiProblem(503, "unavailable", "the node is shutting down")
            status, body = await op.run(self._streams.space, args)
        except Exception as exc:
            if not isinstance(exc, ApiProblem | ForumError):
                log.exception("unhandled error on a stream request")
            problem = problem_of(exc)
            status, body = problem.status, Problem(problem.code, problem.message)
        self._streams.requests += 1
        if not self._socket.closed:
            await self._send(_ENCODE((request_id, status, body)))

    async def _send(self, answer: bytes) -> None:
        """Send ``answer`` with the others ready in the same turn of the loop,
        in one message (one write: a group commit's answers go out in one
        syscall, not one each); return once it is written."""
        batch = self._batch
        if batch is None:
            batch = self._batch = _Batch([], asyncio.get_running_loop().create_future())
            flush = asyncio.get_running_loop().create_task(self._flush(batch))
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)
        batch.answers.append(answer)
        # Shielded: a request cancelled now must not cancel its neighbours' write.
        await asyncio.shield(batch.written)

    async def _flush(self, batch: _Batch) -> None:
        # Runs after the callbacks of the turn that started the batch: its answers are in.
        self._batch = None
        try:
            # A stream that dropped meanwhile: what the answers said is what was done.
            with contextlib.suppress(ConnectionError):
                await self._socket.send_bytes(b"".join(batch.answers))
        finally:
            batch.written.set_result(None)

    async def close_when_answered(self) -> None:
        await self._idle.wait()
        await self.close()

    async def close(self) -> None:
        """Close with 1001; serving ends, and what is still in flight is cancelled."""
        await self._socket.close(code=WSCloseCode.GOING_AWAY, message=b"the node is shutting down")

    async def abandon(self) -> None:
        """The stream is gone: cancel what is in flight, and wait for it to end."""
        tasks = [*self._tasks.values(), *self._flushes]
        for task in tasks:
            task.cancel()
        if tasks:
            # Shielded: a handler cancelled as its client left still lets the
            # Forum put back what the cancelled requests were handed.
            await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))


def _args(decoder: msgspec.msgpack.Decoder[Any], name: str, raw: msgspec.Raw) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.MsgspecError as exc:
        raise BadFrame(WSCloseCode.INVALID_TEXT, f"{name}: bad args: {exc}") from None


def _reason(text: str) -> bytes:
    """``text`` cut to fit a close frame, on a character boundary."""
    return text.encode()[:_REASON_BYTES].decode(errors="ignore").encode()
