"""Time in the tuple space: tuples not due yet, and when tuples expire.

A Write's ``due`` and ``expires`` (:class:`~node.entries.Properties`) are
wall-clock times, whole milliseconds since the Unix epoch, so every node
reads them alike. The :class:`Schedule` keeps the tuples that are not due
yet (out of the live index: not taken, read, reserved or counted) and the
times at which tuples expire, and calls the Forum back when a due time or an
expiry comes, with one event-loop timer for each (the earliest), re-armed
as times are added and as they pass.

Why wall clock and not the loop's monotonic clock: a due time must mean the
same on every node and after a restart, and only wall clock does. A timer
fires by the loop's clock, so a wall clock stepped meanwhile makes it fire
early or late: early, nothing is due yet and it is armed again; late, by at
most the step (ntp slews rather than steps, in practice).
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable

from node.entries import EntryId, Tuple
from node.index import LiveIndex

#: Called with the tuples that fell due (as the index gives them: ``props`` PLAIN).
DueCallback = Callable[[list[Tuple]], None]
#: Called with the ids whose expiry came (some may be dead already: the
#: callback checks).
ExpiryCallback = Callable[[list[EntryId]], None]
#: A timer never waits longer than this: a wall clock stepped back is caught up with.
_LONGEST_WAIT = 60.0


#: A wall clock: Unix seconds (``time.time``; tests give a clock of their own).
Clock = Callable[[], float]


class Schedule:
    """The tuples waiting for their due time, and the expiry times to watch.
    Synchronous: the Forum calls it on its event loop."""

    def __init__(
        self, on_due: DueCallback, on_expiry: ExpiryCallback, clock: Clock = time.time
    ) -> None:
        self._clock = clock
        self._on_due = on_due
        self._on_expiry = on_expiry
        # Not due yet: in an index of their own, so that how many of them
        # match a prefix is a bisection (a limit counts them).
        self._waiting = LiveIndex()
        self._due: list[tuple[int, int, EntryId]] = []  # (due, order, id), a heap
        self._expiries: list[tuple[int, int, EntryId]] = []  # (expires, order, id), a heap
        self._order = 0  # ties broken in the order times were added
        self._due_timer: asyncio.TimerHandle | None = None
        self._expiry_timer: asyncio.TimerHandle | None = None
        #: Times were added with no event loop running (a Forum replayed
        #: outside one): the timers are armed by :meth:`arm` once one runs.
        self.unarmed = False

    def __len__(self) -> int:
        """How many tuples are not due yet."""
        return len(self._waiting)

    def __contains__(self, entry_id: EntryId) -> bool:
        return entry_id in self._waiting

    def ids(self) -> list[EntryId]:
        """The ids of the tuples not due yet."""
        return self._waiting.ids()

    def count(self, prefix: bytes) -> int:
        """How many tuples not due yet match ``prefix``."""
        return self._waiting.count(prefix)

    def groups(self, separator: bytes, most: int) -> dict[bytes, int]:
        """How many tuples not due yet fall in each group (``LiveIndex.groups``)."""
        return self._waiting.groups(separator, most)

    def hold(self, item: Tuple, due: int) -> None:
        """Keep ``item`` until ``due`` (ms since the epoch), then hand it to ``on_due``."""
        self._waiting.add(item)
        self._push(self._due, due, item.id)
        if self._due[0][2] is item.id:  # the earliest: the timer is for it
            self._due_timer = self._arm(self._due_timer, due, self._fire_due)

    def drop(self, entry_id: EntryId) -> Tuple | None:
        """Forget a tuple not due yet (taken elsewhere, or expired); it, or
        ``None`` if it is not here. Its time stays in the heap, skipped when
        it comes."""
        removed = self._waiting.remove_id(entry_id)
        return None if removed is None else removed[1]

    def expire_at(self, entry_id: EntryId, expires: int) -> None:
        """Call ``on_expiry`` with ``entry_id`` at ``expires`` (ms since the epoch)."""
        self._push(self._expiries, expires, entry_id)
        if self._expiries[0][2] is entry_id:  # the earliest: the timer is for it
            self._expiry_timer = self._arm(self._expiry_timer, expires, self._fire_expiries)

    def now_ms(self) -> int:
        """The clock's time in whole milliseconds since the Unix epoch."""
        return int(self._clock() * 1000)

    def run_due(self) -> None:
        """Hand over whatever is due, and expire whatever has expired, by
        now (the timers call this; so may a test that moves its clock)."""
        self._fire_due()
        self._fire_expiries()

    def arm(self) -> None:
        """Arm the timers for the earliest times (on the running loop)."""
        self.unarmed = False
        if self._due:
            self._due_timer = self._arm(self._due_timer, self._due[0][0], self._fire_due)
        if self._expiries:
            at = self._expiries[0][0]
            self._expiry_timer = self._arm(self._expiry_timer, at, self._fire_expiries)

    def close(self) -> None:
        for timer in (self._due_timer, self._expiry_timer):
            if timer is not None:
                timer.cancel()
        self._due_timer = self._expiry_timer = None

    # -- the timers ------------------------------------------------------------

    def _push(self, heap: list[tuple[int, int, EntryId]], at: int, entry_id: EntryId) -> None:
        self._order += 1
        heapq.heappush(heap, (at, self._order, entry_id))

    def _arm(
        self, timer: asyncio.TimerHandle | None, at: int, fire: Callable[[], None]
    ) -> asyncio.TimerHandle | None:
        if timer is not None:
            timer.cancel()
        wait = min(max(0.0, at / 1000 - self._clock()), _LONGEST_WAIT)
        try:
            return asyncio.get_running_loop().call_later(wait, fire)
        except RuntimeError:  # no loop yet: armed by arm()
            self.unarmed = True
            return None

    def _fire_due(self) -> None:
        if self._due_timer is not None:
            self._due_timer.cancel()
        self._due_timer = None
        now = self.now_ms()
        due: list[Tuple] = []
        while self._due and self._due[0][0] <= now:
            _, _, entry_id = heapq.heappop(self._due)
            removed = self._waiting.remove_id(entry_id)
            if removed is not None:  # else dropped meanwhile
                due.append(removed[1])
        if self._due:
            self._due_timer = self._arm(None, self._due[0][0], self._fire_due)
        if due:
            self._on_due(due)

    def _fire_expiries(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._expiry_timer = None
        now = self.now_ms()
        expired: list[EntryId] = []
        while self._expiries and self._expiries[0][0] <= now:
            expired.append(heapq.heappop(self._expiries)[2])
        if self._expiries:
            self._expiry_timer = self._arm(None, self._expiries[0][0], self._fire_expiries)
        if expired:
            self._on_expiry(expired)
