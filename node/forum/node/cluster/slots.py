"""Where a key goes: its slot, and the groups in rendezvous order for it.

A key's **slot** is ``crc32(key as UTF-8) mod 16384``. The slot count is fixed
for the cluster's life (Temporal's and Redis Cluster's lesson: re-hashing
every key later means a new cluster); what moves is the slot's group. The
Lens shards with the same hash (``crc32(key) mod S``, S a power of two that
divides 16384: forum.coordinator.keys), so a slot lies in exactly one Lens
shard, and a job's Lens keys never depend on which group holds it.

A slot's groups are ranked by **weighted rendezvous hashing** (HRW): each
group scores ``-weight / ln(u)``, ``u`` a uniform number in (0, 1) drawn from
the slot and the group's id. The slot's owner is chosen with **bounded
loads** (:func:`bounded`): slot by slot, the first group in the slot's order
that holds fewer than its weighted share of the 16384 slots (rounded up). So
every group owns its share to one slot, where plain HRW leaves the largest
of 50 groups 1.11x the mean and of 100 1.19x (a group that much over its
share is past its capacity while the others idle: the simulation,
docs/scaling.md). Adding a group moves about 1/(G+1) of the slots, most to
it (a few spill on as the shares shrink); every client computes the table
from the group list alone, with nothing to agree on. The rest of a slot's
order is where a write falls through to when the owner does not answer.

The draw is a 64-bit mix (splitmix64's finalizer) of the group id's crc32
and the slot: a few integer operations, the same on every platform and in
every Python (``hash()`` is salted per process, so it would not do).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence

#: The slot space: fixed for the cluster's life.
SLOTS = 16384
_MASK = (1 << 64) - 1


def slot_of(key: str | bytes) -> int:
    """The slot of a job key (text is hashed as its UTF-8 bytes)."""
    return zlib.crc32(key.encode() if isinstance(key, str) else key) % SLOTS


def group_seed(group_id: str) -> int:
    """The number a group's draws are made from (its id's crc32)."""
    return zlib.crc32(group_id.encode())


def score(slot: int, seed: int, weight: float) -> float:
    """The rendezvous score of the group with ``seed`` and ``weight`` for
    ``slot``: higher wins."""
    x = (seed * 0x9E3779B97F4A7C15 + slot + 1) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    x ^= x >> 31
    u = ((x >> 11) + 0.5) / (1 << 53)  # in (0, 1): never 0, never 1
    return -weight / math.log(u)


def ranked(slot: int, groups: Iterable[tuple[str, int, float]]) -> list[str]:
    """The ids of ``groups`` (``(id, seed, weight)``) in rendezvous order for
    ``slot``, the owner first; ties (never seen in practice) by id."""
    scored = sorted(
        ((score(slot, seed, weight), gid) for gid, seed, weight in groups), reverse=True
    )
    return [gid for _, gid in scored]


def bounded(draws: Sequence[int], groups: Sequence[tuple[str, int, float]]) -> list[str]:
    """Rendezvous with bounded loads: for each of ``draws`` in order, the
    first group in its rendezvous order that still has room, each group
    having room for its weighted share of the draws, rounded up. Every group
    gets its share (to one), whatever the hashes; the order of ``draws``
    makes it the same answer everywhere."""
    total = sum(weight for _, _, weight in groups)
    room = {gid: math.ceil(len(draws) * weight / total) for gid, _, weight in groups}
    chosen = []
    for draw in draws:
        best = max(groups, key=lambda g: score(draw, g[1], g[2]))[0]
        if room[best] <= 0:  # full: the next in the draw's order with room
            best = next(gid for gid in ranked(draw, groups) if room[gid] > 0)
        room[best] -= 1
        chosen.append(best)
    return chosen


def balanced(workers: Iterable[str], groups: Sequence[tuple[str, int, float]]) -> dict[str, str]:
    """A home group for each of ``workers``: :func:`bounded` rendezvous on
    the workers' ids, so every group has its share of workers however the
    ids hash, and a worker that comes or goes moves few others. Every worker
    that knows the same set of workers computes the same answer."""
    names = sorted(set(workers))
    return dict(zip(names, bounded([zlib.crc32(n.encode()) for n in names], groups), strict=True))
