"""The compaction horizon: per origin, what every member of the cluster holds.

A Write and its Take may be dropped once every member holds both
(docs/replication.md, "Compaction"). So the horizon of an origin is the
minimum, over this node and every member it knows, of the seq up to which
that member holds the origin without a gap (its version vector's
``contiguous``, as last heard)::

    horizon[o] = min(mine[o], min(member[o] for each member not forgotten))

A member whose vector was never heard (a seed that never answered, a peer
only named in a member list) could hold anything: it holds every origin back
to 0. A member not heard from for ``forget_after`` seconds is *forgotten*
and holds nothing back (:class:`~forum.replication.membership.Membership` says
which); when it comes back it is caught up from pages whose dead ranges kill
its stale copies (:mod:`forum.replication.antientropy`).

What a member holds back is measured against this node's own vector: the
seqs this node holds that the member lacks, summed over origins (all of them
for an unknown vector), which is how far the horizon would stand below this
node's vector if that member were the only one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: A member's contiguous vector as last heard; ``None``: never heard.
Held = Mapping[str, int] | None


def horizon(mine: Mapping[str, int], members: Iterable[Held]) -> dict[str, int]:
    """Per origin of ``mine``, the minimum of ``mine`` and each member's hold."""
    stable = dict(mine)
    for held in members:
        if held is None:
            return dict.fromkeys(mine, 0)
        for origin, seq in stable.items():
            stable[origin] = min(seq, held.get(origin, 0))
    return stable


def holds_back(mine: Mapping[str, int], held: Held) -> int:
    """How many seqs held here (per origin, summed) the member does not hold."""
    if held is None:
        return sum(mine.values())
    return sum(max(0, seq - held.get(origin, 0)) for origin, seq in mine.items())
