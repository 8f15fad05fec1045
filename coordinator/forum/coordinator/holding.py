"""What a worker holds besides running handlers: its free handler slots
(:class:`Slots`), the reservations it keeps out of reach on purpose until
a time (:class:`Parked`), and those of completed jobs still to ack
(:class:`Acks`)."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Iterable

from forum.node.core.cancellation import wait_event
from forum.node.core.entries import EntryId


class Slots:
    """Free handler slots. The fetcher takes all that are free at once, so
    one reserve and one claim round trip serve as many jobs as can run."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._wake = asyncio.Event()
        self._closed = False

    async def acquire_all(self) -> int:
        """Wait for at least one free slot and take every free one; 0 once closed."""
        while self._free == 0 and not self._closed:
            self._wake.clear()
            await self._wake.wait()
        if self._closed:
            return 0
        n, self._free = self._free, 0
        return n

    async def wait_free(self, timeout: float) -> bool:
        """Whether a slot is free (or the slots closed) within ``timeout``
        seconds; takes none."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._free == 0 and not self._closed:
            self._wake.clear()
            if not await wait_event(self._wake, deadline - loop.time()):
                return self._free > 0 or self._closed
        return True

    def release(self, n: int = 1) -> None:
        if n:
            self._free += n
            self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()


class Parked:
    """Reservations held until a time, then to be released: a retry whose
    backoff is not over, a copy of a job that another holder runs, a job
    over a limit (released sooner, :meth:`wake`, when this worker frees a
    slot of that limit).

    Why released by the worker rather than left to run out on the node: a
    lease that runs out counts as a delivery whose worker died
    (``Reserved.deliveries``), and those count as attempts; a release does
    not. (A worker that dies with reservations parked lets them run out, and
    each counts one delivery: the price of a crash.)

    Each id is released once: parked again, its new time stands; woken, its
    time is void. The heap keeps the entries it had (dropping one from the
    middle costs a rebuild), and skips those no longer in force.

    Times are ``loop.time()``. :meth:`due` waits for the next one; after
    :meth:`close` it returns every one left, then nothing.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, EntryId]] = []
        self._order = 0  # ties broken by arrival, never by comparing ids
        #: Per id parked, the order of its heap entry in force; any other of
        #: its entries is stale.
        self._current: dict[EntryId, int] = {}
        #: Ids woken (:meth:`wake`): released at once, ahead of their time.
        self._woken: dict[EntryId, None] = {}
        self._wake = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return len(self._current) + len(self._woken)

    def add(self, entry_id: EntryId, hold: float) -> None:
        """Release ``entry_id`` in ``hold`` seconds (in place of any time it had)."""
        at = asyncio.get_running_loop().time() + hold
        heapq.heappush(self._heap, (at, self._order, entry_id))
        self._current[entry_id] = self._order
        self._woken.pop(entry_id, None)
        self._order += 1
        self._wake.set()

    def wake(self, ids: Iterable[EntryId]) -> None:
        """Release those of ``ids`` still parked now, not at their time
        (:meth:`due` hands them out next); the others are let be."""
        for entry_id in ids:
            if self._current.pop(entry_id, None) is not None:
                self._woken[entry_id] = None
        if self._woken:
            self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    async def due(self) -> list[EntryId]:
        """Wait until some are due (or woken) and return them (every one
        left once closed; ``[]`` when closed and none is left)."""
        loop = asyncio.get_running_loop()
        while not self._closed:
            self._drop_stale()
            if self._woken or (self._heap and self._heap[0][0] <= loop.time()):
                return self._pop_until(loop.time())
            self._wake.clear()
            timeout = self._heap[0][0] - loop.time() if self._heap else None
            await wait_event(self._wake, timeout)
        return self._pop_until(float("inf"))

    def _drop_stale(self) -> None:
        """Pop the heap's first entries while they are not in force."""
        heap = self._heap
        while heap and self._current.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)

    def _pop_until(self, now: float) -> list[EntryId]:
        due = list(self._woken)
        self._woken.clear()
        while self._heap and self._heap[0][0] <= now:
            _, order, entry_id = heapq.heappop(self._heap)
            if self._current.get(entry_id) == order:
                del self._current[entry_id]
                due.append(entry_id)
        return due


class Acks:
    """Reservations of completed jobs, to be acked: the worker's next reserve
    ahead takes them (:meth:`take`) and acks them in the same request; those
    that no reserve took within ``delay`` seconds of the first of them are
    handed out by :meth:`overdue`, to be acked on their own.

    Acking later is safe: a completed job's reservation only keeps its tuple
    out of reach (``delay`` is well under a lease), and its done marker turns
    away a copy that comes back.
    """

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._ids: list[EntryId] = []
        self._since = 0.0
        self._wake = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, ids: list[EntryId]) -> None:
        if not ids:
            return
        if not self._ids:
            self._since = asyncio.get_running_loop().time()
        self._ids += ids
        self._wake.set()

    def take(self) -> list[EntryId]:
        """Every one waiting, now."""
        ids, self._ids = self._ids, []
        return ids

    def close(self) -> None:
        """:meth:`overdue` hands out what is left at once, then nothing."""
        self._closed = True
        self._wake.set()

    async def overdue(self) -> list[EntryId]:
        """Wait until the first waiting has waited ``delay`` and take them all
        (at once once closed; ``[]`` when closed and none is left)."""
        loop = asyncio.get_running_loop()
        while True:
            if self._ids and (self._closed or loop.time() >= self._since + self._delay):
                return self.take()
            if self._closed:
                return []
            self._wake.clear()
            timeout = self._since + self._delay - loop.time() if self._ids else None
            await wait_event(self._wake, timeout)
