"""The client's end of a node's stream (``GET /v1/stream``, docs/wire.md).

One WebSocket, opened on first use and again after it drops; every
operation of a :class:`~forum.node.client.remote.ForumClient` is one request frame
``[id, op, args]`` on it, answered by ``[id, status, body]`` in whatever
order the node finishes them, so many callers share it at once. At most
``max_in_flight`` requests are sent ahead (the node's own bound: more would
only wait in its socket).

When the stream drops, every request in flight fails with
:class:`~forum.node.core.errors.NodeUnavailable` (retriable, as a lost HTTP answer is)
and the next one opens a new stream. A request the caller stops waiting
for (cancelled, or timed out) is cancelled on the node too (a ``cancel``
frame), as closing an HTTP connection cancels its request there: a waiting
take hands nothing over.

A request costs one frame each way and little else: no timer of its own
(one timer per stream, due at the soonest deadline, fails what is late),
no lock (a count of what is in flight; only a caller at the bound waits).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
from typing import Any

import aiohttp
import msgpack
import msgspec

from forum.node.api.operations import CANCEL, MAX_IN_FLIGHT
from forum.node.client.answers import read
from forum.node.core.eager import Suspended, start
from forum.node.core.errors import NodeRejected, NodeTimeout, NodeUnavailable, Unauthorized

#: An answer, its body left encoded: the client decodes it as the document
#: the node declares for the op (:data:`forum.node.api.operations.STREAM_OPS`).
_ANSWER = msgspec.msgpack.Decoder(tuple[int, int, msgspec.Raw])
_ENCODE = msgspec.msgpack.Encoder().encode


def _answers(data: bytes) -> list[tuple[int, int, msgspec.Raw]]:
    """The answers one message holds: one, or several back to back (those the
    node had ready at once); ``ValueError`` if they are not answers."""
    try:
        return [_ANSWER.decode(data)]
    except msgspec.DecodeError:
        pass  # trailing bytes: several (or none that decode: found below)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None
    unpacker = msgpack.Unpacker()
    unpacker.feed(data)
    answers = []
    view = memoryview(data)
    start = 0
    try:
        while start < len(data):
            unpacker.skip()  # to the end of the next answer, building nothing
            end = unpacker.tell()
            answers.append(_ANSWER.decode(view[start:end]))
            start = end
    except msgspec.MsgspecError as exc:
        raise ValueError(f"not a sequence of [id, status, body]: {exc}") from None
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueError(f"not msgpack: {str(exc) or type(exc).__name__}") from None
    return answers


class _Pending:
    """A request sent and not yet answered: the future its caller awaits."""

    __slots__ = ("answer", "deadline", "op", "timeout")

    def __init__(self, op: str, timeout: float, loop: asyncio.AbstractEventLoop) -> None:
        self.op = op
        self.timeout = timeout
        self.deadline = loop.time() + timeout
        self.answer: asyncio.Future[tuple[int, msgspec.Raw]] = loop.create_future()

    def late(self, url: str) -> NodeTimeout:
        return NodeTimeout(url, f"{self.op}: no answer within {self.timeout:g} s")


class StreamUnsupported(Exception):
    """The node has no stream (it answers 404); the client uses HTTP instead."""


class StreamConnection:
    """One stream to the node at ``url``, opened with ``session``."""

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        *,
        connect_timeout: float,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.url = url
        self._session = session
        self._connect_timeout = connect_timeout
        self._max_in_flight = max_in_flight
        self._loop = asyncio.get_running_loop()
        #: Set when a request ends while callers wait for room (``_blocked``).
        self._room = asyncio.Event()
        self._blocked = 0
        self._opening = asyncio.Lock()
        self._ids = itertools.count(1)
        self._socket: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, _Pending] = {}
        self._cancels: set[asyncio.Task[None]] = set()
        #: The one timer of the requests' deadlines, due at ``_due`` (the soonest).
        self._expiry: asyncio.TimerHandle | None = None
        self._due = math.inf

    async def call(self, op: str, args: dict[str, Any], timeout: float) -> tuple[int, Any]:
        """The node's ``(status, body)`` for one request, its body decoded
        (:func:`forum.node.client.answers.read`); ``NodeTimeout`` after
        ``timeout`` s."""
        pending = _Pending(op, timeout, self._loop)
        socket = self._socket
        if socket is None or socket.closed or len(self._pending) >= self._max_in_flight:
            try:
                async with asyncio.timeout_at(pending.deadline):
                    socket = await self._ready()
            except TimeoutError as exc:
                raise pending.late(self.url) from exc
        return await self._request(socket, args, pending)

    async def _ready(self) -> aiohttp.ClientWebSocketResponse:
        """The open stream, once it has room for one more request."""
        while len(self._pending) >= self._max_in_flight:
            self._blocked += 1
            try:
                self._room.clear()
                await self._room.wait()
            finally:
                self._blocked -= 1
        return await self._open()

    async def _request(
        self, socket: aiohttp.ClientWebSocketResponse, args: dict[str, Any], pending: _Pending
    ) -> tuple[int, Any]:
        request_id, op = next(self._ids), pending.op
        self._pending[request_id] = pending
        if pending.deadline < self._due:
            self._expire_at(pending.deadline)
        try:
            try:
                sending = start(socket.send_bytes(_ENCODE((request_id, op, args))))
                if isinstance(sending, Suspended):
                    # The socket's buffer is full (a node that reads slowly): the
                    # deadline bounds the wait for room there too.
                    async with asyncio.timeout_at(pending.deadline):
                        await sending
            except (ConnectionError, aiohttp.ClientError) as exc:
                raise NodeUnavailable(self.url, f"{op}: the stream dropped: {exc}") from exc
            except TimeoutError as exc:
                self._cancel(socket, request_id)
                raise pending.late(self.url) from exc
            status, body = await pending.answer
        except asyncio.CancelledError:
            # The caller stopped waiting (awaiting it cancels the future too):
            # the node need not go on with it.
            self._cancel(socket, request_id)
            raise
        finally:
            del self._pending[request_id]
            if self._blocked:
                self._room.set()
        return status, read(self.url, op, status, body)

    def _expire_at(self, due: float) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        self._due = due
        self._expiry = self._loop.call_at(due, self._expire)

    def _expire(self) -> None:
        """Fail the requests past their deadline (cancelling them on the node);
        wait for the soonest of the others."""
        self._expiry, self._due = None, math.inf
        # The loop's clock may tick in milliseconds: a deadline within one is due.
        now = self._loop.time() + 0.001
        soonest = math.inf
        for request_id, pending in self._pending.items():
            if pending.answer.done():
                continue
            if pending.deadline <= now:
                pending.answer.set_exception(pending.late(self.url))
                if self._socket is not None:
                    self._cancel(self._socket, request_id)
            else:
                soonest = min(soonest, pending.deadline)
        if soonest < math.inf:
            self._expire_at(soonest)

    def _cancel(self, socket: aiohttp.ClientWebSocketResponse, request_id: int) -> None:
        """Tell the node to cancel a request nobody waits for any more."""
        if socket.closed:
            return
        frame = _ENCODE((next(self._ids), CANCEL, {"id": request_id}))
        task = asyncio.get_running_loop().create_task(self._send_quietly(socket, frame))
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    @staticmethod
    async def _send_quietly(socket: aiohttp.ClientWebSocketResponse, frame: bytes) -> None:
        # A stream that dropped meanwhile cancelled everything anyway.
        with contextlib.suppress(ConnectionError, aiohttp.ClientError):
            await socket.send_bytes(frame)

    async def _open(self) -> aiohttp.ClientWebSocketResponse:
        socket = self._socket
        if socket is not None and not socket.closed:
            return socket
        async with self._opening:
            if self._socket is None or self._socket.closed:
                self._socket = await self._connect()
                self._reader = asyncio.get_running_loop().create_task(self._read(self._socket))
            return self._socket

    async def _connect(self) -> aiohttp.ClientWebSocketResponse:
        what = "GET /v1/stream"
        try:
            async with asyncio.timeout(self._connect_timeout):
                return await self._session.ws_connect(
                    self.url + "/v1/stream", max_msg_size=0, autoping=True, compress=0
                )
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 404:
                raise StreamUnsupported from exc
            if exc.status == 401:
                message = "missing or wrong credentials: give the node's token"
                raise Unauthorized(self.url, 401, "unauthorized", message) from exc
            if (
                exc.status == 421
            ):  # the handshake's answer has no body to quote (forum.node.http.auth)
                message = (
                    "the node does not answer to this host name: without a token it answers "
                    "to its addresses, localhost and the names it was given (--allow-host)"
                )
                raise NodeRejected(self.url, 421, "misdirected_request", message) from exc
            raise NodeRejected(self.url, exc.status, f"http_{exc.status}", exc.message) from exc
        except TimeoutError as exc:
            raise NodeTimeout(
                self.url, f"{what}: no stream within {self._connect_timeout:g} s"
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            raise NodeUnavailable(self.url, f"{what}: cannot connect: {exc.os_error}") from exc
        except aiohttp.ClientError as exc:
            raise NodeUnavailable(self.url, f"{what}: {type(exc).__name__}: {exc}") from exc

    async def _read(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        """Hand each answer to its request; when the stream ends, fail the rest."""
        why = "the stream closed"
        try:
            while (message := await socket.receive()).type is aiohttp.WSMsgType.BINARY:
                try:
                    answers = _answers(message.data)
                except ValueError as exc:
                    why = f"the node's answer is not [id, status, body]: {exc}"
                    await socket.close(code=aiohttp.WSCloseCode.INVALID_TEXT, message=b"bad answer")
                    break
                for request_id, status, body in answers:
                    pending = self._pending.get(request_id)
                    if pending is not None and not pending.answer.done():
                        pending.answer.set_result((status, body))
            else:
                if message.type is aiohttp.WSMsgType.CLOSE:
                    why = f"the node closed the stream ({message.data}: {message.extra})"
                elif message.type is aiohttp.WSMsgType.ERROR:
                    why = f"the stream failed: {message.data}"
        finally:
            if not socket.closed:
                await socket.close()
            for pending in list(self._pending.values()):
                if not pending.answer.done():
                    pending.answer.set_exception(NodeUnavailable(self.url, f"{pending.op}: {why}"))

    async def aclose(self) -> None:
        """Close the stream (what is in flight fails). Idempotent."""
        socket, reader = self._socket, self._reader
        self._socket = self._reader = None
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry, self._due = None, math.inf
        if socket is not None:
            await socket.close()
        if reader is not None:
            await reader
        if self._cancels:
            await asyncio.gather(*self._cancels, return_exceptions=True)
