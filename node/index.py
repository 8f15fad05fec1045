"""The live index: one node's live tuples, found by byte prefix, oldest first.

Every live tuple gets an *arrival* number (local order, increasing). It is
held as one bytes object, its *key*, and no other object of its own::

    escaped payload | 00 00 | arrival (8) | seq (8) | origin number (4)

(integers big-endian; the origin's name is kept once, in a table). Escaping
writes each 00 byte of the payload as 00 FF, so the terminator 00 00 cannot
occur inside the escaped payload: a key starts with the escaped form of a
prefix exactly when its payload starts with that prefix (a shorter payload
would have to match across its terminator, and 00 00 is not the start of any
escaped byte). Three structures refer to the keys:

* ``_sorted``: the keys in a sorted list, so the tuples matching a prefix are
  one contiguous range, found by bisection;
* ``_by_arrival``: arrival -> key, to find a tuple named by its arrival;
* ``_lanes``: per origin, seq -> key, to find a tuple named by its id.

The two maps are :class:`_IntMap`: arrays of int keys beside lists of values,
in blocks, so a tuple costs two 8-byte slots in each and no int object; the
tuple handed out (:class:`~node.entries.Tuple`) is built from the key on the
way out. A ``forum serve`` grows by some 120 bytes of RSS per live tuple
beyond its payload (``bench/memory_bench.py``), against some 365 when a
tuple was an object, an id, a pair and two dict entries. The price: a
payload's 00 bytes take two bytes each here.

Finding the oldest match of a prefix then depends on how many tuples match.
A small range (``SCAN_LIMIT`` or fewer) is scanned for its least arrival. A
large one is served from a *prefix queue*: the arrivals matching that prefix
in order, kept up to date on every add, built once by one pass over the range
the first time the prefix is asked for. Queues drop dead arrivals lazily (at
the front when they are asked, or rebuilt from the range when dead ones pile
up) and the least recently used are evicted past ``MAX_QUEUES``. So
``take``/``read`` never look at a tuple that does not match, whatever the
pattern.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence

from sortedcontainers import SortedList

from node.entries import PLAIN, EntryId, Tuple

#: Ranges up to this many tuples are scanned rather than queued.
SCAN_LIMIT = 32
#: How many prefix queues are kept (least recently used evicted).
MAX_QUEUES = 64
#: Entries per block of an :class:`_IntMap` (a block splits at twice this).
_BLOCK = 1024

#: What follows the escaped payload in a key: the terminator (two pad bytes,
#: which ``struct`` writes as zeros), the arrival, the seq, the origin number.
_TAIL = struct.Struct(">2xQQI")
#: The arrival alone, ``_ARRIVAL_BACK`` bytes before the key's end.
_ARRIVAL = struct.Struct(">Q")
_ARRIVAL_BACK = _TAIL.size - 2
_ZERO, _ESCAPED_ZERO = b"\x00", b"\x00\xff"


def prefix_end(prefix: bytes) -> bytes | None:
    """The least byte string greater than every string starting with
    ``prefix``, or ``None`` when there is none (empty or all 0xff)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _escape(payload: bytes) -> bytes:
    # bytes.replace returns the object itself when there is nothing to replace.
    return payload.replace(_ZERO, _ESCAPED_ZERO)


# Tuples are rebuilt from their keys on every take and read. Their ids were
# checked on the way in, so they are made here without the dataclasses'
# __init__ and __post_init__ (a third of the cost): the slots are set through
# their descriptors, which a frozen dataclass does not guard.
_new = object.__new__
_set_origin = EntryId.__dict__["origin"].__set__
_set_seq = EntryId.__dict__["seq"].__set__
_set_id = Tuple.__dict__["id"].__set__
_set_payload = Tuple.__dict__["payload"].__set__
_set_props = Tuple.__dict__["props"].__set__


def _known_tuple(origin: str, seq: int, payload: bytes) -> Tuple:
    entry_id = _new(EntryId)
    _set_origin(entry_id, origin)
    _set_seq(entry_id, seq)
    item = _new(Tuple)
    _set_id(item, entry_id)
    _set_payload(item, payload)
    _set_props(item, PLAIN)
    return item


def _payload(key: bytes) -> bytes:
    return key[: -_TAIL.size].replace(_ESCAPED_ZERO, _ZERO)


def _arrival(key: bytes) -> int:
    arrival: int = _ARRIVAL.unpack_from(key, len(key) - _ARRIVAL_BACK)[0]
    return arrival


class _IntMap:
    """A map from int keys to bytes, sorted by key, in blocks of at most
    ``2 * _BLOCK``: one array of keys and one list of values each. Keys come
    mostly in increasing order (arrivals, an origin's seqs), so appending to
    the last block is the fast path; any other insert or a delete moves at
    most one block's slots."""

    __slots__ = ("_blocks", "_lasts", "_len", "_typecode", "_values")

    def __init__(self, typecode: str) -> None:
        self._typecode = typecode  # "q" for arrivals, "Q" for seqs (up to 2**64 - 1)
        self._blocks: list[array[int]] = []
        self._values: list[list[bytes]] = []
        self._lasts: list[int] = []  # the last key of each block
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        for block in self._blocks:
            yield from block

    def load(self, keys: Sequence[int], values: Sequence[bytes]) -> None:
        """Fill an empty map with ``keys`` (ascending, distinct) and their values."""
        if self._len:
            raise RuntimeError("load needs an empty map")
        for start in range(0, len(keys), _BLOCK):
            block = array(self._typecode, keys[start : start + _BLOCK])
            self._blocks.append(block)
            self._values.append(list(values[start : start + _BLOCK]))
            self._lasts.append(block[-1])
        self._len = len(keys)

    def _find(self, key: int) -> tuple[int, int] | None:
        """(block, slot) of ``key``, if it is here."""
        b = bisect_left(self._lasts, key)
        if b == len(self._lasts):
            return None
        block = self._blocks[b]
        i = bisect_left(block, key)
        return (b, i) if block[i] == key else None

    def get(self, key: int) -> bytes | None:
        b = bisect_left(self._lasts, key)
        if b == len(self._lasts):
            return None
        block = self._blocks[b]
        i = bisect_left(block, key)
        return self._values[b][i] if block[i] == key else None

    def put(self, key: int, value: bytes) -> None:
        """Add ``key`` (``KeyError`` if it is here already: nothing changes)."""
        lasts = self._lasts
        if not lasts or key > lasts[-1]:
            if lasts and len(self._blocks[-1]) < _BLOCK:
                self._blocks[-1].append(key)
                self._values[-1].append(value)
                lasts[-1] = key
            else:
                self._blocks.append(array(self._typecode, (key,)))
                self._values.append([value])
                lasts.append(key)
            self._len += 1
            return
        b = bisect_left(lasts, key)
        block, values = self._blocks[b], self._values[b]
        i = bisect_left(block, key)
        if block[i] == key:
            raise KeyError(key)
        block.insert(i, key)
        values.insert(i, value)
        self._len += 1
        if len(block) > 2 * _BLOCK:
            self._blocks.insert(b + 1, block[_BLOCK:])
            self._values.insert(b + 1, values[_BLOCK:])
            lasts.insert(b, block[_BLOCK - 1])
            del block[_BLOCK:], values[_BLOCK:]

    def pop(self, key: int) -> bytes | None:
        """Remove ``key``; its value, or ``None`` if it was not here."""
        found = self._find(key)
        if found is None:
            return None
        b, i = found
        block, values = self._blocks[b], self._values[b]
        value = values.pop(i)
        del block[i]
        self._len -= 1
        if not block:
            del self._blocks[b], self._values[b], self._lasts[b]
            return value
        self._lasts[b] = block[-1]
        # Deletes spread over the map would leave many near-empty blocks: keep
        # every two neighbours fuller than one block (and so blocks half full).
        if b and len(self._blocks[b - 1]) + len(block) <= _BLOCK:
            self._merge(b - 1)
        elif b + 1 < len(self._blocks) and len(block) + len(self._blocks[b + 1]) <= _BLOCK:
            self._merge(b)
        return value

    def _merge(self, b: int) -> None:
        """Block ``b + 1`` joins block ``b``."""
        self._blocks[b].extend(self._blocks[b + 1])
        self._values[b].extend(self._values[b + 1])
        self._lasts[b] = self._lasts[b + 1]
        del self._blocks[b + 1], self._values[b + 1], self._lasts[b + 1]


class _Queue:
    """The arrivals of the tuples matching one prefix, oldest first (some
    dead): an array whose front moves forward, so popping it is O(1)."""

    __slots__ = ("_arrivals", "_head")

    def __init__(self, arrivals: Iterable[int]) -> None:
        self._arrivals = array("q", arrivals)
        self._head = 0

    def __len__(self) -> int:
        return len(self._arrivals) - self._head

    def __iter__(self) -> Iterator[int]:
        arrivals = self._arrivals
        return (arrivals[i] for i in range(self._head, len(arrivals)))

    def first(self) -> int | None:
        return self._arrivals[self._head] if self._head < len(self._arrivals) else None

    def pop_first(self) -> None:
        self._head += 1
        if self._head > 1024 and 2 * self._head > len(self._arrivals):
            del self._arrivals[: self._head]
            self._head = 0

    def append(self, arrival: int) -> None:
        self._arrivals.append(arrival)

    def insert(self, arrival: int) -> None:
        """Put ``arrival`` in its place, unless it is there (still, though dead)."""
        arrivals = self._arrivals
        i = bisect_left(arrivals, arrival, self._head)
        if i == len(arrivals) or arrivals[i] != arrival:
            arrivals.insert(i, arrival)


class LiveIndex:
    """The set of live tuples. Synchronous: callers are on one event loop."""

    def __init__(self) -> None:
        self._next_arrival = 1
        self._sorted = SortedList()
        self._by_arrival = _IntMap("q")
        # origin number -> seq -> key; the numbers index _origins.
        self._lanes: list[_IntMap] = []
        self._origins: list[str] = []
        self._origin_numbers: dict[str, int] = {}
        # prefix -> arrivals of the tuples matching it, oldest first (some dead)
        self._queues: OrderedDict[bytes, _Queue] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_arrival)

    def __contains__(self, entry_id: EntryId) -> bool:
        number = self._origin_numbers.get(entry_id.origin)
        return number is not None and self._lanes[number].get(entry_id.seq) is not None

    def ids(self) -> list[EntryId]:
        """The ids of every live tuple (a copy: safe to iterate across awaits)."""
        return [
            EntryId(origin, seq)
            for origin, lane in zip(self._origins, self._lanes, strict=True)
            for seq in lane
        ]

    # -- changing the set ------------------------------------------------------

    def add(self, item: Tuple) -> int:
        """Make ``item`` live as the newest tuple; returns its arrival."""
        arrival = self._next_arrival
        self._insert(arrival, item)
        self._next_arrival += 1
        for prefix, queue in self._queues.items():
            if item.payload.startswith(prefix):
                queue.append(arrival)
        return arrival

    def bulk_load(self, items: list[Tuple]) -> None:
        """Add many tuples at once, oldest first, into an empty index (replay)."""
        if self._by_arrival:
            raise RuntimeError("bulk_load needs an empty index")
        first = self._next_arrival
        for origin in {item.id.origin for item in items}:
            self._number(origin)
        numbers, pack = self._origin_numbers, _TAIL.pack
        keys = [  # _key, inlined: a replay makes a key per live tuple
            item.payload.replace(_ZERO, _ESCAPED_ZERO)
            + pack(arrival, item.id.seq, numbers[item.id.origin])
            for arrival, item in enumerate(items, first)
        ]
        self._by_arrival.load(range(first, first + len(items)), keys)
        lanes: dict[int, tuple[list[int], list[bytes]]] = {}
        for item, key in zip(items, keys, strict=True):
            seqs, lane_keys = lanes.setdefault(numbers[item.id.origin], ([], []))
            seqs.append(item.id.seq)
            lane_keys.append(key)
        for number, (seqs, lane_keys) in lanes.items():
            if seqs == sorted(seqs):
                self._lanes[number].load(seqs, lane_keys)
            else:  # a peer's seqs may have come out of order
                order = sorted(range(len(seqs)), key=seqs.__getitem__)
                self._lanes[number].load([seqs[i] for i in order], [lane_keys[i] for i in order])
        self._sorted = SortedList(keys)
        self._next_arrival = first + len(items)

    def restore(self, arrival: int, item: Tuple) -> None:
        """Put back a tuple removed by a take that did not happen, in its old place."""
        self._insert(arrival, item)
        for prefix, queue in self._queues.items():
            if item.payload.startswith(prefix):
                queue.insert(arrival)

    def remove(self, arrival: int) -> Tuple:
        key = self._by_arrival.pop(arrival)
        if key is None:
            raise KeyError(arrival)
        _, seq, number = _TAIL.unpack_from(key, len(key) - _TAIL.size)
        self._lanes[number].pop(seq)
        self._sorted.remove(key)
        return _known_tuple(self._origins[number], seq, _payload(key))

    def remove_id(self, entry_id: EntryId) -> tuple[int, Tuple] | None:
        number = self._origin_numbers.get(entry_id.origin)
        key = None if number is None else self._lanes[number].pop(entry_id.seq)
        if key is None:
            return None
        arrival = _arrival(key)
        self._by_arrival.pop(arrival)
        self._sorted.remove(key)
        return arrival, _known_tuple(entry_id.origin, entry_id.seq, _payload(key))

    def _insert(self, arrival: int, item: Tuple) -> None:
        key = self._key(arrival, item)
        # The maps refuse an id or an arrival that is live already (KeyError):
        # the set is left as it was.
        lane = self._lanes[self._origin_numbers[item.id.origin]]
        lane.put(item.id.seq, key)
        try:
            self._by_arrival.put(arrival, key)
        except KeyError:
            lane.pop(item.id.seq)
            raise
        self._sorted.add(key)

    def _key(self, arrival: int, item: Tuple) -> bytes:
        number = self._number(item.id.origin)
        return _escape(item.payload) + _TAIL.pack(arrival, item.id.seq, number)

    def _number(self, origin: str) -> int:
        """The origin's number (given on first sight, with its lane)."""
        number = self._origin_numbers.get(origin)
        if number is None:
            number = self._origin_numbers[origin] = len(self._origins)
            self._origins.append(origin)
            self._lanes.append(_IntMap("Q"))
        return number

    def _tuple(self, key: bytes) -> tuple[int, Tuple]:
        """The arrival and the tuple that ``key`` holds."""
        arrival, seq, number = _TAIL.unpack_from(key, len(key) - _TAIL.size)
        return arrival, _known_tuple(self._origins[number], seq, _payload(key))

    # -- finding ---------------------------------------------------------------

    def oldest(self, prefix: bytes) -> tuple[int, Tuple] | None:
        """The oldest live tuple whose payload starts with ``prefix``."""
        if not self._by_arrival:
            return None
        lo, hi = self._range(prefix)
        if lo >= hi:
            return None
        if hi - lo <= SCAN_LIMIT:
            return self._tuple(min(self._sorted.islice(lo, hi), key=_arrival))
        queue = self._queue(prefix, lo, hi)
        by_arrival = self._by_arrival
        while (arrival := queue.first()) is not None:
            key = by_arrival.get(arrival)
            if key is not None:
                return self._tuple(key)
            queue.pop_first()
        return None

    def count(self, prefix: bytes) -> int:
        lo, hi = self._range(prefix)
        return max(0, hi - lo)

    def iter_matching(self, prefix: bytes, after: int = 0) -> Iterator[tuple[int, Tuple]]:
        """Live matches with arrival > ``after``, oldest first (for paged listing)."""
        lo, hi = self._range(prefix)
        if hi - lo <= SCAN_LIMIT:
            arrivals = sorted(map(_arrival, self._sorted.islice(lo, hi)))
        else:
            arrivals = list(self._queue(prefix, lo, hi))
        start = bisect_left(arrivals, after + 1)
        for arrival in arrivals[start:]:
            key = self._by_arrival.get(arrival)
            if key is not None:
                yield self._tuple(key)

    def _range(self, prefix: bytes) -> tuple[int, int]:
        """Index range in ``_sorted`` of the keys whose payload has ``prefix``."""
        if not prefix:
            return 0, len(self._sorted)
        escaped = _escape(prefix)
        lo = self._sorted.bisect_left(escaped)
        end = prefix_end(escaped)
        hi = len(self._sorted) if end is None else self._sorted.bisect_left(end)
        return lo, hi

    def _queue(self, prefix: bytes, lo: int, hi: int) -> _Queue:
        queue = self._queues.get(prefix)
        if queue is not None:
            self._queues.move_to_end(prefix)
            # Dead arrivals past the front pile up when tuples leave through
            # other prefixes; rebuild once they outnumber the live ones.
            if len(queue) <= 2 * (hi - lo) + 1024:
                return queue
        queue = _Queue(sorted(map(_arrival, self._sorted.islice(lo, hi))))
        self._queues[prefix] = queue
        if len(self._queues) > MAX_QUEUES:
            self._queues.popitem(last=False)
        return queue
