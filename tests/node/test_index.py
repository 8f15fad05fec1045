"""The live index against a plain-Python model: a list of live tuples (with
their priorities) in arrival order.

Random sequences of add / bulk load / take by prefix / read / remove by id /
restore / count / list, over a few priorities (negative ones too), must give
what the model gives: a take or read the highest priority's oldest match, a
list every match in arrival order. The index's scale constants are made tiny
here (a range of 2 is "large", a block holds 4, a listing reads a queue two
arrivals at a time), so that short sequences go through the prefix queues and
their classes, their eviction and rebuilds, and the blocks' splits and
merges, as a million tuples would.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)
from sortedcontainers import SortedList

from forum.node.core.entries import PLAIN, EntryId, Properties, Tuple
from forum.node.space import index as index_module
from forum.node.space.index import LiveIndex, _IntMap

#: Short payloads over an alphabet with the bytes the keys' encoding is about
#: (00 is escaped, 00 00 ends a payload, ff ends prefix ranges).
BYTES = st.binary(max_size=4).map(lambda b: bytes(b"\x00\x01a\xff"[x % 4] for x in b))
PAYLOADS = BYTES
PREFIXES = st.one_of(
    BYTES,
    st.sampled_from([b"", b"\xff", b"\xff\xff", b"\x00", b"\x00\x00", b"a\x00\x00\x00" * 3]),
)
ORIGINS = ["here", "peer-a", "peer-b"]
#: Priorities, 0 (the plain one) most often, and both ends of the range.
PRIORITIES = st.sampled_from([0, 0, 0, 1, -1, 127, -128])


def tuple_of(entry_id: EntryId, payload: bytes, priority: int = 0) -> Tuple:
    return Tuple(entry_id, payload, Properties(priority=priority) if priority else PLAIN)


def plain(found: tuple[int, Tuple] | None) -> tuple[int, Tuple] | None:
    """``found`` as the index hands it out: with its priority, the rest of
    its props left to the Forum."""
    if found is None:
        return None
    item = found[1]
    return found[0], tuple_of(item.id, item.payload, item.props.priority)


class IndexModel(RuleBasedStateMachine):
    """``live``: (arrival, tuple) in arrival order, each tuple with its
    priority in its props; the ``removed`` bundle: the tuples taken out (by
    take or remove_id), which ``restore`` puts back."""

    removed = Bundle("removed")
    SMALL: ClassVar[dict[str, int]] = {
        "SCAN_LIMIT": 1,
        "MAX_QUEUES": 2,
        "_BLOCK": 4,
        "_CHUNK": 2,
    }

    def __init__(self) -> None:
        super().__init__()
        self.saved = {name: getattr(index_module, name) for name in self.SMALL}
        for name, value in self.SMALL.items():
            setattr(index_module, name, value)
        self.index = LiveIndex()
        self.live: list[tuple[int, Tuple]] = []
        self.used: dict[str, set[int]] = {origin: set() for origin in ORIGINS}

    def teardown(self) -> None:
        for name, value in self.saved.items():
            setattr(index_module, name, value)

    def fresh(self, origin: str, skip: int) -> EntryId:
        """A seq of ``origin`` not used yet: the next after a gap of ``skip``,
        or (``skip`` odd) the first gap left earlier, as a peer's entries may
        come out of order."""
        used = self.used[origin]
        gaps = [s for s in range(1, max(used, default=0)) if s not in used]
        seq = gaps[0] if skip % 2 and gaps else max(used, default=0) + 1 + skip
        used.add(seq)
        return EntryId(origin, seq)

    @property
    def used_ids(self) -> set[EntryId]:
        """Every id used so far, live or not."""
        return {EntryId(o, s) for o, seqs in self.used.items() for s in seqs}

    def oldest(self, prefix: bytes) -> tuple[int, Tuple] | None:
        """The highest priority's oldest match."""
        matches = [(a, t) for a, t in self.live if t.payload.startswith(prefix)]
        return max(matches, key=lambda m: (m[1].props.priority, -m[0]), default=None)

    @initialize(
        items=st.lists(
            st.tuples(PAYLOADS, st.sampled_from(ORIGINS), st.integers(0, 3), PRIORITIES),
            max_size=8,
        )
    )
    def load(self, items: list[tuple[bytes, str, int, int]]) -> None:
        tuples = [tuple_of(self.fresh(o, skip), payload, p) for payload, o, skip, p in items]
        self.index.bulk_load(tuples)
        self.live = list(enumerate(tuples, 1))

    @rule(
        payload=PAYLOADS,
        origin=st.sampled_from(ORIGINS),
        skip=st.integers(0, 3),
        priority=PRIORITIES,
    )
    def add(self, payload: bytes, origin: str, skip: int, priority: int) -> None:
        item = tuple_of(self.fresh(origin, skip), payload, priority)
        arrival = self.index.add(item)
        assert all(arrival > a for a, _ in self.live)
        self.live.append((arrival, item))

    @rule(prefix=PREFIXES)
    def read(self, prefix: bytes) -> None:
        assert self.index.oldest(prefix) == plain(self.oldest(prefix))

    @rule(target=removed, prefix=PREFIXES)
    def take(self, prefix: bytes) -> object:
        found = self.oldest(prefix)
        assert self.index.oldest(prefix) == plain(found)
        if found is None:
            return multiple()
        assert (found[0], self.index.remove(found[0])) == plain(found)
        self.live.remove(found)
        return found

    @rule(target=removed, data=st.data())
    def remove_id(self, data: st.DataObject) -> object:
        known = [item.id for _, item in self.live] + sorted(self.used_ids, key=str)
        entry_id = data.draw(st.sampled_from(known) if known else st.just(EntryId("here", 1)))
        found = next(((a, t) for a, t in self.live if t.id == entry_id), None)
        assert self.index.remove_id(entry_id) == plain(found)
        if found is None:
            return multiple()
        self.live.remove(found)
        return found

    @rule(found=consumes(removed), elsewhere=st.none() | PRIORITIES)
    def restore(self, found: tuple[int, Tuple], elsewhere: int | None) -> None:
        """Back in its place; ``elsewhere``: with another priority than it had
        (the index files a tuple by the priority it is given)."""
        arrival, item = found
        if elsewhere is not None:
            item = tuple_of(item.id, item.payload, elsewhere)
        self.index.restore(arrival, item)
        self.live.append((arrival, item))
        self.live.sort(key=lambda pair: pair[0])

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def add_again_refused(self, data: st.DataObject) -> None:
        """A live id added again is refused, and changes nothing."""
        _, item = data.draw(st.sampled_from(self.live))
        with pytest.raises(KeyError):
            self.index.add(item)

    @rule(prefix=PREFIXES, after=st.integers(0, 40))
    def listing(self, prefix: bytes, after: int) -> None:
        expected = [(a, t) for a, t in self.live if a > after and t.payload.startswith(prefix)]
        assert list(self.index.iter_matching(prefix, after)) == [plain(m) for m in expected]

    @rule(prefix=PREFIXES)
    def count(self, prefix: bytes) -> None:
        assert self.index.count(prefix) == len(
            [t for _, t in self.live if t.payload.startswith(prefix)]
        )

    @rule(separator=st.sampled_from([b"a", b"\x01", b"a\x01"]), under=PREFIXES)
    def groups(self, separator: bytes, under: bytes) -> None:
        """Each payload under ``under`` counted in its group: up to the
        first separator after ``under``, or all of it."""
        expected: dict[bytes, int] = {}
        for _, item in self.live:
            if item.payload.startswith(under):
                cut = item.payload.find(separator, len(under))
                group = item.payload if cut < 0 else item.payload[: cut + len(separator)]
                expected[group] = expected.get(group, 0) + 1
        found = self.index.groups(separator, 10**6, under)
        assert list(found.items()) == sorted(expected.items())

    @rule(prefixes=st.lists(PREFIXES, max_size=3), budget=st.sampled_from([0, 2, 10**9]))
    def first_arrivals(self, prefixes: list[bytes], budget: int) -> None:
        """The match that arrived first, whatever its priority: from a
        scan, a kept queue, the last answer, or a scan within the budget;
        with room for every scan, every prefix that has a match."""
        found = self.index.first_arrivals(prefixes, budget)
        for prefix in prefixes:
            matches = [(a, t.id) for a, t in self.live if t.payload.startswith(prefix)]
            if prefix in found:
                assert found[prefix] == min(matches)[1]
            else:
                assert not matches or budget < 10**9
        assert set(found) <= set(prefixes)

    @invariant()
    def same_live_set(self) -> None:
        least: dict[str, int] = {}
        for _, item in self.live:
            least[item.id.origin] = min(item.id.seq, least.get(item.id.origin, item.id.seq))
        assert dict(self.index.least_seqs()) == least
        assert len(self.index) == len(self.live)
        assert sorted(self.index.ids()) == sorted(t.id for _, t in self.live)
        for _, item in self.live:
            assert item.id in self.index
        for entry_id in self.used_ids - {t.id for _, t in self.live}:
            assert entry_id not in self.index


TestIndexModel = IndexModel.TestCase
TestIndexModel.settings = settings(max_examples=75, stateful_step_count=40, deadline=None)


def test_a_shorter_payload_never_matches_a_longer_prefix() -> None:
    """Each payload is a strict prefix of the next pattern: without the
    escaping, ``a`` (``a 00 00 ...`` in its key) would match ``a 00 00``."""
    index = LiveIndex()
    for seq, payload in enumerate([b"", b"a", b"a\x00", b"a\x00\x00"], 1):
        index.add(Tuple(EntryId("here", seq), payload))
    assert index.count(b"a\x00\x00") == 1
    assert index.count(b"a\x00") == 2
    assert index.count(b"a") == 3
    assert index.count(b"") == 4
    assert index.count(b"a\x00\x00\x00") == 0
    found = index.oldest(b"a\x00\x00")
    assert found is not None
    assert found[1] == Tuple(EntryId("here", 4), b"a\x00\x00")


def test_payloads_with_zero_and_ff_bytes_come_back_whole() -> None:
    index = LiveIndex()
    payloads = [b"\x00", b"\x00\xff", b"\xff\x00\x00", b"\x00\xff\x00", bytes(range(256))]
    for seq, payload in enumerate(payloads, 1):
        index.add(Tuple(EntryId("here", seq), payload))
    assert [t.payload for _, t in index.iter_matching(b"")] == payloads
    for seq, payload in enumerate(payloads, 1):
        assert index.remove_id(EntryId("here", seq)) == (seq, Tuple(EntryId("here", seq), payload))
    assert len(index) == 0


@settings(max_examples=200, deadline=None)
@given(
    order=st.permutations(range(1, 41)),
    ops=st.lists(
        st.tuples(st.sampled_from(["put", "pop", "pop", "get"]), st.integers(0, 41)),
        max_size=150,
    ),
)
def test_int_map_is_a_sorted_dict(order: list[int], ops: list[tuple[str, int]]) -> None:
    """Keys put in any order (appends at the end, the common case, and inserts
    anywhere), then put, popped and looked up at random: blocks of 4 split
    past 8 and two neighbours merge when they fit in one, and the map stays
    a sorted dict."""
    block = index_module._BLOCK
    index_module._BLOCK = 4
    try:
        int_map, model = _IntMap("q"), {}
        for op, key in [("put", key) for key in order] + ops:
            if op == "put":
                if key in model:
                    with pytest.raises(KeyError):
                        int_map.put(key, b"again")
                else:
                    int_map.put(key, b"%d" % key)
                    model[key] = b"%d" % key
            elif op == "pop":
                assert int_map.pop(key) == model.pop(key, None)
            else:
                assert int_map.get(key) == model.get(key)
            assert list(int_map) == sorted(model)
            assert len(int_map) == len(model)
        assert [int_map.get(k) for k in range(42)] == [model.get(k) for k in range(42)]
    finally:
        index_module._BLOCK = block


# -- priorities ------------------------------------------------------------------


def _fill(index: LiveIndex, tuples: list[tuple[bytes, int]], origin: str = "here") -> list[int]:
    """Add (payload, priority) pairs in order; their arrivals."""
    return [
        index.add(tuple_of(EntryId(origin, seq), payload, priority))
        for seq, (payload, priority) in enumerate(tuples, 1)
    ]


def _drain(index: LiveIndex, prefix: bytes) -> list[bytes]:
    """Take every match as takes would, one at a time: their payloads."""
    taken = []
    while (found := index.oldest(prefix)) is not None:
        assert index.remove(found[0]) == found[1]
        taken.append(found[1].payload)
    return taken


@pytest.fixture(params=[32, 1], ids=["scan", "queues"])
def scan_limit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Each test below runs with ranges scanned, and again served from the
    prefix queues (every range of two or more is "large")."""
    monkeypatch.setattr(index_module, "SCAN_LIMIT", request.param)
    return int(request.param)


def test_the_highest_priority_first_and_the_oldest_first_within_one(scan_limit: int) -> None:
    index = LiveIndex()
    _fill(index, [(b"j/a", 0), (b"j/b", 5), (b"j/c", 0), (b"j/d", 5), (b"j/e", 2), (b"x", 9)])
    assert _drain(index, b"j/") == [b"j/b", b"j/d", b"j/e", b"j/a", b"j/c"]
    assert len(index) == 1  # the one of priority 9 does not match


def test_negative_priorities_come_after_zero_down_to_the_least(scan_limit: int) -> None:
    index = LiveIndex()
    _fill(index, [(b"-128", -128), (b"-1", -1), (b"0", 0), (b"127", 127), (b"-1b", -1)])
    assert _drain(index, b"") == [b"127", b"0", b"-1", b"-1b", b"-128"]


class _Watched(index_module._Queue):
    """A class's queue in a prefix queue that notes each time its front is
    looked at (by its class's byte)."""

    looked: ClassVar[list[int]] = []

    def first(self) -> int | None:
        self.looked.append(self.byte)
        return super().first()


def test_a_take_looks_at_no_class_below_the_one_it_answers_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``job/`` has 100 matches of class 0 and three of class 5, far past
    ``SCAN_LIMIT``: they are served from its prefix queue, whose one pass
    over the range makes a queue per class present (9 has no match: none).
    The takes of class 5's three never look at class 0's queue; the next
    take, with class 5 run out, does."""
    monkeypatch.setattr(index_module, "_Queue", _Watched)
    monkeypatch.setattr(_Watched, "looked", [])
    index = LiveIndex()
    _fill(index, [(b"job/%03d" % i, 0) for i in range(100)])
    _fill(index, [(b"job/high%d" % i, 5) for i in range(3)] + [(b"other", 9)], origin="peer")
    assert _take(index, b"job/", 3) == [b"job/high0", b"job/high1", b"job/high2"]
    assert set(index._queues[b"job/"].classes) == {0, 5}
    assert set(_Watched.looked) == {5}
    # Class 5 run out, the same take is class 0's, and class 5 has left.
    assert _take(index, b"job/", 1) == [b"job/000"]
    assert 0 in _Watched.looked
    assert set(index._queues[b"job/"].classes) == {0}
    # A match of a class the prefix queue has not got comes in its place.
    _Watched.looked.clear()
    _fill(index, [(b"job/seven", 7)], origin="later")
    assert set(index._queues[b"job/"].classes) == {0, 7}
    assert _take(index, b"job/", 1) == [b"job/seven"]
    assert set(_Watched.looked) == {7}


def _take(index: LiveIndex, prefix: bytes, n: int) -> list[bytes]:
    """``n`` takes of ``prefix``: their payloads."""
    taken = []
    for _ in range(n):
        found = index.oldest(prefix)
        assert found is not None
        index.remove(found[0])
        taken.append(found[1].payload)
    return taken


class _Bisections(SortedList):
    """The one sorted list, counting its bisections."""

    bisections = 0

    def bisect_left(self, value: bytes) -> int:
        self.bisections += 1
        return int(super().bisect_left(value))


def test_a_take_among_many_classes_is_one_range_lookup() -> None:
    """Ten priorities, 50 tuples each: a take of an exact payload (one match,
    scanned) and one of a prefix of them all (served from its prefix queue)
    each bisect the one sorted list twice (the range's two ends), whatever
    the number of classes, as ``count`` does."""
    index = LiveIndex()
    _fill(index, [(b"job/%03d" % i, i % 10 - 4) for i in range(500)])
    index._sorted = watched = _Bisections(index._sorted)
    takes = [(b"job/123", b"job/123"), (b"job/", b"job/009"), (b"job/", b"job/019")]
    for prefix, payload in takes:  # 009 and 019: the first two of priority 5
        watched.bisections = 0
        assert _take(index, prefix, 1) == [payload]
        assert watched.bisections == 2
    assert list(index._queues) == [b"job/"]  # the exact payload made none
    watched.bisections = 0
    assert index.count(b"job/") == 497
    assert watched.bisections == 2


def test_restore_puts_a_tuple_back_in_its_class_and_place(scan_limit: int) -> None:
    index = LiveIndex()
    arrivals = _fill(index, [(b"j/a", 3), (b"j/b", 0), (b"j/c", 3), (b"j/d", 3)])
    taken = []
    for _ in range(2):  # j/a then j/c, both of class 3
        found = index.oldest(b"j/")
        assert found is not None
        index.remove(found[0])
        taken.append(found)
    assert [t.payload for _, t in taken] == [b"j/a", b"j/c"]
    # Put back as handed out (with its priority), newest first.
    for arrival, item in reversed(taken):
        assert item.props.priority == 3
        index.restore(arrival, item)
    assert [a for a, _ in index.iter_matching(b"j/")] == arrivals
    assert _drain(index, b"j/") == [b"j/a", b"j/c", b"j/d", b"j/b"]


def test_a_tuple_restored_with_another_priority_is_served_by_that_one(scan_limit: int) -> None:
    """Class 5's queue still holds the arrival (dead there): it must not
    answer for class 5 with a tuple that is now of class 0, nor be listed
    twice."""
    index = LiveIndex()
    _fill(index, [(b"j/a", 5), (b"j/b", 5), (b"j/c", 5), (b"j/d", 0)])
    found = index.oldest(b"j/")
    assert found is not None
    index.remove(found[0])
    index.restore(found[0], Tuple(found[1].id, found[1].payload))  # priority 0 now
    assert [t.payload for _, t in index.iter_matching(b"j/")] == [b"j/a", b"j/b", b"j/c", b"j/d"]
    assert _drain(index, b"j/") == [b"j/b", b"j/c", b"j/a", b"j/d"]


def test_remove_and_remove_id_in_any_class(scan_limit: int) -> None:
    index = LiveIndex()
    pairs = [(b"j/%d" % i, priority) for i, priority in enumerate([7, -3, 0, 7, -3, 0])]
    arrivals = _fill(index, pairs)
    assert index.remove(arrivals[0]) == tuple_of(EntryId("here", 1), b"j/0", 7)
    assert index.remove_id(EntryId("here", 2)) == (
        arrivals[1],
        tuple_of(EntryId("here", 2), b"j/1", -3),
    )
    assert index.remove_id(EntryId("here", 2)) is None
    with pytest.raises(KeyError):
        index.remove(arrivals[0])
    assert len(index) == 4 and index.count(b"j/") == 4
    assert EntryId("here", 1) not in index and EntryId("here", 4) in index
    assert index.remove_id(EntryId("here", 4)) is not None  # class 7 is empty now
    assert index.remove(arrivals[4]) == tuple_of(EntryId("here", 5), b"j/4", -3)  # and class -3
    assert [t.payload for _, t in index.iter_matching(b"")] == [b"j/2", b"j/5"]
    assert _drain(index, b"j/") == [b"j/2", b"j/5"]
    # A class emptied and filled again is served in its turn.
    _fill(index, [(b"j/again", -3), (b"j/top", 7)], origin="peer")
    assert _drain(index, b"") == [b"j/top", b"j/again"]


def test_bulk_load_with_mixed_priorities(scan_limit: int) -> None:
    index = LiveIndex()
    pairs = [(b"j/a", 1), (b"j/b", 0), (b"k/c", 1), (b"j/d", -1), (b"j/e", 1), (b"j/f", 0)]
    items = [tuple_of(EntryId("peer", seq), p, q) for seq, (p, q) in enumerate(pairs, 1)]
    index.bulk_load(items)
    assert len(index) == 6 and index.count(b"j/") == 5 and index.count(b"") == 6
    listed = list(index.iter_matching(b"j/", after=1))  # arrival order, not take order
    assert [(a, t.payload) for a, t in listed] == [
        (2, b"j/b"),
        (4, b"j/d"),
        (5, b"j/e"),
        (6, b"j/f"),
    ]
    assert index.add(tuple_of(EntryId("here", 1), b"j/g", 1)) == 7
    assert _drain(index, b"j/") == [b"j/a", b"j/e", b"j/g", b"j/b", b"j/f", b"j/d"]
    assert _drain(index, b"") == [b"k/c"]


def test_prefixes_with_00_and_ff_bytes_across_classes(scan_limit: int) -> None:
    index = LiveIndex()
    pairs = [
        (b"\x00", 0),
        (b"\x00\xff", 2),
        (b"\xff", 0),
        (b"\xff\xff\x00", -2),
        (b"\x00\x00", -2),
        (b"\xff\xff", 2),
        (b"", 2),
    ]
    _fill(index, pairs)
    counts = {b"\x00": 3, b"\x00\x00": 1, b"\x00\xff": 1, b"\xff": 3, b"\xff\xff": 2, b"": 7}
    assert {prefix: index.count(prefix) for prefix in counts} == counts
    firsts = {
        b"\x00": b"\x00\xff",
        b"\x00\x00": b"\x00\x00",
        b"\xff": b"\xff\xff",
        b"": b"\x00\xff",
    }
    for prefix, payload in firsts.items():
        found = index.oldest(prefix)
        assert found is not None and found[1].payload == payload
    assert [t.payload for _, t in index.iter_matching(b"\xff")] == [
        b"\xff",
        b"\xff\xff\x00",
        b"\xff\xff",
    ]
    assert _drain(index, b"\xff") == [b"\xff\xff", b"\xff", b"\xff\xff\x00"]
    assert _drain(index, b"\x00") == [b"\x00\xff", b"\x00", b"\x00\x00"]
    assert _drain(index, b"") == [b""]


def test_the_tuples_handed_out_have_their_priority_and_nothing_else() -> None:
    index = LiveIndex()
    arrival = index.add(Tuple(EntryId("here", 1), b"a", Properties(priority=9, expires=5)))
    assert index.oldest(b"") == (arrival, Tuple(EntryId("here", 1), b"a", Properties(priority=9)))
    index.add(tuple_of(EntryId("here", 2), b"b", 0))
    assert next(index.iter_matching(b"b"))[1].props is PLAIN
    assert index.remove(arrival).props.priority == 9


@pytest.mark.parametrize("priority", [128, -129, 1000])
def test_a_priority_out_of_range_is_refused_and_changes_nothing(priority: int) -> None:
    index = LiveIndex()
    index.add(tuple_of(EntryId("here", 1), b"a", 1))
    bad = tuple_of(EntryId("here", 2), b"b", priority)
    with pytest.raises(ValueError, match="priority must be -128 to 127"):
        index.add(bad)
    assert len(index) == 1 and bad.id not in index and index.count(b"") == 1
    empty = LiveIndex()
    with pytest.raises(ValueError, match="priority must be -128 to 127"):
        empty.bulk_load([tuple_of(EntryId("here", 1), b"a"), bad])
    assert len(empty) == 0 and empty.count(b"") == 0 and empty.oldest(b"") is None


def test_past_the_origins_a_key_can_number_a_new_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Origin numbers have three bytes (the fourth is the priority's): one
    more origin is refused, and changes nothing."""
    monkeypatch.setattr(index_module, "_MAX_ORIGINS", 2)
    index = LiveIndex()
    for seq, origin in enumerate(["a", "b"], 1):
        index.add(tuple_of(EntryId(origin, seq), b"x", 1))
    with pytest.raises(OverflowError, match="more than 2 origins"):
        index.add(tuple_of(EntryId("c", 1), b"x", 1))
    assert len(index) == 2 and EntryId("c", 1) not in index
    assert index.add(tuple_of(EntryId("a", 3), b"y", -1)) == 3  # known origins still are


def test_groups_count_each_payload_up_to_its_first_separator() -> None:
    index = LiveIndex()
    payloads = [b"job/a", b"job/b/c", b"mail/x", b"job/", b"plain", b"plain", b"", b"a\x00/x"]
    payloads += [b"jobs/y", b"plain\x00"]
    for seq, payload in enumerate(payloads, 1):
        index.add(Tuple(EntryId("here", seq), payload))
    assert index.groups(b"/", most=100) == {
        b"": 1,
        b"a\x00/": 1,
        b"job/": 3,
        b"jobs/": 1,
        b"mail/": 1,
        b"plain": 2,
        b"plain\x00": 1,
    }
    assert index.groups(b"/b/", most=100)[b"job/b/"] == 1
    assert list(index.groups(b"/", most=2)) == [b"", b"a\x00/"]
    # Under a prefix: grouped at the first separator after it (dead letters'
    # groups are their jobs').
    index.add(Tuple(EntryId("here", 20), b"dead/job/7"))
    index.add(Tuple(EntryId("here", 21), b"dead/job/8"))
    index.add(Tuple(EntryId("here", 22), b"dead/x"))
    assert index.groups(b"/", most=100, under=b"dead/") == {b"dead/job/": 2, b"dead/x": 1}
    assert index.groups(b"/", most=100, under=b"job/") == {b"job/": 1, b"job/a": 1, b"job/b/": 1}
    with pytest.raises(ValueError, match="separator"):
        index.groups(b"\x00", most=1)


def test_the_first_arrival_is_remembered_until_a_tuple_is_put_back() -> None:
    """Past ``SCAN_LIMIT`` and with no queue kept, a prefix's first arrival
    costs a scan, within the budget; then it is remembered while it lives
    and nothing is put back (a tuple restored may have arrived before it)."""
    index = LiveIndex()
    arrivals = [index.add(Tuple(EntryId("here", seq), b"g/%d" % seq)) for seq in range(1, 101)]
    first = index.remove(arrivals[0])  # out for a while (a reservation)
    assert index.first_arrivals([b"g/"], 98) == {}  # 99 keys: past the budget
    assert index.first_arrivals([b"g/"], 99) == {b"g/": EntryId("here", 2)}
    assert index.first_arrivals([b"g/"], 0) == {b"g/": EntryId("here", 2)}  # remembered
    index.restore(arrivals[0], first)
    assert index.first_arrivals([b"g/"], 0) == {}  # put back: not known without a scan
    assert index.first_arrivals([b"g/"], 100) == {b"g/": EntryId("here", 1)}
    index.remove(arrivals[0])
    assert index.first_arrivals([b"g/"], 0) == {}  # the one remembered is gone


def test_a_prefix_taken_from_answers_from_its_queue_whatever_the_priorities() -> None:
    """A take's queue serves the first arrival with no scan (budget 0): the
    fronts of every class, not the class a take serves first."""
    index = LiveIndex()
    for seq in range(1, 41):
        index.add(tuple_of(EntryId("here", seq), b"q/%d" % seq, priority=seq % 3))
    found = index.oldest(b"q/")  # a take's look: the queue is built and kept
    assert found is not None and found[1].props.priority == 2
    assert index.first_arrivals([b"q/", b"x/"], 0) == {b"q/": EntryId("here", 1)}
    index.remove_id(EntryId("here", 1))
    index.remove_id(EntryId("here", 2))
    assert index.first_arrivals([b"q/"], 0) == {b"q/": EntryId("here", 3)}
    # A small range is scanned, free of the budget.
    index.add(Tuple(EntryId("peer", 7), b"s/1"))
    assert index.first_arrivals([b"s/"], 0) == {b"s/": EntryId("peer", 7)}
    assert dict(index.least_seqs()) == {"here": 3, "peer": 7}
