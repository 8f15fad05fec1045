"""The live index: one node's live tuples, found by byte prefix, oldest first.

Every live tuple gets an *arrival* number (local order, increasing). Three
structures hold it:

* ``_by_arrival``: arrival -> tuple, the live set itself;
* ``_arrival_of``: entry id -> arrival, to kill a tuple named by a Take;
* ``_sorted``: ``(payload, arrival)`` pairs in a sorted list, so the tuples
  matching a prefix are one contiguous range, found by bisection.

Finding the oldest match of a prefix then depends on how many tuples match.
A small range (``SCAN_LIMIT`` or fewer) is scanned for its least arrival. A
large one is served from a *prefix queue*: the arrivals matching that prefix
in order, kept up to date on every add, built once by one pass over the range
the first time the prefix is asked for. Queues drop dead arrivals lazily (at
the front when they are asked, or in a sweep when dead ones pile up) and the
least recently used are evicted past ``MAX_QUEUES``. So ``take``/``read``
never look at a tuple that does not match, whatever the pattern.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Iterator

from sortedcontainers import SortedList

from node.entries import EntryId, Tuple

#: Ranges up to this many tuples are scanned rather than queued.
SCAN_LIMIT = 32
#: How many prefix queues are kept (least recently used evicted).
MAX_QUEUES = 64


def prefix_end(prefix: bytes) -> bytes | None:
    """The least byte string greater than every string starting with
    ``prefix``, or ``None`` when there is none (empty or all 0xff)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class LiveIndex:
    """The set of live tuples. Synchronous: callers are on one event loop."""

    def __init__(self) -> None:
        self._next_arrival = 1
        self._by_arrival: dict[int, Tuple] = {}
        self._arrival_of: dict[EntryId, int] = {}
        self._sorted = SortedList()
        # prefix -> arrivals of the tuples matching it, oldest first (some dead)
        self._queues: OrderedDict[bytes, deque[int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_arrival)

    def __contains__(self, entry_id: EntryId) -> bool:
        return entry_id in self._arrival_of

    def ids(self) -> list[EntryId]:
        """The ids of every live tuple (a copy: safe to iterate across awaits)."""
        return list(self._arrival_of)

    # -- changing the set ------------------------------------------------------

    def add(self, item: Tuple) -> int:
        """Make ``item`` live as the newest tuple; returns its arrival."""
        arrival = self._next_arrival
        self._next_arrival += 1
        self._insert(arrival, item)
        for prefix, arrivals in self._queues.items():
            if item.payload.startswith(prefix):
                arrivals.append(arrival)
        return arrival

    def bulk_load(self, items: list[Tuple]) -> None:
        """Add many tuples at once, oldest first, into an empty index (replay)."""
        if self._by_arrival:
            raise RuntimeError("bulk_load needs an empty index")
        first = self._next_arrival
        self._by_arrival = dict(enumerate(items, first))
        self._arrival_of = {item.id: arrival for arrival, item in self._by_arrival.items()}
        self._sorted = SortedList(
            (item.payload, arrival) for arrival, item in self._by_arrival.items()
        )
        self._next_arrival = first + len(items)

    def restore(self, arrival: int, item: Tuple) -> None:
        """Put back a tuple removed by a take that did not happen, in its old place."""
        self._insert(arrival, item)
        for prefix, arrivals in self._queues.items():
            if item.payload.startswith(prefix):
                i = bisect_left(arrivals, arrival)
                if i == len(arrivals) or arrivals[i] != arrival:
                    arrivals.insert(i, arrival)

    def remove(self, arrival: int) -> Tuple:
        item = self._by_arrival.pop(arrival)
        del self._arrival_of[item.id]
        self._sorted.remove((item.payload, arrival))
        return item

    def remove_id(self, entry_id: EntryId) -> tuple[int, Tuple] | None:
        arrival = self._arrival_of.get(entry_id)
        if arrival is None:
            return None
        return arrival, self.remove(arrival)

    def _insert(self, arrival: int, item: Tuple) -> None:
        self._by_arrival[arrival] = item
        self._arrival_of[item.id] = arrival
        self._sorted.add((item.payload, arrival))

    # -- finding ---------------------------------------------------------------

    def oldest(self, prefix: bytes) -> tuple[int, Tuple] | None:
        """The oldest live tuple whose payload starts with ``prefix``."""
        if not self._by_arrival:
            return None
        lo, hi = self._range(prefix)
        if lo >= hi:
            return None
        if hi - lo <= SCAN_LIMIT:
            arrival = min(pair[1] for pair in self._sorted.islice(lo, hi))
            return arrival, self._by_arrival[arrival]
        arrivals = self._queue(prefix, lo, hi)
        by_arrival = self._by_arrival
        while arrivals:
            item = by_arrival.get(arrivals[0])
            if item is not None:
                return arrivals[0], item
            arrivals.popleft()
        return None

    def count(self, prefix: bytes) -> int:
        lo, hi = self._range(prefix)
        return max(0, hi - lo)

    def iter_matching(self, prefix: bytes, after: int = 0) -> Iterator[tuple[int, Tuple]]:
        """Live matches with arrival > ``after``, oldest first (for paged listing)."""
        lo, hi = self._range(prefix)
        if hi - lo <= SCAN_LIMIT:
            arrivals = sorted(pair[1] for pair in self._sorted.islice(lo, hi))
        else:
            arrivals = list(self._queue(prefix, lo, hi))
        start = bisect_left(arrivals, after + 1)
        for arrival in arrivals[start:]:
            item = self._by_arrival.get(arrival)
            if item is not None:
                yield arrival, item

    def _range(self, prefix: bytes) -> tuple[int, int]:
        """Index range in ``_sorted`` of the pairs whose payload has ``prefix``."""
        if not prefix:
            return 0, len(self._sorted)
        lo = self._sorted.bisect_left((prefix,))
        end = prefix_end(prefix)
        hi = len(self._sorted) if end is None else self._sorted.bisect_left((end,))
        return lo, hi

    def _queue(self, prefix: bytes, lo: int, hi: int) -> deque[int]:
        queue = self._queues.get(prefix)
        if queue is None:
            queue = deque(sorted(pair[1] for pair in self._sorted.islice(lo, hi)))
            self._queues[prefix] = queue
            if len(self._queues) > MAX_QUEUES:
                self._queues.popitem(last=False)
        else:
            self._queues.move_to_end(prefix)
            # Dead arrivals past the front pile up when tuples leave through
            # other prefixes; sweep once they outnumber the live ones.
            if len(queue) > 2 * (hi - lo) + 1024:
                by_arrival = self._by_arrival
                queue = deque(a for a in queue if a in by_arrival)
                self._queues[prefix] = queue
        return queue
