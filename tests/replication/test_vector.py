"""Version vectors: what a node holds, compared as sets of seqs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forum.node.core.entries import EntryId, Write
from forum.node.storage.strand import Strand, StrandConfig
from forum.replication.vector import Order, VersionVector

ORIGINS = ("a", "b", "c")


def held_sets(vector: VersionVector) -> dict[str, set[int]]:
    return {
        origin: {seq for start, end in vector.held(origin) for seq in range(start, end + 1)}
        for origin in vector.origins
    }


def vector_of(sets: dict[str, set[int]]) -> VersionVector:
    """The vector of explicit seq sets (the model)."""
    contiguous: dict[str, int] = {}
    above: dict[str, tuple[tuple[int, int], ...]] = {}
    for origin, seqs in sets.items():
        high = 0
        while high + 1 in seqs:
            high += 1
        runs: list[tuple[int, int]] = []
        for seq in sorted(s for s in seqs if s > high + 1):
            if runs and runs[-1][1] == seq - 1:
                runs[-1] = (runs[-1][0], seq)
            else:
                runs.append((seq, seq))
        contiguous[origin] = high
        if runs:
            above[origin] = tuple(runs)
    return VersionVector(contiguous, above)


seq_sets = st.dictionaries(
    st.sampled_from(ORIGINS), st.sets(st.integers(1, 40), max_size=25), max_size=3
)


@given(seq_sets, seq_sets)
def test_lacks_compare_and_merge_agree_with_sets(
    a: dict[str, set[int]], b: dict[str, set[int]]
) -> None:
    va, vb = vector_of(a), vector_of(b)
    assert held_sets(va) == {o: s for o, s in a.items() if s} | {
        o: set() for o, s in a.items() if not s
    }
    missing = sum(len(b[o] - a.get(o, set())) for o in b)
    assert va.lacks(vb) == missing
    merged = held_sets(va.merge(vb))
    for origin in set(a) | set(b):
        assert merged.get(origin, set()) == a.get(origin, set()) | b.get(origin, set())
    order = va.compare(vb)
    extra = sum(len(a[o] - b.get(o, set())) for o in a)
    expected = {
        (False, False): Order.EQUAL,
        (True, False): Order.BEHIND,
        (False, True): Order.AHEAD,
        (True, True): Order.CONCURRENT,
    }[(missing > 0, extra > 0)]
    assert order is expected


@given(seq_sets, st.integers(0, 45))
def test_missing_is_the_complement_up_to_a_bound(a: dict[str, set[int]], upto: int) -> None:
    vector = vector_of(a)
    for origin in ORIGINS:
        missing = {s for start, end in vector.missing(origin, upto) for s in range(start, end + 1)}
        assert missing == set(range(1, upto + 1)) - a.get(origin, set())


@given(seq_sets)
def test_wire_round_trip(a: dict[str, set[int]]) -> None:
    vector = vector_of(a)
    assert VersionVector.from_wire(vector.to_wire()) == vector


@pytest.mark.parametrize(
    "wire",
    [
        [],
        {"a": 3},
        {"a": []},
        {"a": [1, 5]},  # a run needs a start and an end
        {"a": [-1]},
        {"a": [True]},
        {"a": [2, 3, 4]},  # 3 is not past a gap above 2
        {"a": [0, 5, 6, 4, 8]},  # runs out of order
        {"bad origin!": [1]},
        {1: [1]},
    ],
)
def test_malformed_wire_vectors_are_refused(wire: object) -> None:
    with pytest.raises(ValueError):
        VersionVector.from_wire(wire)


async def test_of_a_strand_lists_runs_above_a_gap(tmp_path: Path) -> None:
    cfg = StrandConfig().with_storage(tmp_path).with_node_name("me").with_fsync("never")
    async with await Strand.open(cfg) as strand:
        strand.take_replayed()
        entries = [Write(EntryId("p", seq), b"x") for seq in (1, 2, 5, 6, 9)]
        await strand.append_remote(entries)
        vector = VersionVector.of(strand)
        assert vector.contiguous == {"p": 2}
        assert vector.above == {"p": ((5, 6), (9, 9))}
        assert list(vector.missing("p", 10)) == [(3, 4), (7, 8), (10, 10)]
