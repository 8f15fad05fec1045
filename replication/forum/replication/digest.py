"""Content digests of each origin's entries, kept as they arrive, for anti-entropy to compare.

A version vector says how far a node holds each origin, not what it holds:
two nodes with equal vectors may hold different bytes under one id (a push
forged with the cluster key, a buggy peer), and nothing would look again.
So each node keeps, per origin, a 64-bit hash of each entry it holds
(BLAKE2b of the entry's encoding, the bytes the Strand stores and peers
send), in blocks of :data:`BLOCK` seqs. The digest of a range of seqs is
``(count, xor)`` over the hashes of the entries held in it: order-free,
and kept up to date for the cost of one hash per new entry; a block's is
cached, so a round compares a range in one step per block touched (most
rounds: one number against one number).

Compaction drops entries at or below their origin's floor (the horizon of
its last pass, :mod:`forum.node.storage.compaction`), at different times on different
nodes; above the floor nothing is ever dropped. So two nodes compare only
seqs above both their floors, ``(lo, upto]``, where each holds every seq:
equal content gives equal digests whatever either compacted. Hashes at or
below this node's floor are let go (:meth:`Digests.prune`): the table holds
what is above the floor, the size of the Strand's tail, not its history.

Built from the Strand when replication starts (:meth:`Digests.build`, a
read of what is above the floors), then fed by the Forum's listener.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from forum.node.core.codec import encode_entry
from forum.node.core.entries import Entry
from forum.node.core.errors import StrandError
from forum.node.storage.strand import Strand

log = logging.getLogger(__name__)

#: Seqs per block: the unit a mismatch is narrowed down to and rechecked.
BLOCK = 256
#: Entries read from the Strand at a time while building.
_READ_CHUNK = 512

#: ``(block, count, xor)``: the digest of one block's seqs within a range.
BlockDigest = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class RangeDigest:
    """What a node holds of one origin's seqs ``lo + 1 .. upto``: how many
    entries, and the XOR of their hashes."""

    lo: int
    upto: int
    count: int
    xor: int


def entry_hash(entry: Entry) -> int:
    """The 64-bit hash of an entry's encoding; never 0 (0 marks "none")."""
    digest = hashlib.blake2b(encode_entry(entry), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


class _Block:
    __slots__ = ("count", "hashes", "xor")

    def __init__(self) -> None:
        self.hashes = array("Q", bytes(8 * BLOCK))
        self.count = 0
        self.xor = 0

    def set(self, index: int, value: int) -> tuple[int, int]:
        """Put ``value`` at ``index``; the change of ``(count, xor)``."""
        old = self.hashes[index]
        self.hashes[index] = value
        self.count += not old
        change = old ^ value
        self.xor ^= change
        return int(not old), change

    def part(self, first: int, last: int) -> tuple[int, int]:
        """``(count, xor)`` of the hashes at indexes ``first..last``."""
        if first == 0 and last == BLOCK - 1:
            return self.count, self.xor
        count = xor = 0
        for value in self.hashes[first : last + 1]:
            if value:
                count += 1
                xor ^= value
        return count, xor


class _Origin:
    """One origin's blocks, and their sum: a range that covers every block
    held (the usual case: a peer caught up) is read in one step."""

    __slots__ = ("blocks", "count", "high", "low", "xor")

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.count = self.xor = 0
        self.low = self.high = -1  # the lowest and highest block numbers held

    def set(self, seq: int, value: int) -> None:
        number, index = divmod(seq - 1, BLOCK)
        block = self.blocks.get(number)
        if block is None:
            block = self.blocks[number] = _Block()
            self.low = number if self.low < 0 else min(self.low, number)
            self.high = max(self.high, number)
        count, change = block.set(index, value)
        self.count += count
        self.xor ^= change

    def drop_below(self, floor: int) -> None:
        """Let go of the blocks wholly at or below ``floor``."""
        for number in [n for n in self.blocks if (n + 1) * BLOCK <= floor]:
            block = self.blocks.pop(number)
            self.count -= block.count
            self.xor ^= block.xor
        self.low = min(self.blocks, default=-1)
        self.high = max(self.blocks, default=-1)

    def outside(self, lo: int, upto: int) -> tuple[int, int]:
        """``(count, xor)`` of what the first and last blocks hold outside
        ``lo + 1 .. upto``, when every block held touches that range."""
        count = xor = 0
        first, last = lo // BLOCK, (upto - 1) // BLOCK
        if first in self.blocks and lo > first * BLOCK:
            count, xor = self.blocks[first].part(0, lo - first * BLOCK - 1)
        if last in self.blocks and upto < (last + 1) * BLOCK:
            c, x = self.blocks[last].part(upto - last * BLOCK, BLOCK - 1)
            count, xor = count + c, xor ^ x
        return count, xor


class Digests:
    """Per origin, the hashes of the entries held above the floor, by block."""

    def __init__(self, strand: Strand) -> None:
        self._strand = strand
        self._origins: dict[str, _Origin] = {}
        self._floors: dict[str, int] = {}
        #: False until :meth:`build` has read the Strand: no digest is offered before.
        self.ready = False

    async def build(self) -> None:
        """Hash what the Strand holds above each origin's floor (the entries
        the listener saw meanwhile are hashed again, to the same value). If
        the Strand cannot be read, no digest is offered (said once): the
        rounds compare vectors alone."""
        strand = self._strand
        floors = strand.floors()
        try:
            for origin, held in sorted(strand.vector().items()):
                after = floors.get(origin, 0)
                while after < held:
                    page = await strand.read_page(origin, after, _READ_CHUNK)
                    self.add(page.entries)
                    if page.upto <= after:
                        break
                    after = page.upto
                    await asyncio.sleep(0)  # a large Strand does not stall the loop
        except StrandError as exc:
            log.error("digests: cannot read the Strand (%s); content is not compared", exc)
            return
        self.ready = True

    def add(self, entries: Iterable[Entry]) -> None:
        """Note entries now held here (new ones, or replacements)."""
        floors = self._strand.floors()
        for entry in entries:
            origin, seq = entry.id.origin, entry.id.seq
            if seq <= floors.get(origin, 0):
                continue  # never compared: below the floor
            held = self._origins.get(origin)
            if held is None:
                held = self._origins[origin] = _Origin()
            held.set(seq, entry_hash(entry))

    def prune(self) -> None:
        """Let go of the blocks wholly at or below their origin's floor (once
        per change of the floors)."""
        floors = self._strand.floors()
        if floors == self._floors:
            return
        self._floors = floors
        for origin, floor in floors.items():
            held = self._origins.get(origin)
            if held is not None and held.low >= 0 and (held.low + 1) * BLOCK <= floor:
                held.drop_below(floor)

    def floor(self, origin: str) -> int:
        return self._strand.floors().get(origin, 0)

    def range(self, origin: str, lo: int, upto: int) -> RangeDigest:
        """The digest of ``origin``'s seqs ``lo + 1 .. upto`` held here: the
        origin's sum less the ends of its first and last blocks when the
        range spans every block held, else block by block."""
        self.prune()
        held = self._origins.get(origin)
        if held is None or upto <= lo or held.low < 0:
            return RangeDigest(lo, upto, 0, 0)
        if lo // BLOCK <= held.low and held.high <= (upto - 1) // BLOCK:
            count, xor = held.outside(lo, upto)
            return RangeDigest(lo, upto, held.count - count, held.xor ^ xor)
        count = xor = 0
        for _, c, x in self.blocks(origin, lo, upto):
            count += c
            xor ^= x
        return RangeDigest(lo, upto, count, xor)

    def blocks(self, origin: str, lo: int, upto: int) -> list[BlockDigest]:
        """Per block touching ``lo + 1 .. upto`` (ascending), the digest of
        its seqs in that range; blocks with nothing held are left out."""
        self.prune()
        held = self._origins.get(origin)
        if held is None or upto <= lo:
            return []
        blocks = held.blocks
        first_block, last_block = lo // BLOCK, (upto - 1) // BLOCK
        if last_block - first_block + 1 > len(blocks):
            numbers: Sequence[int] = sorted(n for n in blocks if first_block <= n <= last_block)
        else:
            numbers = range(first_block, last_block + 1)
        found: list[BlockDigest] = []
        for number in numbers:
            block = blocks.get(number)
            if block is None:
                continue
            start = number * BLOCK  # seq start + 1 is index 0
            first = max(lo - start, 0)
            last = min(upto - start, BLOCK) - 1
            count, xor = block.part(first, last)
            if count:
                found.append((number, count, xor))
        return found
