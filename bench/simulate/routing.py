"""Slots, rendezvous and homes: Forum's own (forum.node.cluster.slots), on
the simulation's integer group ids (group ``n`` is ``"g<n>"`` to them).

``slot = crc32(key) % 16384``; a slot's groups in weighted rendezvous order,
its owner the first of them, or with bounded loads (:class:`SlotTable`, as
``ClusterMap.owner`` does) the first that holds fewer than its share of the
slots; a worker's home by rendezvous on its id, or balanced over the workers
(``forum.node.cluster.slots.balanced``, as ``ClusterClient.balance`` does).
"""

from __future__ import annotations

import bisect
import random
import zlib

from forum.node.cluster import slots as forum_slots
from forum.node.cluster.slots import SLOTS, group_seed, slot_of

__all__ = ["SLOTS", "SlotTable", "Zipf", "balanced", "name_hash", "ranked", "score", "slot_of"]

_SEEDS: dict[int, int] = {}


def _seed(group: int) -> int:
    seed = _SEEDS.get(group)
    if seed is None:
        seed = _SEEDS[group] = group_seed(f"g{group}")
    return seed


def _groups(
    groups: list[int], weights: dict[int, float] | None = None
) -> list[tuple[str, int, float]]:
    w = weights or {}
    return [(str(g), _seed(g), w.get(g, 1.0)) for g in groups]


def score(item: int, group: int, weight: float = 1.0) -> float:
    """Weighted rendezvous: ``-weight / ln(u)`` (forum.node.cluster.slots.score)."""
    return forum_slots.score(item, _seed(group), weight)


def ranked(item: int, groups: list[int], weights: dict[int, float] | None = None) -> list[int]:
    """``groups`` in rendezvous order for ``item``, the owner first."""
    return [int(g) for g in forum_slots.ranked(item, _groups(groups, weights))]


def balanced(workers: list[str], groups: list[int]) -> dict[str, int]:
    """Each worker's home, balanced as Forum's workers are."""
    return {w: int(g) for w, g in forum_slots.balanced(workers, _groups(groups)).items()}


def name_hash(name: str) -> int:
    return zlib.crc32(name.encode())


class SlotTable:
    """Each slot's first three groups, for one map: its owner (plain
    rendezvous, or with bounded loads as ``ClusterMap.owner``), then the
    rest in rendezvous order; computed on first use of a slot (bounded: all
    at once, a second at G=100, as a client does once per map)."""

    def __init__(self, groups: list[int], bounded: bool = False) -> None:
        self.groups = list(groups)
        self._order: dict[int, list[int]] = {}
        self._owner: list[int] = []
        if bounded:
            owners = forum_slots.bounded(range(SLOTS), _groups(self.groups))
            self._owner = [int(g) for g in owners]

    def order(self, slot: int) -> list[int]:
        found = self._order.get(slot)
        if found is None:
            order = ranked(slot, self.groups)
            if self._owner:
                owner = self._owner[slot]
                order = [owner, *(g for g in order if g != owner)]
            found = self._order[slot] = order[:3]
        return found


class Zipf:
    """Ranks 0..n-1 with P(k) proportional to 1/(k+1)^s (s=0: uniform),
    by inverse CDF over a table."""

    def __init__(self, n: int, s: float) -> None:
        weights = [1.0 / (k + 1) ** s for k in range(n)]
        total = sum(weights)
        acc = 0.0
        self.cdf: list[float] = []
        for w in weights:
            acc += w / total
            self.cdf.append(acc)

    def sample(self, rng: random.Random) -> int:
        return min(bisect.bisect_left(self.cdf, rng.random()), len(self.cdf) - 1)
