"""The live index against a plain-Python model: a list of live tuples (with
their priorities) in arrival order.

Random sequences of add / bulk load / take by prefix / read / remove by id /
restore / count / list, over a few priorities (negative ones too), must give
what the model gives: a take or read the highest priority's oldest match, a
list every match in arrival order. The index's scale constants are made tiny
here (a range of 3 is "large", a block holds 4), so that short sequences go
through the prefix queues of several classes, their eviction and rebuilds,
and the blocks' splits and merges, as a million tuples would.
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

from node import index as index_module
from node.entries import PLAIN, EntryId, Properties, Tuple
from node.index import LiveIndex, _IntMap

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
    """``found`` as the index hands it out: the tuple's props left to the Forum."""
    return None if found is None else (found[0], Tuple(found[1].id, found[1].payload))


class IndexModel(RuleBasedStateMachine):
    """``live``: (arrival, tuple) in arrival order, each tuple with its
    priority in its props; the ``removed`` bundle: the tuples taken out (by
    take or remove_id), which ``restore`` puts back."""

    removed = Bundle("removed")
    SMALL: ClassVar[dict[str, int]] = {"SCAN_LIMIT": 2, "MAX_QUEUES": 2, "_BLOCK": 4}

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

    @invariant()
    def same_live_set(self) -> None:
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
