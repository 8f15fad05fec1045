"""Version vectors: which entries of each origin a node holds.

An origin's seqs run 1, 2, 3, ... without gaps at the source, but a node may
learn them out of order (a push lands while an older one was dropped), so
what it holds of an origin is::

    1 .. contiguous            every entry, no gap
    above: [(s1, e1), ...]     runs held past the first gap (sorted, disjoint,
                               s1 > contiguous + 1)

Anti-entropy sends this; the peer answers with the seqs in its own contiguous
prefix that the vector does not cover, oldest first, so the asker ends with no
new gap. Only ``contiguous`` matters for correctness: ``above`` saves
resending what a node already holds past a gap, and may be cut short
(``MAX_RANGES``) at the cost of some resending.

Wire form (msgpack map)::

    {origin: [contiguous, s1, e1, s2, e2, ...]}
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from forum.node.core.entries import EntryId, check_origin

#: How many runs above a gap a vector lists per origin.
MAX_RANGES = 32
#: How many seqs past a gap are examined to find those runs.
MAX_SCAN = 10_000
#: The most origins a vector from a peer may name.
MAX_ORIGINS = 100_000

SeqRange = tuple[int, int]


class Order(enum.Enum):
    """How two vectors relate: what one holds that the other does not."""

    EQUAL = "equal"
    BEHIND = "behind"  # the other holds more, and nothing we lack
    AHEAD = "ahead"
    CONCURRENT = "concurrent"  # each holds something the other lacks


class HeldLog(Protocol):
    """What a vector is read from: a :class:`forum.node.storage.strand.Strand`."""

    def vector(self) -> dict[str, int]: ...

    def highest(self) -> dict[str, int]: ...

    def __contains__(self, entry_id: EntryId) -> bool: ...


@dataclass(frozen=True, slots=True)
class VersionVector:
    """Per origin: held without gaps up to ``contiguous[origin]``, plus ``above``."""

    contiguous: Mapping[str, int] = field(default_factory=dict)
    above: Mapping[str, tuple[SeqRange, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for origin, high in self.contiguous.items():
            check_origin(origin)
            if not _is_seq(high, minimum=0):
                raise ValueError(f"{origin}: contiguous must be an integer >= 0, not {high!r}")
        for origin, ranges in self.above.items():
            check_origin(origin)
            floor = self.contiguous.get(origin, 0) + 1
            for start, end in ranges:
                if not (_is_seq(start, 1) and _is_seq(end, 1)) or not floor < start <= end:
                    raise ValueError(f"{origin}: runs above a gap must be sorted and disjoint")
                floor = end + 1

    @classmethod
    def of(cls, log: HeldLog, max_ranges: int = MAX_RANGES) -> VersionVector:
        """What ``log`` holds now. Past-gap runs cost a scan of the gap, bounded by ``MAX_SCAN``."""
        contiguous = log.vector()
        above: dict[str, tuple[SeqRange, ...]] = {}
        for origin, highest in log.highest().items():
            low = contiguous.get(origin, 0)
            if highest > low:
                above[origin] = _runs(log, origin, low + 2, highest, max_ranges)
        return cls(contiguous, {o: r for o, r in above.items() if r})

    # -- reading -----------------------------------------------------------------

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(self.contiguous) | frozenset(self.above)

    def holds(self, entry_id: EntryId) -> bool:
        if entry_id.seq <= self.contiguous.get(entry_id.origin, 0):
            return True
        return any(s <= entry_id.seq <= e for s, e in self.above.get(entry_id.origin, ()))

    def held(self, origin: str) -> list[SeqRange]:
        """The seqs held of ``origin``, as sorted inclusive runs."""
        runs: list[SeqRange] = []
        contiguous = self.contiguous.get(origin, 0)
        if contiguous:
            runs.append((1, contiguous))
        runs.extend(self.above.get(origin, ()))
        return runs

    def missing(self, origin: str, upto: int) -> Iterator[SeqRange]:
        """The runs of seqs in ``1..upto`` that this vector does not hold, oldest first."""
        next_seq = 1
        for start, end in self.held(origin):
            if start > upto:
                break
            if start > next_seq:
                yield next_seq, start - 1
            next_seq = end + 1
        if next_seq <= upto:
            yield next_seq, upto

    def lacks(self, other: VersionVector) -> int:
        """How many entries ``other`` holds that this vector does not."""
        total = 0
        for origin in other.origins:
            total += size(subtract(other.held(origin), self.held(origin)))
        return total

    def compare(self, other: VersionVector) -> Order:
        we_lack = self.lacks(other)
        they_lack = other.lacks(self)
        if we_lack and they_lack:
            return Order.CONCURRENT
        if we_lack:
            return Order.BEHIND
        if they_lack:
            return Order.AHEAD
        return Order.EQUAL

    def merge(self, other: VersionVector) -> VersionVector:
        """What is held by either (a peer's vector, updated by what it acknowledged)."""
        contiguous: dict[str, int] = {}
        above: dict[str, tuple[SeqRange, ...]] = {}
        for origin in self.origins | other.origins:
            runs = union(self.held(origin), other.held(origin))
            if runs and runs[0][0] == 1:
                contiguous[origin] = runs.pop(0)[1]
            if runs:
                above[origin] = tuple(runs[:MAX_RANGES])
        return VersionVector(contiguous, above)

    def only(self, origins: Iterable[str]) -> VersionVector:
        """This vector restricted to ``origins``."""
        wanted = set(origins)
        return VersionVector(
            {o: c for o, c in self.contiguous.items() if o in wanted},
            {o: r for o, r in self.above.items() if o in wanted},
        )

    # -- the wire ----------------------------------------------------------------

    def to_wire(self) -> dict[str, list[int]]:
        wire: dict[str, list[int]] = {}
        for origin in self.origins:
            flat = [self.contiguous.get(origin, 0)]
            for start, end in self.above.get(origin, ()):
                flat += (start, end)
            wire[origin] = flat
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> VersionVector:
        """Parse the wire form; ``ValueError`` for anything malformed."""
        if not isinstance(wire, dict):
            raise ValueError("a version vector is a map origin -> [contiguous, runs...]")
        if len(wire) > MAX_ORIGINS:
            raise ValueError(f"a version vector names more than {MAX_ORIGINS} origins")
        contiguous: dict[str, int] = {}
        above: dict[str, tuple[SeqRange, ...]] = {}
        for origin, flat in wire.items():
            if not isinstance(origin, str):
                raise ValueError("a version vector's origins are strings")
            if not isinstance(flat, list) or not flat or len(flat) % 2 != 1:
                raise ValueError(f"{origin}: expected [contiguous, start, end, ...]")
            if len(flat) > 1 + 2 * MAX_RANGES:
                raise ValueError(f"{origin}: more than {MAX_RANGES} runs above a gap")
            contiguous[origin] = flat[0]
            if len(flat) > 1:
                above[origin] = tuple(zip(flat[1::2], flat[2::2], strict=True))
        return cls(contiguous, above)


def _is_seq(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _runs(log: HeldLog, origin: str, start: int, highest: int, limit: int) -> tuple[SeqRange, ...]:
    """The runs of held seqs in ``start..highest`` (the seq before ``start`` is a gap)."""
    runs: list[SeqRange] = []
    run_start: int | None = None
    stop = min(highest, start + MAX_SCAN)
    for seq in range(start, stop + 1):
        if EntryId(origin, seq) in log:
            if run_start is None:
                run_start = seq
        elif run_start is not None:
            runs.append((run_start, seq - 1))
            run_start = None
            if len(runs) == limit:
                return tuple(runs)
    if run_start is not None:
        runs.append((run_start, stop))
    return tuple(runs)


def union(a: list[SeqRange], b: list[SeqRange]) -> list[SeqRange]:
    """The seqs in ``a`` or ``b`` (each sorted), as sorted disjoint runs."""
    merged: list[SeqRange] = []
    for start, end in sorted(a + b):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def subtract(a: list[SeqRange], b: list[SeqRange]) -> list[SeqRange]:
    """The seqs in ``a`` not in ``b`` (both sorted and disjoint)."""
    result: list[SeqRange] = []
    for start, end in a:
        cursor = start
        for b_start, b_end in b:
            if b_end < cursor:
                continue
            if b_start > end:
                break
            if b_start > cursor:
                result.append((cursor, b_start - 1))
            cursor = max(cursor, b_end + 1)
            if cursor > end:
                break
        if cursor <= end:
            result.append((cursor, end))
    return result


def size(runs: list[SeqRange]) -> int:
    """How many seqs ``runs`` hold."""
    return sum(end - start + 1 for start, end in runs)
