"""The stream's incoming bytes, charged to the body budget as each frame's header arrives.

aiohttp's WebSocket reader hands over whole messages only, so a message
charged when it is handed over has already been read: 16 streams each
sending a 60 MiB batch held 960 MiB before the budget could hold one back.
:class:`FrameMeter` sits between the connection and aiohttp (the
transport's protocol: it forwards everything to aiohttp's) and reads only
the frame headers of RFC 6455 5.2::

    byte 0   FIN, RSV1-3, opcode (0 continuation, 1 text, 2 binary, 8+ control)
    byte 1   MASK, payload length (0-125; 126: 16-bit length follows;
             127: 64-bit length follows)
    then     the extended length, the 4-byte mask key (MASK set), the payload

A data frame's payload is charged as its header arrives (a message over
:data:`~forum.node.http.budget.SMALL` in all: :meth:`BodyBudget.due` of the
message), before aiohttp reads it. With no room, the connection's reading
pauses (the client's TCP window fills) until there is; the frame goes on
then. So a stream holds at most its messages charged, never one the budget
has no room for. Control frames (pings, the close) are never held, and
neither are the later fragments of a message charged in part (RFC 6455 5.4):
they are charged as they come, room or not, since streams each holding part
of a message and waiting for room for the rest could wait on each other for
ever. (A client that fragments its messages can so overshoot the budget by
what remains of one message per stream; clients send a message whole, in one
frame, as the Python client does.)

When aiohttp hands the message over, the request it carries takes its
charge over (:meth:`FrameMeter.hand_over`) and gives it back when it is
answered. What is charged and never handed over (a stream cut mid-message,
a frame aiohttp refuses) is given back when the stream ends
(:meth:`FrameMeter.close`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from forum.node.http.budget import BodyBudget

#: A control frame's opcode is 8 or more (close, ping, pong).
_CONTROL = 8
_FIN = 0x80


def _inner_paused(inner: object) -> bool:
    """Whether aiohttp paused the reading itself (its queue of messages is
    full): then it resumes it, not the meter. (Its flags have no public
    reader; without them, the meter's resume would undo aiohttp's pause.)"""
    return bool(getattr(inner, "_reading_paused", False) or getattr(inner, "_buffer_paused", False))


class FrameMeter(asyncio.Protocol):
    """The protocol of one stream's connection, in front of aiohttp's own
    (``inner``), charging each data frame to ``budget`` before it is read.
    Frames of ``max_frame`` bytes or more are not charged: aiohttp refuses
    them at their header (1009)."""

    def __init__(
        self,
        inner: asyncio.BaseProtocol,
        transport: asyncio.Transport,
        budget: BodyBudget,
        max_frame: int,
    ) -> None:
        self._inner: Any = inner
        self._transport = transport
        self._budget = budget
        self._max_frame = max_frame
        #: The header bytes of the frame being read, until it is whole.
        self._head = bytearray()
        #: Payload bytes of the current frame still to come.
        self._payload_left = 0
        #: The payload bytes of the message being read so far (data frames).
        self._message = 0
        #: Charged, not yet handed over to a request.
        self.charged = 0
        #: Bytes that came while a frame waited for room, and that wait.
        self._held = bytearray()
        self._waiting: asyncio.Task[None] | None = None

    # -- asyncio.Protocol: everything but the bytes goes to aiohttp as it is ---------

    def data_received(self, data: bytes) -> None:
        if self._waiting is not None:
            self._held += data  # (aiohttp resumed reading meanwhile: its queue drained)
            self._transport.pause_reading()
            return
        self._feed(memoryview(data))

    def eof_received(self) -> bool | None:
        result: bool | None = self._inner.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    # -- the frames ------------------------------------------------------------------

    def _feed(self, data: memoryview) -> None:
        """Pass ``data`` on to aiohttp, up to a data frame whose charge finds no room."""
        start = position = 0
        while position < len(data):
            if self._payload_left:
                step = min(self._payload_left, len(data) - position)
                self._payload_left -= step
                position += step
                continue
            self._head.append(data[position])
            position += 1
            header = self._header_read()
            if header is None:
                continue
            due, continuing = header
            if continuing:
                # The rest of a message charged in part: never held, or two
                # streams each holding part of a message could wait on each other.
                self._budget.force(due)
                self.charged += due
                continue
            if self._budget.try_charge(due):
                self.charged += due
                continue
            # No room: what came before goes on, the rest waits with the reading.
            self._inner.data_received(bytes(data[start:position]))
            self._held += data[position:]
            self._transport.pause_reading()
            self._waiting = asyncio.get_running_loop().create_task(self._wait_for_room(due))
            return
        if start < len(data):
            self._inner.data_received(bytes(data[start:]))

    def _header_read(self) -> tuple[int, bool] | None:
        """Once ``_head`` holds a whole frame header: start its payload, and
        say what it is to be charged, and whether its message was charged in
        part already (``None``: the header is not whole yet)."""
        head = self._head
        if len(head) < 2:
            return None
        length = head[1] & 0x7F
        size = 2 + (2 if length == 126 else 8 if length == 127 else 0)
        masked = bool(head[1] & 0x80)
        if len(head) < size + (4 if masked else 0):
            return None
        if length >= 126:
            length = int.from_bytes(head[2:size], "big")
        opcode, final = head[0] & 0x0F, bool(head[0] & _FIN)
        head.clear()
        self._payload_left = length
        if opcode >= _CONTROL:
            return 0, False
        before = self._message
        total = before + length
        self._message = 0 if final else total
        if total >= self._max_frame:
            return 0, False  # aiohttp refuses it at its header (1009): none of it is read
        # The whole message is charged once it is over SMALL: what came before too.
        charged_before = self._budget.due(before)
        return self._budget.due(total) - charged_before, charged_before > 0

    async def _wait_for_room(self, due: int) -> None:
        try:
            await self._budget.charge(due, patient=True)
        except asyncio.CancelledError:
            return
        self.charged += due
        self._waiting = None
        held, self._held = self._held, bytearray()
        if not self._transport.is_closing() and not _inner_paused(self._inner):
            self._transport.resume_reading()
        self._feed(memoryview(held))

    # -- the stream's side ---------------------------------------------------------------

    def hand_over(self, size: int) -> int:
        """A message of ``size`` bytes was handed over: its request now holds
        its charge (what it gives back when it ends)."""
        due = min(self._budget.due(size), self.charged)
        self.charged -= due
        return due

    def close(self) -> None:
        """The stream ended: give back what no request took over."""
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None
        self._budget.release(self.charged)
        self.charged = 0
