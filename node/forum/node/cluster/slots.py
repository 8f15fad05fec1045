"""Where a key goes: its slot, and the groups in rendezvous order for it.

A key's **slot** is ``crc32(key as UTF-8) mod 16384``. The slot count is fixed
for the cluster's life (Temporal's and Redis Cluster's lesson: re-hashing
every key later means a new cluster); what moves is the slot's group. The
Lens shards with the same hash (``crc32(key) mod S``, S a power of two that
divides 16384: forum.coordinator.keys), so a slot lies in exactly one Lens
shard, and a job's Lens keys never depend on which group holds it.

A slot's groups are ranked by **weighted rendezvous hashing** (HRW): each
group scores ``-weight / ln(u)``, ``u`` a uniform number in (0, 1) drawn from
the slot and the group's id, and the highest score owns the slot. Adding a
group moves the slots it now wins (about 1/(G+1) of them) and nothing else;
a group's share of slots is its share of the weights; every client ranks
from the group list alone, with no table to agree on. The next groups in the
order are where a write falls through to when the owner does not answer.

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


def balanced(workers: Iterable[str], groups: Sequence[tuple[str, int, float]]) -> dict[str, str]:
    """A home group for each of ``workers``: rendezvous on the worker's id
    with bounded loads (each group takes at most its weighted share of the
    workers, rounded up), so every group has its share of workers however
    the ids hash, and a worker that comes or goes moves few others. Every
    worker that knows the same set of workers computes the same answer."""
    names = sorted(set(workers))
    total = sum(weight for _, _, weight in groups)
    room = {gid: math.ceil(len(names) * weight / total) for gid, _, weight in groups}
    homes: dict[str, str] = {}
    for name in names:
        for gid in ranked(zlib.crc32(name.encode()), groups):
            if room[gid] > 0:
                room[gid] -= 1
                homes[name] = gid
                break
    return homes
