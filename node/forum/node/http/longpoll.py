"""Long polls: requests that wait for a tuple, bounded in number and woken on drain.

A take with ``wait`` waits inside the Forum (which hands a new tuple to the
first waiter it matches). A read with ``wait`` waits here: a Forum live
listener wakes the readers whose prefix a newly live tuple matches (a tuple
from a peer becomes live after the remote delay, not when it arrives), and
each reads again.

On shutdown :meth:`LongPolls.drain` ends every wait at once; the requests
answer "nothing matched" (204), and new requests stop waiting. A wait ended
this way leaves nothing behind: the Forum puts back a tuple that was handed
to a take cancelled before it could answer.

Timeline of a drain during a long-poll take::

    t0: client A: POST /v1/take?prefix=job-&wait=30   (waits in the Forum)
    t1: SIGTERM: the listening socket closes; drain() expires A's timeout
    t2: A's take is cancelled before it got a tuple; A gets 204
    t3: in-flight requests finish; the Strand closes
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from forum.node.core.entries import Reserved, Tuple
from forum.node.core.resource import AsyncResource
from forum.node.core.space import Pattern
from forum.node.http.bodies import ApiProblem
from forum.node.space.forum import Forum

_T = TypeVar("_T", bound=Tuple)


class LongPolls(AsyncResource):
    """The long polls of one node. Use as an async context manager (it listens
    to the Forum while open)."""

    def __init__(self, forum: Forum, max_waiters: int) -> None:
        self._forum = forum
        self._max_waiters = max_waiters
        self._timeouts: set[asyncio.Timeout] = set()
        self._readers: dict[asyncio.Future[None], bytes] = {}
        self._draining = False
        self._listening = False

    async def __aenter__(self) -> LongPolls:
        self._forum.add_live_listener(self._on_live)
        self._listening = True
        return self

    async def aclose(self) -> None:
        self.drain()
        if self._listening:
            self._listening = False
            self._forum.remove_live_listener(self._on_live)

    @property
    def waiting(self) -> int:
        """How many requests are waiting now."""
        return len(self._timeouts)

    @property
    def draining(self) -> bool:
        return self._draining

    def drain(self) -> None:
        """End every wait now, and make later requests answer without waiting
        (writes waiting for room under a prefix's limit too: they answer 503)."""
        self._draining = True
        self._forum.end_room_waits()
        now = asyncio.get_running_loop().time()
        for timeout in self._timeouts:
            timeout.reschedule(now)

    async def take(self, pattern: Pattern, wait: float) -> Tuple | None:
        """Take the oldest match, waiting up to ``wait`` seconds for one."""
        if not wait or self._draining:
            return await self._forum.take_entry(pattern)
        return await self._bounded(lambda: self._forum.take_entry(pattern, timeout=wait))

    async def reserve(self, pattern: Pattern, lease: float, wait: float) -> Reserved | None:
        """Reserve the oldest match for ``lease`` s, waiting up to ``wait`` s for one."""
        if not wait or self._draining:
            return await self._forum.reserve(pattern, lease)
        return await self._bounded(lambda: self._forum.reserve(pattern, lease, timeout=wait))

    async def read(self, pattern: Pattern, wait: float) -> Tuple | None:
        """Read the oldest match, waiting up to ``wait`` seconds for one."""
        if not wait or self._draining:
            return await self._forum.read_entry(pattern)
        return await self._bounded(lambda: self._read_waiting(pattern, wait))

    async def _bounded(self, waiting: Callable[[], Awaitable[_T | None]]) -> _T | None:
        if len(self._timeouts) >= self._max_waiters:
            raise ApiProblem(
                503,
                "too_many_waiters",
                f"{self._max_waiters} requests are already waiting; retry, or wait less",
                headers={"Retry-After": "1"},
            )
        # No deadline of its own: drain() sets one (now) to end the wait.
        cutoff = asyncio.timeout(None)
        try:
            async with cutoff:
                self._timeouts.add(cutoff)
                try:
                    return await waiting()
                finally:
                    self._timeouts.discard(cutoff)
        except TimeoutError:
            if cutoff.expired():
                return None
            raise

    async def _read_waiting(self, pattern: Pattern, wait: float) -> Tuple | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            # Listen before looking, so a write between the two is not missed.
            woken: asyncio.Future[None] = loop.create_future()
            self._readers[woken] = pattern.prefix
            try:
                found = await self._forum.read_entry(pattern)
                if found is not None:
                    return found
                try:
                    async with asyncio.timeout_at(deadline):
                        await woken
                except TimeoutError:
                    return None
            finally:
                del self._readers[woken]

    def _on_live(self, item: Tuple) -> None:
        for woken, prefix in self._readers.items():
            if not woken.done() and item.payload.startswith(prefix):
                woken.set_result(None)
