"""Where each seq of one origin lies in the segment files: the Strand's index.

A *position* packs where one entry lies into one int that grows in log
order: the segment number above ``OFFSET_BITS`` bits of byte offset (the
entry's offset, :mod:`forum.node.storage.segment`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right, insort

#: A position packs (segment number, byte offset) into one int: 40 bits of offset.
OFFSET_BITS = 40
#: The position slot of a seq never seen here.
ABSENT = -1
#: The position slot of a seq dropped by compaction (held once, gone for good).
DEAD = -2


class OriginLog:
    """Where each seq of one origin lies in the files, and how far it is contiguous.

    Seqs up to ``base`` (the compaction floor) are all held here or dead
    (dropped by compaction): the few survivors among them are in ``below``,
    so the memory kept is that of the survivors, not of the history. Above
    ``base``, ``positions`` has one slot per seq: a packed position,
    ``ABSENT`` (never seen) or ``DEAD`` (dropped).
    """

    __slots__ = ("base", "below", "below_seqs", "contiguous", "count", "positions")

    def __init__(self, base: int = 0) -> None:
        self.base = base
        self.below: dict[int, int] = {}
        self.below_seqs = array("q")  # the keys of ``below``, ascending
        self.positions = array("q")  # index seq-base-1 -> packed position, ABSENT or DEAD
        self.contiguous = base
        self.count = 0

    def __contains__(self, seq: int) -> bool:
        """Held here, or dead: either way, never to be taken in again."""
        if seq <= self.base:
            return True
        i = seq - self.base - 1
        return i < len(self.positions) and self.positions[i] != ABSENT

    def get(self, seq: int) -> int | None:
        """The position of a stored entry; ``None`` if never seen or dead."""
        if seq <= self.base:
            return self.below.get(seq)
        i = seq - self.base - 1
        if i >= len(self.positions):
            return None
        position = self.positions[i]
        return None if position < 0 else position

    def add(self, seq: int, position: int) -> bool:
        """Note where ``seq`` lies; ``False`` (and nothing changes) if it is
        already held or dead."""
        if seq in self:
            return False
        self.count += 1
        positions = self.positions
        i = seq - self.base - 1
        if i == len(positions):  # the common case: the next seq
            positions.append(position)
            if self.contiguous == seq - 1:
                self.contiguous = seq
            return True
        gap = i - len(positions)
        if gap > 0:
            positions.extend([ABSENT] * gap)
            positions.append(position)
        else:
            positions[i] = position
        if seq == self.contiguous + 1:
            self._extend_contiguous()
        return True

    def add_next(self, first: int, positions: list[int]) -> bool:
        """:meth:`add` for seqs ``first``, ``first + 1``, ... when they are the
        next ones and nothing is missing below them; ``False`` (and nothing
        changes) otherwise."""
        if first != self.highest + 1 or self.contiguous != self.highest:
            return False
        self.positions.extend(positions)
        self.count += len(positions)
        self.contiguous += len(positions)
        return True

    def replay(self, seq: int, position: int) -> bool:
        """:meth:`add` for an entry read back on open: below the floor too
        (a survivor of compaction; whatever is not on disk there is dead)."""
        if seq > self.base:
            return self.add(seq, position)
        if seq in self.below:
            return False
        self.below[seq] = position
        insort(self.below_seqs, seq)
        self.count += 1
        return True

    def move(self, seq: int, position: int) -> None:
        """A stored entry now lies at ``position`` (its segment was rewritten)."""
        if seq <= self.base:
            self.below[seq] = position  # it is in below_seqs already
        else:
            self.positions[seq - self.base - 1] = position

    def forget(self, seq: int) -> None:
        """A dropped seq is to be stored again (``Strand.replace``): absent, not dead."""
        if seq > self.base:
            self.positions[seq - self.base - 1] = ABSENT

    def drop(self, seq: int) -> None:
        """A stored entry was dropped by compaction: dead from now on."""
        if seq <= self.base:
            if self.below.pop(seq, None) is not None:
                self.count -= 1
                del self.below_seqs[bisect_left(self.below_seqs, seq)]
            return
        i = seq - self.base - 1
        if self.positions[i] >= 0:
            self.count -= 1
        self.positions[i] = DEAD

    def mark_dead(self, first: int, last: int) -> None:
        """Seqs ``first`` to ``last`` that were never seen here are dead: a
        peer dropped them (held once, gone for good). Held ones stay."""
        first = max(first, self.base + 1)
        if last < first:
            return
        if first <= self.contiguous + 1 and last >= self.highest:
            # Everything from the first gap on: the floor moves to ``last`` and
            # the few held above it are kept as survivors, with no slot per
            # seq (a new node passing a long compacted history).
            self._cover_to(last)
            return
        positions = self.positions
        end = last - self.base
        if end > len(positions):
            positions.extend([ABSENT] * (end - len(positions)))
        for i in range(first - self.base - 1, end):
            if positions[i] == ABSENT:
                positions[i] = DEAD
        if first <= self.contiguous + 1:
            self._extend_contiguous()

    def _cover_to(self, last: int) -> None:
        """Every seq above ``base`` up to ``last`` is held or dead, and none above it is held."""
        base = self.base
        for i, position in enumerate(self.positions):
            if position >= 0:
                self.below[base + 1 + i] = position
                self.below_seqs.append(base + 1 + i)
        del self.positions[:]
        self.base = self.contiguous = last

    def lower_base(self, floor: int) -> None:
        """Seqs above ``floor`` are no longer known to be held or dead (a
        file that held some was lost): those not held are absent again, so
        that peers' copies are taken in (repair mode)."""
        if floor >= self.base:
            return
        slots = array("q", [ABSENT]) * (self.base - floor)
        cut = bisect_right(self.below_seqs, floor)
        for seq in self.below_seqs[cut:]:
            slots[seq - floor - 1] = self.below.pop(seq)
        del self.below_seqs[cut:]
        self.positions = slots + self.positions
        self.base = self.contiguous = floor
        self._extend_contiguous()

    def raise_base(self, floor: int) -> None:
        """Seqs up to ``floor`` (at most ``contiguous``) are now all held or
        dead: keep only the survivors' positions among them."""
        floor = min(floor, self.contiguous)
        if floor <= self.base:
            return
        cut = floor - self.base
        for i in range(cut):
            position = self.positions[i]
            if position >= 0:
                self.below[self.base + 1 + i] = position
                self.below_seqs.append(self.base + 1 + i)
        del self.positions[:cut]
        self.base = floor

    def scan(self, after: int, limit: int) -> tuple[list[int], list[tuple[int, int]], int]:
        """From seq ``after + 1`` on: the positions of up to ``limit`` stored
        entries, the dead ranges ``(first, last)`` among them, and the last
        seq covered; stops at the first seq not held."""
        seq = after + 1
        found: list[int] = []
        dead: list[tuple[int, int]] = []
        base, below_seqs = self.base, self.below_seqs
        i = bisect_left(below_seqs, seq)
        while seq <= base and len(found) < limit:
            survivor = below_seqs[i] if i < len(below_seqs) else base + 1
            if survivor > seq:  # seq .. survivor-1 were dropped
                dead.append((seq, survivor - 1))
                seq = survivor
            else:
                found.append(self.below[survivor])
                seq += 1
                i += 1
        positions = self.positions
        while len(found) < limit and seq <= base + len(positions):
            position = positions[seq - base - 1]
            if position == ABSENT:
                break
            if position == DEAD:
                if dead and dead[-1][1] == seq - 1:
                    dead[-1] = (dead[-1][0], seq)
                else:
                    dead.append((seq, seq))
            else:
                found.append(position)
            seq += 1
        return found, dead, seq - 1

    def absent(self, upto: int) -> list[tuple[int, int]]:
        """The ranges ``(first, last)`` of seqs up to ``upto`` never seen here
        (neither held nor dead), ascending."""
        ranges: list[tuple[int, int]] = []
        positions, base = self.positions, self.base
        end = min(upto - base, len(positions))
        i = max(0, self.contiguous - base)
        while i < end:
            try:
                i = positions.index(ABSENT, i, end)
            except ValueError:
                break
            first = i
            while i < end and positions[i] == ABSENT:
                i += 1
            ranges.append((base + 1 + first, base + i))
        if upto > self.highest:
            first = self.highest + 1
            if ranges and ranges[-1][1] == first - 1:
                first = ranges.pop()[0]
            ranges.append((first, upto))
        return ranges

    def _extend_contiguous(self) -> None:
        positions, base = self.positions, self.base
        c = self.contiguous - base
        n = len(positions)
        while c < n and positions[c] != ABSENT:
            c += 1
        self.contiguous = base + c

    @property
    def highest(self) -> int:
        return self.base + len(self.positions)
