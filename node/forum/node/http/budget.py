"""The node-wide budget of request body bytes in flight.

Each request's limits bound what one request may hold (``max_batch_bytes``),
not what all of them hold together: 16 concurrent 60 MiB batches held
960 MiB of bodies at once, and as much again decoded, and peaked the node
at 2.2 GiB. So every body (an HTTP request's, a stream frame's) is charged
to one :class:`BodyBudget` from its first byte read until its request is
answered, which covers the payloads waiting in the write path for their
append to be durable. Past the budget a request waits up to ``wait``
seconds for room (first come, first served), then is refused
``503 busy`` with ``Retry-After``, having changed nothing. A stream's
message is charged as its first frame's header arrives
(:mod:`forum.node.http.frames`), and waits unread for room as long as it takes
(``patient``): the stream has no 503 for it, only its TCP window.

Timeline, a budget of 128 MiB, two 60 MiB batches in flight::

    t0: A, B: bodies charged (120 MiB), being read and written
    t1: C: 60 MiB more would be 180 MiB: C waits (its body unread)
    t2: A answered: 60 MiB released; C charged, its body read now
    (had t2 come after ``wait`` seconds: C answered 503, Retry-After: 1)

Bodies of at most :data:`SMALL` bytes are not charged: the budget is for
the bodies that make memory grow, and an ack or a take behind a flood of
batches must not wait for them. What they hold is bounded apart (by the
connections, ``max_connections``, and a stream's ``max_in_flight``).

A body larger than the whole budget is let through when nothing else is
charged, alone, so a node whose ``body_budget`` is below
``max_batch_bytes`` still takes its largest batch.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from forum.node.config.node import NodeConfig
from forum.node.http.bodies import ApiProblem

#: Bodies up to this many bytes are not charged (an ack's, a take's, a small write's).
SMALL = 64 * 1024
#: What a refusal tells the client to wait before trying again, in seconds.
RETRY_AFTER = 1


class BodyBudget(Collector):
    """Bytes of request bodies the node holds at once, at most ``limit``
    (see the module docstring)."""

    def __init__(self, limit: int, wait: float, backstop: int, exempt: str) -> None:
        self.limit = limit
        self.wait = wait
        #: What an HTTP body of unknown length (chunked) is charged: the app's
        #: largest body, as it may be that big.
        self.backstop = backstop
        #: The paths under this are not charged (the cluster's routes).
        self.exempt = exempt
        self.in_use = 0
        self.peak = 0
        self.waited = 0
        self.refused = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @classmethod
    def of(cls, config: NodeConfig, backstop: int, exempt: str) -> BodyBudget:
        return cls(config.body_budget, config.body_budget_wait, backstop, exempt)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """Its figures for ``/metrics`` (a Prometheus collector)."""
        yield GaugeMetricFamily(
            "forum_body_budget_bytes", "The node's body_budget.", value=self.limit
        )
        yield GaugeMetricFamily(
            "forum_body_bytes_in_flight",
            "Bytes of request bodies charged to the body budget now.",
            value=self.in_use,
        )
        yield GaugeMetricFamily(
            "forum_body_bytes_in_flight_peak",
            "The most bytes of request bodies ever charged at once.",
            value=self.peak,
        )
        yield GaugeMetricFamily(
            "forum_body_budget_waiting",
            "Requests waiting for room in the body budget now.",
            value=len(self._waiters),
        )
        yield CounterMetricFamily(
            "forum_body_budget_waits",
            "Requests that had to wait for room in the body budget.",
            value=self.waited,
        )
        yield CounterMetricFamily(
            "forum_body_budget_refusals",
            "Requests refused 503 busy: no room in the body budget in time.",
            value=self.refused,
        )

    def _fits(self, size: int) -> bool:
        return self.in_use == 0 or self.in_use + size <= self.limit

    @staticmethod
    def due(size: int) -> int:
        """What a body of ``size`` bytes is charged: nothing for a small one."""
        return size if size > SMALL else 0

    def try_charge(self, size: int) -> bool:
        """Charge ``size`` bytes now if they fit (and nobody waits before them)."""
        if not size:
            return True
        if self._waiters or not self._fits(size):
            return False
        self._take(size)
        return True

    def force(self, size: int) -> None:
        """Charge ``size`` bytes whether they fit or not (the rest of a stream
        message already charged in part: waiting there could deadlock)."""
        self._take(size)

    async def charge(self, size: int, *, patient: bool = False) -> None:
        """Charge ``size`` bytes, waiting up to ``wait`` seconds for room
        (``patient``: as long as it takes); :class:`ApiProblem` 503 ``busy``
        when there is none by then."""
        if self.try_charge(size):
            return
        wait = None if patient else self.wait
        self.waited += 1
        room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, room)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(wait):
                await room
        except BaseException as exc:
            charged = room.done() and not room.cancelled()
            if charged and isinstance(exc, TimeoutError):
                return  # room came in the same turn as the deadline: in time
            if charged:
                self.release(size)  # charged as it was cancelled: give it back
            if isinstance(exc, TimeoutError):
                self.refused += 1
                raise self.refusal(size) from None
            raise
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)
                self._wake()  # the first one may have been held back by this one

    def release(self, size: int) -> None:
        """Give back ``size`` bytes charged."""
        if not size:
            return
        self.in_use -= size
        self._wake()

    def _take(self, size: int) -> None:
        self.in_use += size
        self.peak = max(self.peak, self.in_use)

    def _wake(self) -> None:
        """Charge the waiters that now fit, first come first served."""
        waiters = self._waiters
        while waiters and self._fits(waiters[0][0]):
            size, room = waiters.popleft()
            if not room.done():
                self._take(size)
                room.set_result(None)

    def refusal(self, size: int) -> ApiProblem:
        return ApiProblem(
            503,
            "busy",
            f"the node holds {self.in_use} bytes of request bodies, its body_budget is "
            f"{self.limit}: a body of {size} bytes found no room within {self.wait:g} s; "
            f"retry after {RETRY_AFTER} s",
            headers={"Retry-After": str(RETRY_AFTER)},
        )

    @asynccontextmanager
    async def held(self, size: int) -> AsyncIterator[None]:
        """A body of ``size`` bytes charged (:meth:`due`) for the duration of the block."""
        due = self.due(size)
        await self.charge(due)
        try:
            yield
        finally:
            self.release(due)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Charge a client request's body (before it is read) until it is answered.

        The cluster routes are not charged: what peers send is bounded by
        their number, and a push refused would only come again.
        """
        if not request.body_exists or request.path.startswith(self.exempt):
            return await handler(request)
        size = request.content_length
        async with self.held(self.backstop if size is None else size):
            return await handler(request)
