"""The stream: the client API over one WebSocket, many requests in flight at once.

``GET /v1/stream`` (behind the token, as every client route) upgrades to a
WebSocket that carries binary messages of msgpack arrays (the bytes, each
operation's arguments and answers, the close codes: docs/wire.md)::

    request   [id, op, args]      uint, str, map; one per message
    answer    [id, status, body]  uint, int (the HTTP status the same
                                  operation gives), map or nil; one or
                                  more per message, back to back

A request that may wait (a take, read or reserve with a ``wait``) runs as
a task of its own, so it holds up nothing behind it. Any other starts at
once, in the turn that read its frame: one that needs nothing more (a
reserve, a read, a count) is answered then, with no task; one that waits
for its append (a write, an ack) goes on as a task from there. Answers go
out as they are ready, by id, in any order; those ready in the same turn of
the loop share one message (one write to the socket). The operations
(:mod:`forum.node.http.stream_ops`) are :class:`forum.node.http.ops.Space`'s,
with the checks of the HTTP routes, so an operation answers the same
whichever way it is asked. An operation's refusal (an id that is not
``origin:seq``, a lease too long) is an answer with its 4xx status and
``{"error", "message"}`` body, and leaves the stream open.

A frame that is not of this protocol closes the stream, having changed
nothing: not binary (1003), an unknown op (1003), not a msgpack
``[uint, str, map]`` or arguments of the wrong names or types (a take's
missing prefix too), or an id already in flight (1007), over the node's
largest HTTP body (1009, sent before the frame is read: ``_Socket``). A
frame over ``max_batch_bytes`` but within that is refused as an HTTP body
over it is: a 413 answer, and the stream goes on.

Backpressure: at most ``max_in_flight`` requests of one stream are in
flight; at that many the node reads no more from the socket until one is
answered, so a client that sends faster than the node applies fills its
own TCP window instead of the node's memory. A request whose answer cannot
be written (the client reads none) stays in flight. Every message is
charged to the node's body budget (:mod:`forum.node.http.budget`) as its first
frame's header arrives (:mod:`forum.node.http.frames`, before aiohttp reads it)
until its request ends; while one waits for room, the stream reads nothing
more.

When the stream drops, what is in flight is cancelled, as an HTTP request
whose client left (``NodeRunner``'s ``handler_cancellation``): a waiting
take or reserve hands nothing over (the Forum puts back a tuple it was
handing out), a take already durable is written back, and a reservation
already made comes back when its lease runs out. A ``cancel`` request does
the same for one request (a client that stopped waiting for it), and frees
its id at once.

On shutdown the long polls end first (and the writes waiting for room: 503);
then each stream answers what it has in flight, within
``shutdown_timeout``, and closes with 1001. Its connection is read on
meanwhile (``forum.node.http.server`` keeps it open), so new requests get 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import msgspec
from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.abc import AbstractStreamWriter

from forum.node.api.model import Problem
from forum.node.api.operations import CANCEL, MAX_IN_FLIGHT, STREAM
from forum.node.api.status import StreamFigures
from forum.node.core.eager import Suspended, start
from forum.node.core.errors import ForumError
from forum.node.http.bodies import ApiProblem, too_large
from forum.node.http.budget import BodyBudget
from forum.node.http.frames import FrameMeter
from forum.node.http.ops import Space, problem_of
from forum.node.http.query import Query
from forum.node.http.stream_ops import OPS, Answer, Args

log = logging.getLogger(__name__)

#: A close frame's reason is at most 123 bytes (RFC 6455 5.5.1).
_REASON_BYTES = 123
#: What a close for a frame too big says (aiohttp sends that close itself).
_CLOSE_REASONS = {WSCloseCode.MESSAGE_TOO_BIG: "a frame is over {max_frame} bytes"}
#: Seconds a stream closed for a frame too big still reads (and drops) what
#: the client sends, so that the client reads the close frame (``_Socket._linger``).
LINGER = 10.0

RequestId = Annotated[int, msgspec.Meta(ge=0)]
_FRAME = msgspec.msgpack.Decoder(tuple[RequestId, str, msgspec.Raw])
_ENCODE = msgspec.msgpack.Encoder().encode


class CancelArgs(Args, frozen=True):
    """A ``cancel`` frame's: the id of the request to cancel."""

    id: RequestId


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
        budget: BodyBudget,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.space = space
        self.budget = budget
        self.max_frame = max_frame
        self.max_in_flight = max_in_flight
        self._shutdown_timeout = shutdown_timeout
        self._open: set[_Stream] = set()
        #: The connections the open streams run on (the server keeps them
        #: reading on shutdown: :meth:`drain` ends them).
        self._connections: set[object] = set()
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
        if request.method != "GET":  # the router's HEAD: an upgrade is a GET only
            raise ApiProblem(
                405, "method_not_allowed", "the stream is opened with a GET", {"Allow": "GET"}
            )
        Query(request, STREAM, self.space.limits)
        if self.draining:
            raise ApiProblem(503, "unavailable", "the node is shutting down", {"Retry-After": "1"})
        socket = _Socket(self.max_frame, self._too_big)
        transport = request.transport
        if transport is None or not socket.can_prepare(request).ok:
            await socket.prepare(request)  # raises what is wrong with the handshake
            raise ApiProblem(400, "bad_request", "the connection closed")
        # Before the upgrade: the meter must see the first frame's header.
        inner = transport.get_protocol()
        meter = FrameMeter(inner, transport, self.budget, self.max_frame)
        transport.set_protocol(meter)
        try:
            await socket.prepare(request)
        except BaseException:
            transport.set_protocol(inner)  # still HTTP: not frames to meter
            meter.close()
            raise
        stream = _Stream(self, socket, meter)
        self._open.add(stream)
        self._connections.add(request.protocol)
        try:
            # A task of its own: each frame read wakes it alone, not the
            # handler and its middlewares (cancelling the handler cancels it).
            await asyncio.get_running_loop().create_task(stream.serve())
        finally:
            self._open.discard(stream)
            self._connections.discard(request.protocol)
            await stream.abandon()
            meter.close()
        return socket

    def _too_big(self) -> None:
        self.bad_frames += 1

    def holds(self, connection: object) -> bool:
        """Whether ``connection`` (an aiohttp ``RequestHandler``) carries a stream."""
        return connection in self._connections

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
    """aiohttp's WebSocket, whose own closes (a frame too big) say why, and
    reach a client still sending that frame."""

    def __init__(self, max_frame: int, on_too_big: Callable[[], None]) -> None:
        super().__init__(max_msg_size=max_frame, compress=False, autoping=True)
        self._on_too_big = on_too_big
        #: Closed for a frame too big (1009).
        self.too_big = False
        self.reasons: dict[int, str] = {
            c: r.format(max_frame=max_frame) for c, r in _CLOSE_REASONS.items()
        }
        self._transport: asyncio.Transport | None = None

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter:
        self._transport = request.transport
        return await super().prepare(request)

    async def close(
        self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True
    ) -> bool:
        if not message and code in self.reasons:
            message = self.reasons[code].encode()
        if code == WSCloseCode.MESSAGE_TOO_BIG and not self.closed:
            self.too_big = True
            self._on_too_big()
            await self._linger(code, message)
        return await super().close(code=code, message=message, drain=drain)

    async def _linger(self, code: int, message: bytes) -> None:
        """Send the close frame, then drop what the client still sends until it
        closes the connection, for at most :data:`LINGER` seconds.

        aiohttp refuses a frame too big as soon as its header is read and
        closes the connection at once: the rest of the frame, still coming,
        then meets a closed socket, whose kernel answers with a reset that
        throws away the close frame unread (a client that sends its frame whole
        before it reads, as WebSocket libraries do, saw a bare disconnect, not
        1009). The connection reads on meanwhile (aiohttp drops the bytes of a
        connection it closes, holding none), as HTTP servers linger on close.
        """
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        with contextlib.suppress(ConnectionError):
            await self.send_frame(code.to_bytes(2, "big") + message, WSMsgType.CLOSE)
        try:
            # The client closing the connection ends this at once: the node's
            # runner cancels the handler of a connection lost
            # (``handler_cancellation``), and this with it.
            await asyncio.sleep(LINGER)
        finally:
            transport.close()


class _Stream:
    """One client's stream: its requests in flight, by id.

    A request is in flight from the frame read until its answer is written
    to the socket (or it is cancelled): one whose answer cannot be written
    (the client reads none) holds its place against ``max_in_flight``.
    """

    def __init__(self, streams: Streams, socket: _Socket, meter: FrameMeter) -> None:
        self._streams = streams
        self._socket = socket
        self._meter = meter
        self._loop = asyncio.get_running_loop()
        #: Each request in flight: its task while it runs (``None``: it ran
        #: at once, or its answer waits to be written).
        self._in_flight: dict[int, asyncio.Task[None] | None] = {}
        #: The answers waiting for the next write, and the requests they answer.
        self._outbox: list[bytes] = []
        self._answered: list[int] = []
        #: A write is due or under way (answers meanwhile wait for the next).
        self._flushing = False
        #: A write that waits for the socket to drain.
        self._draining: asyncio.Task[None] | None = None
        #: Set when there is room again (serve waits at the bound), and when
        #: nothing is in flight (shutdown waits for that).
        self._room: asyncio.Future[None] | None = None
        self._idle: asyncio.Future[None] | None = None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def serve(self) -> None:
        socket, limit = self._socket, self._streams.max_in_flight
        while True:
            if len(self._in_flight) >= limit:
                # Backpressure: no more reads until an answer is out.
                self._room = self._loop.create_future()
                await self._room
            message = await socket.receive()
            try:
                if message.type is WSMsgType.BINARY:
                    self._charge_and_start(message.data)
                elif message.type is WSMsgType.TEXT:
                    raise BadFrame(
                        WSCloseCode.UNSUPPORTED_DATA, "frames are binary (msgpack), not text"
                    )
                elif message.type is WSMsgType.ERROR:  # aiohttp closed it: not RFC 6455
                    if not socket.too_big:  # (that one is counted as it is refused)
                        self._streams.bad_frames += 1
                    return
                else:  # closed, by the client or by drain
                    return
            except BadFrame as bad:
                self._streams.bad_frames += 1
                log.info("stream closed for a bad frame: %s", bad.reason)
                await socket.close(code=bad.code, message=_reason(bad.reason))
                return

    def _charge_and_start(self, data: bytes) -> None:
        """Start the request ``data`` holds, which takes over the charge its
        bytes got as they came (:class:`~forum.node.http.frames.FrameMeter`)."""
        charged = self._meter.hand_over(len(data))
        try:
            self._start(data, charged)
        except BadFrame:
            self._streams.budget.release(charged)
            raise

    def _start(self, data: bytes, charged: int) -> None:
        """Start the request ``data`` holds, or raise :class:`BadFrame` having
        started nothing. The request gives back ``charged`` bytes of the body
        budget when it ends."""
        try:
            request_id, name, raw = _FRAME.decode(data)
        except msgspec.ValidationError as exc:
            raise BadFrame(WSCloseCode.INVALID_TEXT, f"a frame is [id, op, args]: {exc}") from None
        except msgspec.DecodeError as exc:
            raise BadFrame(WSCloseCode.INVALID_TEXT, f"a frame is msgpack: {exc}") from None
        streams = self._streams
        if name == CANCEL:
            self._cancel(_args(_CANCEL, name, raw).id)
            streams.budget.release(charged)
            return
        op = OPS.get(name)
        if op is None:
            raise BadFrame(WSCloseCode.UNSUPPORTED_DATA, f"unknown op {name[:40]!r}")
        in_flight = self._in_flight
        if request_id in in_flight:
            raise BadFrame(
                WSCloseCode.INVALID_TEXT, f"request id {request_id} is already in flight"
            )
        limit = streams.space.limits.max_batch_bytes
        refusal = None
        if len(data) > limit:
            # As an HTTP body over it: refused whole, its args not even decoded.
            refusal = too_large(f"the frame is {len(data)} bytes; the limit here is {limit}")
            run, args = _refuse(refusal), None
        else:
            run, args = op.run, _args(op.decoder, name, raw)
        in_flight[request_id] = None
        streams.peak_in_flight = max(streams.peak_in_flight, len(in_flight))
        running = self._run(request_id, run, args, charged)
        if refusal is None and op.waits(args):
            in_flight[request_id] = self._loop.create_task(running)
            return
        # Its first step now: most answer in it, and need no task.
        outcome = start(running)
        if isinstance(outcome, Suspended):
            in_flight[request_id] = self._loop.create_task(outcome.finish())

    def _cancel(self, request_id: int) -> None:
        """Cancel a request still running: it never answers, and its id is free
        at once (for the next frame). One whose answer is on its way (no task)
        is left to answer: what it says is what was done."""
        task = self._in_flight.get(request_id)
        if task is not None and task.cancel():
            self._done([request_id])

    async def _run(
        self,
        request_id: int,
        run: Callable[[Space, Any], Awaitable[Answer]],
        args: Any,
        charged: int,
    ) -> None:
        body: msgspec.Struct | None
        try:
            if self._streams.draining:
                raise ApiProblem(503, "unavailable", "the node is shutting down")
            status, body = await run(self._streams.space, args)
        except asyncio.CancelledError:
            # No answer: nobody waits for one. A ``cancel`` freed the id
            # already (and it may be in use again); a dropped stream did not.
            if self._in_flight.get(request_id, None) is asyncio.current_task():
                self._done([request_id])
            raise
        except Exception as exc:
            if not isinstance(exc, ApiProblem | ForumError):
                log.exception("unhandled error on a stream request")
            problem = problem_of(exc)
            status = problem.status
            body = Problem(problem.code, problem.message, **problem.details)
        finally:
            self._streams.budget.release(charged)
        self._streams.requests += 1
        self._answer(request_id, _ENCODE((request_id, status, body)))

    def _answer(self, request_id: int, answer: bytes) -> None:
        """Send ``answer`` with the others ready in the same turn of the loop,
        in one message (one write: a group commit's answers go out in one
        syscall, not one each)."""
        if self._socket.closed:
            # A stream that dropped: what the answer said is what was done.
            self._done([request_id])
            return
        self._in_flight[request_id] = None
        self._outbox.append(answer)
        self._answered.append(request_id)
        if not self._flushing:
            self._flushing = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        # Runs after the callbacks of the turn that queued the first answer: its
        # neighbours are in. The write is made now; only a socket whose buffer
        # is full (a client that reads slowly) has it wait, in a task.
        answers, answered = self._outbox, self._answered
        self._outbox, self._answered = [], []
        try:
            outcome = start(
                self._socket.send_bytes(answers[0] if len(answers) == 1 else b"".join(answers))
            )
        except ConnectionError:
            outcome = None  # a stream that dropped: what the answers said is what was done
        if isinstance(outcome, Suspended):
            self._draining = self._loop.create_task(self._drain(outcome, answered))
        else:
            self._written(answered)

    async def _drain(self, sending: Suspended[None], answered: list[int]) -> None:
        try:
            with contextlib.suppress(ConnectionError):
                await sending
        finally:
            self._draining = None
            self._written(answered)

    def _written(self, answered: list[int]) -> None:
        self._flushing = False
        self._done(answered)
        if self._outbox:  # answered while the write waited
            self._flushing = True
            self._loop.call_soon(self._flush)

    def _done(self, request_ids: list[int]) -> None:
        """Requests no longer in flight: room for more, maybe nothing left."""
        in_flight = self._in_flight
        for request_id in request_ids:
            del in_flight[request_id]
        room, idle = self._room, self._idle
        if room is not None and len(in_flight) < self._streams.max_in_flight:
            self._room = None
            if not room.done():
                room.set_result(None)
        if idle is not None and not in_flight:
            self._idle = None
            if not idle.done():
                idle.set_result(None)

    async def close_when_answered(self) -> None:
        if self._in_flight:
            self._idle = self._loop.create_future()
            await self._idle
        await self.close()

    async def close(self) -> None:
        """Close with 1001; serving ends, and what is still in flight is cancelled."""
        await self._socket.close(code=WSCloseCode.GOING_AWAY, message=b"the node is shutting down")

    async def abandon(self) -> None:
        """The stream is gone: cancel what is in flight, and wait for it to end."""
        tasks = [t for t in (*self._in_flight.values(), self._draining) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            # Shielded: a handler cancelled as its client left still lets the
            # Forum put back what the cancelled requests were handed.
            await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))


def _refuse(problem: ApiProblem) -> Callable[[Space, Any], Awaitable[Answer]]:
    """An op that answers ``problem`` (a request refused before its args were read)."""

    async def refused(space: Space, args: Any) -> Answer:
        raise problem

    return refused


def _args(decoder: msgspec.msgpack.Decoder[Any], name: str, raw: msgspec.Raw) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.MsgspecError as exc:
        raise BadFrame(WSCloseCode.INVALID_TEXT, f"{name}: bad args: {exc}") from None


def _reason(text: str) -> bytes:
    """``text`` cut to fit a close frame, on a character boundary."""
    return text.encode()[:_REASON_BYTES].decode(errors="ignore").encode()
