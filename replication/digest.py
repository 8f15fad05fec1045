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
its last pass, :mod:`node.compaction`), at different times on different
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
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from node.codec import encode_entry
from node.entries import Entry
from node.strand import Strand

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

    def set(self, index: int, value: int) -> None:
        old = self.hashes[index]
        if old:
            self.count -= 1
            self.xor ^= old
        self.hashes[index] = value
        self.count += 1
        self.xor ^= value

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


class Digests:
    """Per origin, the hashes of the entries held above the floor, by block."""

    def __init__(self, strand: Strand) -> None:
        self._strand = strand
        self._origins: dict[str, dict[int, _Block]] = {}
        self._floors: dict[str, int] = {}
        #: False until :meth:`build` has read the Strand: no digest is offered before.
        self.ready = False

    async def build(self) -> None:
        """Hash what the Strand holds above each origin's floor (the entries
        the listener saw meanwhile are hashed again, to the same value)."""
        strand = self._strand
        floors = strand.floors()
        for origin, held in sorted(strand.vector().items()):
            after = floors.get(origin, 0)
            while after < held:
                page = await strand.read_page(origin, after, _READ_CHUNK)
                self.add(page.entries)
                if page.upto <= after:
                    break
                after = page.upto
                await asyncio.sleep(0)  # a large Strand does not stall the loop
        self.ready = True

    def add(self, entries: Iterable[Entry]) -> None:
        """Note entries now held here (new ones, or replacements)."""
        floors = self._strand.floors()
        for entry in entries:
            origin, seq = entry.id.origin, entry.id.seq
            if seq <= floors.get(origin, 0):
                continue  # never compared: below the floor
            blocks = self._origins.get(origin)
            if blocks is None:
                blocks = self._origins[origin] = {}
            number, index = divmod(seq - 1, BLOCK)
            block = blocks.get(number)
            if block is None:
                block = blocks[number] = _Block()
            block.set(index, entry_hash(entry))

    def prune(self) -> None:
        """Let go of the blocks wholly at or below their origin's floor (once
        per change of the floors)."""
        floors = self._strand.floors()
        if floors == self._floors:
            return
        self._floors = floors
        for origin, floor in floors.items():
            blocks = self._origins.get(origin)
            if blocks:
                for number in [n for n in blocks if (n + 1) * BLOCK <= floor]:
                    del blocks[number]

    def floor(self, origin: str) -> int:
        return self._strand.floors().get(origin, 0)

    def range(self, origin: str, lo: int, upto: int) -> RangeDigest:
        """The digest of ``origin``'s seqs ``lo + 1 .. upto`` held here."""
        count = xor = 0
        for _, c, x in self.blocks(origin, lo, upto):
            count += c
            xor ^= x
        return RangeDigest(lo, upto, count, xor)

    def blocks(self, origin: str, lo: int, upto: int) -> list[BlockDigest]:
        """Per block touching ``lo + 1 .. upto`` (ascending), the digest of
        its seqs in that range; blocks with nothing held are left out."""
        self.prune()
        blocks = self._origins.get(origin)
        if not blocks or upto <= lo:
            return []
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
