"""The live index: one node's live tuples, found by byte prefix, highest
priority first, oldest first within one priority.

Every live tuple gets an *arrival* number (local order, increasing). It is
held as one bytes object, its *key*, and no other object of its own::

    escaped payload | 00 00 | arrival (8) | seq (8) | origin number (3) | priority (1)

(integers big-endian; the origin's name is kept once, in a table; the
priority, -128 to 127, is one signed byte, two's complement). Escaping
writes each 00 byte of the payload as 00 FF, so the terminator 00 00 cannot
occur inside the escaped payload: a key starts with the escaped form of a
prefix exactly when its payload starts with that prefix (a shorter payload
would have to match across its terminator, and 00 00 is not the start of any
escaped byte). Three structures refer to the keys:

* ``_sorted``: every key, of every priority, in one sorted list, so the
  tuples matching a prefix are one contiguous range, found by one range
  lookup (two bisections) however many priorities there are;
* ``_by_arrival``: arrival -> key, to find a tuple named by its arrival;
* ``_lanes``: per origin, seq -> key, to find a tuple named by its id.

A key names its priority by its last byte, so nothing else keeps it. The two
maps are :class:`_IntMap`: arrays of int keys beside lists of values, in
blocks, so a tuple costs two 8-byte slots in each and no int object; the
tuple handed out (:class:`~forum.node.core.entries.Tuple`) is built from the key on the
way out, with ``props`` that hold its priority alone (the index keeps a
tuple's priority only; the Forum gives a tuple with more properties its
Write's properties back on the way out). The origin number and the
priority share four bytes (origins are numbered up to 2**24 per process): a
``forum serve`` grows by some 120 bytes of RSS per live tuple beyond its
payload (``bench/memory_bench.py``), where an object per tuple, with its id,
a pair and two dict entries, would cost some 365. The price: a payload's 00
bytes take two bytes each here.

``oldest`` (a take's or a read's answer: the highest priority's oldest
match) finds the prefix's range once, then depends on how many tuples match,
not on how many priorities there are. A small range (``SCAN_LIMIT`` or
fewer) is scanned once for its best key: the highest priority, from the
key's last byte, then the least arrival; an exact payload (one match) costs
the range lookup and nothing more. A large range is served from its *prefix
queue*, split by priority class: per class present among the prefix's
tuples, their arrivals in order (:class:`_Queue`), the classes kept highest
first (:class:`_PrefixQueue`). It is built the first time the prefix is
asked for, by one pass over the range that buckets the arrivals by the
priority byte (no bucketing while the index holds one priority only, as it
counts per byte: the range is then one class, its arrivals sorted), and
kept up to date on every add (the arrival appended to its
class's queue, made when the prefix has none of that class). With many
classes the build sorts them all, so a prefix's first take costs about twice
what it costs with one (a take after it, nothing per class). A take answers
from the highest class with a live front: a class whose queue runs out
leaves the prefix queue (to come back with its next match), so a take never
looks at a class below the one it serves from, and costs, besides the range
lookup, a dict lookup and the front of one array, with any number of
classes. Queues drop dead arrivals lazily (at the front when they are asked,
or the prefix queue is rebuilt from the range when its arrivals, over all
its classes, pass twice the live matches plus 1024) and the least recently
used prefix queues are evicted past ``MAX_QUEUES``. An arrival counts in a
class's queue only while its key's last byte names that class: a tuple put
back (``restore``) with another priority than it had is put in its new
class's queue, and is dead in its old one's. So ``take``/``read`` never look
at a tuple that does not match, nor at a class below the answer, whatever
the pattern.

``count`` is one range lookup. ``first_arrivals`` (the Prefixes panel's
oldest tuple per group) answers from a prefix queue takes keep, a
small range's scan, or its last answer while that tuple lives and nothing
was put back; else it scans the range, within a budget of keys per call.

``iter_matching`` (the Forum's paged listing, by arrival cursor) yields
the matches in arrival order whatever their priority, not in the order
takes would serve them: a small range's keys sorted by arrival; a large
range's class queues merged, each read from the cursor on (a bisection) a
chunk at a time, so a page costs a bisection per class and its own length,
where sorting the range by arrival would cost the whole range per page.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right, insort
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from heapq import merge
from operator import itemgetter

from sortedcontainers import SortedList

from forum.node.core.entries import MAX_PRIORITY, MIN_PRIORITY, PLAIN, EntryId, Properties, Tuple

#: Ranges up to this many tuples are scanned rather than queued.
SCAN_LIMIT = 32
#: How many prefix queues are kept (least recently used evicted).
MAX_QUEUES = 64
#: Entries per block of an :class:`_IntMap` (a block splits at twice this).
#: Small, because a delete moves the rest of its block: takes of the highest
#: priority hop over the other classes' arrivals, each into another block,
#: mostly cold: at 1M tuples over 10 classes, 1024 took such a remove's p99
#: to 12.4 us, 256 to 10.5 (8.0, from 10.1, when one class is taken in order).
_BLOCK = 256
#: Arrivals a listing reads from a queue at a time.
_CHUNK = 256
#: The most prefixes whose first match ``first_arrivals`` remembers.
_FIRSTS = 1024

#: What follows the escaped payload in a key: the terminator (two pad bytes,
#: which ``struct`` writes as zeros), the arrival, the seq, and the origin
#: number with the priority's byte below it (``number << 8 | byte``).
_TAIL = struct.Struct(">2xQQI")
#: Origins are numbered in the three bytes above the priority's.
_MAX_ORIGINS = 1 << 24
#: The arrival alone, ``_ARRIVAL_BACK`` bytes before the key's end.
_ARRIVAL = struct.Struct(">Q")
_ARRIVAL_BACK = _TAIL.size - 2
#: A key's last byte: its priority's.
_LAST_BYTE = itemgetter(-1)
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


def _class_byte(priority: int) -> int:
    """The byte that names ``priority``'s class in a key (two's complement)."""
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must be {MIN_PRIORITY} to {MAX_PRIORITY}, not {priority!r}")
    return priority & 0xFF


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


def _known_tuple(origin: str, seq: int, payload: bytes, byte: int) -> Tuple:
    """The tuple of a key: its id, payload, and the priority its class ``byte`` names."""
    entry_id = _new(EntryId)
    _set_origin(entry_id, origin)
    _set_seq(entry_id, seq)
    item = _new(Tuple)
    _set_id(item, entry_id)
    _set_payload(item, payload)
    _set_props(item, _PRIORITY_OF_BYTE[byte])
    return item


#: Per class byte, the properties of a tuple with that priority and no other:
#: made once each, so a tuple handed out costs no properties object.
_PRIORITY_OF_BYTE = [
    PLAIN if byte == 0 else Properties(priority=byte - 256 if byte > MAX_PRIORITY else byte)
    for byte in range(256)
]


def _payload(key: bytes) -> bytes:
    return key[: -_TAIL.size].replace(_ESCAPED_ZERO, _ZERO)


def _arrival(key: bytes) -> int:
    arrival: int = _ARRIVAL.unpack_from(key, len(key) - _ARRIVAL_BACK)[0]
    return arrival


def _precedence(byte: int) -> int:
    """127 minus the priority that ``byte`` names: the highest priority's
    byte gives 0, -128's gives 255 (the byte's low seven bits flipped)."""
    return byte ^ 0x7F


def _rank(key: bytes) -> int:
    """Least for the key a take serves first: the highest priority, then the
    least arrival (arrivals stay below 2**63)."""
    return (key[-1] ^ 0x7F) << 64 | _arrival(key)


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

    def first(self) -> int | None:
        """The least key, ``None`` when empty."""
        return self._blocks[0][0] if self._blocks else None

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
    """The arrivals of one priority class's tuples matching one prefix,
    oldest first (some dead): an array whose front moves forward, so popping
    it is O(1)."""

    __slots__ = ("_arrivals", "_head", "byte")

    def __init__(self, byte: int, arrivals: Iterable[int]) -> None:
        self.byte = byte  # the last byte of its class's keys
        self._arrivals = array("q", arrivals)
        self._head = 0

    def __len__(self) -> int:
        return len(self._arrivals) - self._head

    def first(self) -> int | None:
        return self._arrivals[self._head] if self._head < len(self._arrivals) else None

    def pop_first(self) -> None:
        self._head += 1
        if self._head > 1024 and 2 * self._head > len(self._arrivals):
            del self._arrivals[: self._head]
            self._head = 0

    def append(self, arrival: int) -> None:
        self._arrivals.append(arrival)

    def insert(self, arrival: int) -> bool:
        """Put ``arrival`` in its place, unless it is there (still, though
        dead); whether it was put."""
        arrivals = self._arrivals
        i = bisect_left(arrivals, arrival, self._head)
        if i < len(arrivals) and arrivals[i] == arrival:
            return False
        arrivals.insert(i, arrival)
        return True

    def after(self, arrival: int) -> Iterator[int]:
        """The arrivals past ``arrival``, ascending, read a chunk at a time
        from where the last one ended (found by value: the queue may change
        between two chunks)."""
        while True:
            i = bisect_right(self._arrivals, arrival, self._head)
            chunk = self._arrivals[i : i + _CHUNK]
            if not chunk:
                return
            yield from chunk
            arrival = chunk[-1]


class _PrefixQueue:
    """The arrivals of the tuples matching one prefix, split by priority
    class: a :class:`_Queue` per class present, the classes highest first.
    ``size`` counts their arrivals, live and dead."""

    __slots__ = ("classes", "order", "size")

    def __init__(self, keys: Iterable[bytes], only: int | None) -> None:
        """From the keys of a range; ``only``: the byte of their one class,
        when the index has no other."""
        buckets: dict[int, list[int]]
        if only is not None:  # one class: no bucketing
            buckets = {only: list(map(_arrival, keys))}
        else:
            buckets = {}
            for key in keys:  # one pass, bucketing the arrivals by their class
                byte = key[-1]
                bucket = buckets.get(byte)
                if bucket is None:
                    bucket = buckets[byte] = []
                bucket.append(_arrival(key))
        for arrivals in buckets.values():
            arrivals.sort()
        # the classes present, highest priority first
        self.order = [_Queue(b, buckets[b]) for b in sorted(buckets, key=_precedence)]
        self.classes = {queue.byte: queue for queue in self.order}
        self.size = sum(map(len, self.order))

    def append(self, byte: int, arrival: int) -> None:
        """A new match, the newest of its class ``byte``."""
        queue = self.classes.get(byte)
        if queue is None:
            queue = self._open(byte)
        queue.append(arrival)
        self.size += 1

    def insert(self, byte: int, arrival: int) -> None:
        """A match put back in its place in class ``byte``."""
        queue = self.classes.get(byte)
        if queue is None:
            queue = self._open(byte)
        if queue.insert(arrival):
            self.size += 1

    def _open(self, byte: int) -> _Queue:
        queue = self.classes[byte] = _Queue(byte, ())
        insort(self.order, queue, key=lambda q: _precedence(q.byte))
        return queue

    def best(self, by_arrival: _IntMap) -> bytes | None:
        """The key of the highest class's oldest live match: the fronts of
        its queue that are dead are dropped, and a class run out leaves."""
        order = self.order
        while order:
            queue = order[0]
            byte = queue.byte
            while (arrival := queue.first()) is not None:
                key = by_arrival.get(arrival)
                # An arrival dead here may be live in another class (restored
                # there): it is dead for this class's queue.
                if key is not None and key[-1] == byte:
                    return key
                queue.pop_first()
                self.size -= 1
            del order[0], self.classes[byte]
        return None

    def first_live(self, by_arrival: _IntMap) -> bytes | None:
        """The key of the match that arrived first, of any class: the dead
        fronts of every class are dropped on the way (as :meth:`best` drops
        its class's; a restore puts an arrival back), a class run out leaves."""
        first: bytes | None = None
        for queue in list(self.order):
            byte = queue.byte
            while (arrival := queue.first()) is not None:
                key = by_arrival.get(arrival)
                if key is not None and key[-1] == byte:
                    if first is None or arrival < _arrival(first):
                        first = key
                    break
                queue.pop_first()
                self.size -= 1
            else:
                self.order.remove(queue)
                del self.classes[byte]
        return first

    def after(self, arrival: int) -> Iterator[int]:
        """The arrivals past ``arrival`` of every class, ascending: dead ones
        too, and one restored into another class twice in a row."""
        if len(self.order) == 1:
            return self.order[0].after(arrival)
        return merge(*(queue.after(arrival) for queue in self.order))


class LiveIndex:
    """The set of live tuples. Synchronous: callers are on one event loop."""

    def __init__(self) -> None:
        self._next_arrival = 1
        self._sorted = SortedList()
        # class byte -> how many live keys end with it; how many classes have any
        self._per_class = [0] * 256
        self._classes = 0
        # prefix -> arrivals of the tuples matching it, by class, least recently used first
        self._queues: OrderedDict[bytes, _PrefixQueue] = OrderedDict()
        self._by_arrival = _IntMap("q")
        # origin number -> seq -> key; the numbers index _origins.
        self._lanes: list[_IntMap] = []
        self._origins: list[str] = []
        self._origin_numbers: dict[str, int] = {}
        # Tuples put back in their old places so far (the only way a match can
        # arrive before one already found first: see ``first_arrivals``).
        self._restores = 0
        # prefix -> (arrival of its match found first, self._restores then)
        self._firsts: dict[bytes, tuple[int, int]] = {}

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
        """Make ``item`` live as the newest tuple of its priority (``item.props``);
        returns its arrival."""
        arrival = self._next_arrival
        byte = self._insert(arrival, item)
        self._next_arrival += 1
        payload = item.payload
        for prefix, queue in self._queues.items():
            if payload.startswith(prefix):
                queue.append(byte, arrival)
        return arrival

    def bulk_load(self, items: list[Tuple]) -> None:
        """Add many tuples at once, oldest first, into an empty index (replay)."""
        if self._by_arrival:
            raise RuntimeError("bulk_load needs an empty index")
        for priority in {item.props.priority for item in items}:  # before anything changes
            _class_byte(priority)
        first = self._next_arrival
        for origin in {item.id.origin for item in items}:
            self._number(origin)
        numbers, pack = self._origin_numbers, _TAIL.pack
        keys = [  # _key, inlined: a replay makes a key per live tuple
            item.payload.replace(_ZERO, _ESCAPED_ZERO)
            + pack(arrival, item.id.seq, numbers[item.id.origin] << 8 | item.props.priority & 0xFF)
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
        for byte, n in Counter(map(_LAST_BYTE, keys)).items():
            self._per_class[byte] = n
        self._classes = sum(map(bool, self._per_class))
        self._next_arrival = first + len(items)

    def restore(self, arrival: int, item: Tuple) -> None:
        """Put back a tuple removed by a take that did not happen, in its old
        place: its arrival, with the priority it is given (``item.props``)."""
        byte = self._insert(arrival, item)
        self._restores += 1
        payload = item.payload
        for prefix, queue in self._queues.items():
            if payload.startswith(prefix):
                queue.insert(byte, arrival)

    def remove(self, arrival: int) -> Tuple:
        key = self._by_arrival.pop(arrival)
        if key is None:
            raise KeyError(arrival)
        _, seq, field = _TAIL.unpack_from(key, len(key) - _TAIL.size)
        number = field >> 8
        self._lanes[number].pop(seq)
        self._drop(key)
        return _known_tuple(self._origins[number], seq, _payload(key), key[-1])

    def remove_id(self, entry_id: EntryId) -> tuple[int, Tuple] | None:
        number = self._origin_numbers.get(entry_id.origin)
        key = None if number is None else self._lanes[number].pop(entry_id.seq)
        if key is None:
            return None
        arrival = _arrival(key)
        self._by_arrival.pop(arrival)
        self._drop(key)
        return arrival, _known_tuple(entry_id.origin, entry_id.seq, _payload(key), key[-1])

    def _insert(self, arrival: int, item: Tuple) -> int:
        """Put ``item``'s key in the maps and the sorted list; its class's byte."""
        key = self._key(arrival, item)  # ValueError if the priority is out of range
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
        byte = key[-1]
        self._per_class[byte] += 1
        if self._per_class[byte] == 1:
            self._classes += 1
        return byte

    def _drop(self, key: bytes) -> None:
        """Take ``key`` out of the sorted list (out of the maps already)."""
        self._sorted.remove(key)
        byte = key[-1]
        self._per_class[byte] -= 1
        if not self._per_class[byte]:
            self._classes -= 1

    def _key(self, arrival: int, item: Tuple) -> bytes:
        byte = _class_byte(item.props.priority)  # first: a bad one changes nothing
        number = self._number(item.id.origin)
        return _escape(item.payload) + _TAIL.pack(arrival, item.id.seq, number << 8 | byte)

    def _number(self, origin: str) -> int:
        """The origin's number (given on first sight, with its lane)."""
        number = self._origin_numbers.get(origin)
        if number is None:
            if len(self._origins) == _MAX_ORIGINS:
                raise OverflowError(f"more than {_MAX_ORIGINS} origins in one index")
            number = self._origin_numbers[origin] = len(self._origins)
            self._origins.append(origin)
            self._lanes.append(_IntMap("Q"))
        return number

    def _tuple(self, key: bytes) -> tuple[int, Tuple]:
        """The arrival and the tuple that ``key`` holds."""
        arrival, seq, field = _TAIL.unpack_from(key, len(key) - _TAIL.size)
        return arrival, _known_tuple(self._origins[field >> 8], seq, _payload(key), key[-1])

    # -- finding ---------------------------------------------------------------

    def oldest(self, prefix: bytes) -> tuple[int, Tuple] | None:
        """The oldest live tuple whose payload starts with ``prefix``, of the
        highest priority that has one (no lower class is looked at)."""
        lo, hi = self._range(prefix)
        if hi - lo <= SCAN_LIMIT:
            if lo == hi:
                return None
            if hi - lo == 1:
                return self._tuple(self._sorted[lo])
            return self._tuple(min(self._sorted.islice(lo, hi), key=_rank))
        key = self._queue(prefix, lo, hi).best(self._by_arrival)
        return None if key is None else self._tuple(key)

    def count(self, prefix: bytes) -> int:
        """How many live tuples match, of every priority."""
        lo, hi = self._range(prefix)
        return hi - lo

    def groups(self, separator: bytes, most: int, under: bytes = b"") -> dict[bytes, int]:
        """How many live tuples fall in each group: a payload's group is its
        bytes up to and including the first ``separator`` (the payload itself
        when it has none). A bisection per group, not a look at every tuple;
        at most ``most`` groups (the first in byte order). ``under``: only the
        payloads that start with it, grouped at the first separator after it
        (``dead/`` and ``/``: ``dead/job/`` for ``dead/job/7``)."""
        if not separator or _ZERO in separator or b"\xff" in separator:
            # 0xFF never occurs in UTF-8; in an escaped key it may follow a NUL.
            raise ValueError("separator must be UTF-8 text without NUL")
        found: dict[bytes, int] = {}
        keys = self._sorted
        lo, size = self._range(under)
        skip = len(_escape(under))
        while lo < size and len(found) < most:
            key = keys[lo]
            head = key[: len(key) - _TAIL.size]
            cut = head.find(separator, skip)
            if cut < 0:
                # No separator: the group is the whole payload, shared by its
                # copies (their keys run from head + the tail's zero padding).
                group, end = head, head + b"\x00\x01"
            else:
                group = head[: cut + len(separator)]
                end = prefix_end(group)
            hi = size if end is None else keys.bisect_left(end)
            found[group.replace(_ESCAPED_ZERO, _ZERO)] = hi - lo
            lo = hi
        return found

    def least_seqs(self) -> Iterator[tuple[str, int]]:
        """Per origin with a live tuple, its least live seq (a look at the
        front of each origin's lane)."""
        for origin, lane in zip(self._origins, self._lanes, strict=True):
            seq = lane.first()
            if seq is not None:
                yield origin, seq

    def first_arrivals(self, prefixes: Iterable[bytes], budget: int) -> dict[bytes, EntryId]:
        """Per prefix, the id of its live match that arrived first (whatever
        its priority), for the prefixes found without looking at more than
        ``budget`` keys in all. Cheap where takes make it so, and a bounded
        scan elsewhere, never a change to what takes use:

        * a range of at most ``SCAN_LIMIT`` keys is scanned;
        * a prefix whose queue is kept (a prefix taken from) is answered by
          its classes' fronts (their dead fronts dropped, as a take would),
          without building one, nor moving it in the queues' order;
        * else the match found first at an earlier call, if it is still live
          and no tuple was put back since (new ones arrive after it);
        * else the range is scanned, if the budget has room for it; a prefix
          it has none for is left out.
        """
        found: dict[bytes, EntryId] = {}
        firsts = self._firsts
        for prefix in prefixes:
            lo, hi = self._range(prefix)
            if lo == hi:
                continue
            key: bytes | None = None
            if hi - lo <= SCAN_LIMIT:
                key = min(self._sorted.islice(lo, hi), key=_arrival)
            elif (queue := self._queues.get(prefix)) is not None:
                key = queue.first_live(self._by_arrival)
            elif (seen := firsts.get(prefix)) is not None and seen[1] == self._restores:
                key = self._by_arrival.get(seen[0])
            if key is None and hi - lo > SCAN_LIMIT and hi - lo <= budget:
                budget -= hi - lo
                key = min(self._sorted.islice(lo, hi), key=_arrival)
                if len(firsts) >= _FIRSTS:
                    firsts.clear()
                firsts[prefix] = (_arrival(key), self._restores)
            if key is not None:
                _, seq, field = _TAIL.unpack_from(key, len(key) - _TAIL.size)
                found[prefix] = EntryId(self._origins[field >> 8], seq)
        return found

    def iter_matching(self, prefix: bytes, after: int = 0) -> Iterator[tuple[int, Tuple]]:
        """Live matches with arrival > ``after``, oldest first whatever their
        priority (for paged listing by arrival: not the order takes serve)."""
        lo, hi = self._range(prefix)
        arrivals: Iterable[int]
        if hi - lo <= SCAN_LIMIT:
            arrivals = sorted(map(_arrival, self._sorted.islice(lo, hi)))
            arrivals = arrivals[bisect_right(arrivals, after) :]
        else:
            arrivals = self._queue(prefix, lo, hi).after(after)
        by_arrival, previous = self._by_arrival, None
        for arrival in arrivals:
            # A class's queue may hold an arrival restored into another class,
            # where it is listed too: live once, listed once.
            key = None if arrival == previous else by_arrival.get(arrival)
            previous = arrival
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

    def _queue(self, prefix: bytes, lo: int, hi: int) -> _PrefixQueue:
        queues = self._queues
        queue = queues.get(prefix)
        if queue is not None:
            queues.move_to_end(prefix)
            # Dead arrivals past the fronts pile up when tuples leave through
            # other prefixes; rebuild once they outnumber the live ones.
            if queue.size <= 2 * (hi - lo) + 1024:
                return queue
        only = self._per_class.index(len(self._sorted)) if self._classes == 1 else None
        queue = _PrefixQueue(self._sorted.islice(lo, hi), only)
        queues[prefix] = queue
        if len(queues) > MAX_QUEUES:
            queues.popitem(last=False)
        return queue
