"""Time in the tuple space: tuples not due yet, and when tuples expire.

A Write's ``due`` and ``expires`` (:class:`~forum.node.core.entries.Properties`) are
wall-clock times, whole milliseconds since the Unix epoch, so every node
reads them alike. The :class:`Schedule` keeps the tuples that are not due
yet (out of the live index: not taken, read, reserved or counted) and the
times at which tuples expire, and calls the Forum back when a due time or an
expiry comes, with one event-loop timer for each (the earliest), re-armed
as times are added and as they pass.

The times are kept in a :class:`Timetable` each: one bucket per second of
flat integer arrays, so that a time added is an append and leaves no object
behind for the cyclic collector to walk (a heap entry per tuple did: two
objects per tuple with a ttl, and full collections that grew with them).
A second's bucket is sorted when that second comes, and its ids are handed
back at their exact times, as a heap would: a bucket never makes a time
come early or late.

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
from array import array
from bisect import insort
from collections.abc import Callable

from forum.node.core.entries import EntryId, Tuple
from forum.node.space.index import LiveIndex

#: Called with the tuples that fell due (as the index gives them: ``props`` PLAIN).
DueCallback = Callable[[list[Tuple]], None]
#: Called with the ids whose expiry came (some may be dead already: the
#: callback checks).
ExpiryCallback = Callable[[list[EntryId]], None]
#: A timer never waits longer than this: a wall clock stepped back is caught up with.
_LONGEST_WAIT = 60.0
#: The span of a timetable's bucket, in ms.
TICK_MS = 1000


#: A wall clock: Unix seconds (``time.time``; tests give a clock of their own).
Clock = Callable[[], float]


class Timetable:
    """Entry ids to hand back at given times (ms since the epoch): those
    whose time has come, in time order, ties in the order they were added.

    A time in a second still to come is appended to that second's bucket,
    one flat array of ``(time, origin number, seq)``; a heap holds the
    seconds, one entry each. When a second comes, its bucket becomes the
    *current* one: sorted by time once (an array of positions), then read
    from the front as its times come. A time added within (or before) the
    current second goes into its place in the current one. So adding a time
    costs an append, and nothing per id stays for the collector to walk.

    A *run* (:meth:`add_run`) is one triple for many ids of one origin at
    one time, ``(time, run number, 0)`` (no id has seq 0): the run is an
    array of seqs that its caller appends to, handed back in that order
    where the triple stands. An append to a run costs less than a call of
    :meth:`add` (the writes of a burst share their expiry)."""

    __slots__ = ("_buckets", "_current", "_cursor", "_numbers", "_order", "_origins", "_runs",
                 "_runs_made", "_seconds", "_tick")  # fmt: skip

    def __init__(self) -> None:
        self._origins: list[str] = []  # origin number -> origin
        self._numbers: dict[str, int] = {}
        self._buckets: dict[int, array[int]] = {}  # second -> its (time, number, seq) triples
        self._seconds: list[int] = []  # the seconds of the buckets, a heap
        self._tick = -1  # the current second (whose bucket is _current)
        self._current: array[int] = array("Q")
        self._order: array[int] = array("q")  # triples of _current, by time
        self._cursor = 0  # how many of _order were handed back
        self._runs: dict[int, tuple[str, array[int]]] = {}  # run number -> origin, seqs
        self._runs_made = 0

    def add(self, entry_id: EntryId, at: int) -> int:
        """Keep ``entry_id`` until ``at`` (ms since the epoch, >= 0); returns
        when to look next for it (``at``, or its second's start)."""
        number = self._numbers.get(entry_id.origin)
        if number is None:
            number = self._numbers[entry_id.origin] = len(self._origins)
            self._origins.append(entry_id.origin)
        return self._put(at, number, entry_id.seq)

    def add_run(self, origin: str, at: int) -> tuple[array[int], int]:
        """Keep the ids of ``origin`` whose seqs the caller appends to the
        array returned until ``at``, as if each were added with :meth:`add`
        then (in the order appended), at the place the run was added in;
        and when to look next for them. The caller stops appending once it
        has added anything else (later ids would come out of order among
        ties) or once any of them came back (later ones would be lost)."""
        self._runs_made += 1
        run = array("Q")
        self._runs[self._runs_made] = (origin, run)
        return run, self._put(at, self._runs_made, 0)

    def _put(self, at: int, number: int, seq: int) -> int:
        second = at // TICK_MS
        if second <= self._tick:
            current = self._current
            position = len(current) // 3
            current.extend((at, number, seq))
            insort(self._order, position, self._cursor, key=self._time_at)
            return at
        bucket = self._buckets.get(second)
        if bucket is None:
            bucket = self._buckets[second] = array("Q")
            heapq.heappush(self._seconds, second)
        bucket.extend((at, number, seq))
        return second * TICK_MS

    def next_time(self) -> int | None:
        """When to look next (ms since the epoch); ``None``: nothing is kept."""
        if self._cursor < len(self._order):
            return self._time_at(self._order[self._cursor])
        return self._seconds[0] * TICK_MS if self._seconds else None

    def pop_due(self, now: int) -> list[EntryId]:
        """The ids whose time is ``now`` or before, in time order, forgotten here."""
        due: list[EntryId] = []
        while True:
            current, order, origins = self._current, self._order, self._origins
            cursor = self._cursor
            while cursor < len(order):
                at = 3 * order[cursor]
                if current[at] > now:
                    self._cursor = cursor
                    return due  # a time of this second to come: none later is due
                seq = current[at + 2]
                if seq:
                    due.append(EntryId(origins[current[at + 1]], seq))
                else:  # a run: its ids, in the order appended
                    origin, run = self._runs.pop(current[at + 1])
                    due.extend([EntryId(origin, seq) for seq in run])
                cursor += 1
            self._cursor = cursor
            if not self._seconds or self._seconds[0] * TICK_MS > now:
                if cursor:  # read out: let it go
                    self._current, self._order, self._cursor = array("Q"), array("q"), 0
                return due
            self._next_second()

    def _next_second(self) -> None:
        """The earliest bucket becomes the current one, sorted by time (stable:
        ties stay in the order added)."""
        self._tick = heapq.heappop(self._seconds)
        self._current = bucket = self._buckets.pop(self._tick)
        self._order = array("q", sorted(range(len(bucket) // 3), key=self._time_at))
        self._cursor = 0

    def _time_at(self, position: int) -> int:
        return self._current[3 * position]


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
        self._due = Timetable()
        self._expiries = Timetable()
        # The time each timer is for (ms; also while unarmed), None: no timer.
        self._due_at: int | None = None
        self._expiry_at: int | None = None
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
        look = self._due.add(item.id, due)
        if self._due_at is None or look < self._due_at:  # sooner than the timer is for
            self._arm_due(look)

    def drop(self, entry_id: EntryId) -> Tuple | None:
        """Forget a tuple not due yet (taken elsewhere, or expired); it, or
        ``None`` if it is not here. Its time stays in the timetable, skipped
        when it comes."""
        removed = self._waiting.remove_id(entry_id)
        return None if removed is None else removed[1]

    def take_out(self, prefix: bytes) -> Tuple | None:
        """The oldest tuple not due yet that matches ``prefix``, forgotten as
        :meth:`drop` does (a withdraw takes it); ``None`` if none."""
        found = self._waiting.oldest(prefix)
        return None if found is None else self._waiting.remove(found[0])

    def expire_at(self, entry_id: EntryId, expires: int) -> None:
        """Call ``on_expiry`` with ``entry_id`` at ``expires`` (ms since the epoch)."""
        look = self._expiries.add(entry_id, expires)
        if self._expiry_at is None or look < self._expiry_at:  # sooner than the timer is for
            self._arm_expiries(look)

    def expire_run(self, origin: str, expires: int) -> array[int]:
        """:meth:`expire_at` for ids of ``origin``: the caller appends their
        seqs to the array returned, one by one, each as it would have called
        ``expire_at`` (``Timetable.add_run``: until it calls ``expire_at``,
        or ``on_expiry`` is called)."""
        run, look = self._expiries.add_run(origin, expires)
        if self._expiry_at is None or look < self._expiry_at:  # sooner than the timer is for
            self._arm_expiries(look)
        return run

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
        self._arm_due(self._due.next_time())
        self._arm_expiries(self._expiries.next_time())

    def close(self) -> None:
        for timer in (self._due_timer, self._expiry_timer):
            if timer is not None:
                timer.cancel()
        self._due_timer = self._expiry_timer = None
        self._due_at = self._expiry_at = None

    # -- the timers ------------------------------------------------------------

    def _arm_due(self, at: int | None) -> None:
        self._due_timer = self._arm(self._due_timer, at, self._fire_due)
        self._due_at = at

    def _arm_expiries(self, at: int | None) -> None:
        self._expiry_timer = self._arm(self._expiry_timer, at, self._fire_expiries)
        self._expiry_at = at

    def _arm(
        self, timer: asyncio.TimerHandle | None, at: int | None, fire: Callable[[], None]
    ) -> asyncio.TimerHandle | None:
        """A timer for ``at`` (none for ``None``) in place of ``timer``."""
        if timer is not None:
            timer.cancel()
        if at is None:
            return None
        wait = min(max(0.0, at / 1000 - self._clock()), _LONGEST_WAIT)
        try:
            return asyncio.get_running_loop().call_later(wait, fire)
        except RuntimeError:  # no loop yet: armed by arm()
            self.unarmed = True
            return None

    def _fire_due(self) -> None:
        due: list[Tuple] = []
        for entry_id in self._due.pop_due(self.now_ms()):
            removed = self._waiting.remove_id(entry_id)
            if removed is not None:  # else dropped meanwhile
                due.append(removed[1])
        self._arm_due(self._due.next_time())
        if due:
            self._on_due(due)

    def _fire_expiries(self) -> None:
        expired = self._expiries.pop_due(self.now_ms())
        self._arm_expiries(self._expiries.next_time())
        if expired:
            self._on_expiry(expired)
