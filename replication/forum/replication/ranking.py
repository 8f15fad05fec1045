"""Whose turn a tuple written on a peer is: a rank among the live members.

A remote Write waits ``remote_delay`` times this node's rank for it before it
is live here (:mod:`forum.node.space.surfacing` says why: so that one write does
not wake a taker on every node at once). The rank of a tuple ``e`` is its
place in one order of the members this node considers alive::

    writer of e (if alive), then the others by crc32("e/member"), then by name
    rank:     0                 1, 2, ...

Every node computes the same order from the same members, so the nodes that
did not write ``e`` take their turns one ``remote_delay`` apart, each only
after the ones before it had theirs (a Take made in a turn reaches the next
node within the delay), and no two share a turn however many there are.
Another tuple, another hash: the first turn after the writer moves round the
members. A timeline, three live members, ``e`` written on A, B before C::

    t0       A writes e and hands it out if a taker waits; pushes it to B, C
    t0+d     e is live on B (rank 1), unless A's Take came first
    t0+2d    e is live on C (rank 2), unless a Take from A or B came first

**Only members alive count** (:class:`~forum.replication.membership.PeerState`
``ALIVE``; a peer that failed a call is suspect and out until it answers
again), and this node always counts: so no tuple waits on a node that is
down. If the writer is down, the first member after it ranks 0 and hands the
tuple out at once. When a peer stops answering, the replicator calls
:meth:`forum.node.space.forum.Forum.rerank`: tuples already waiting move up to their new
turn (and one whose turn has passed surfaces at once); a peer coming back
never makes a waiting tuple wait longer. Nodes whose views of who is alive
differ for a moment may share a turn: a double take, which the Lens catches,
never a tuple that waits for nobody.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Set

from forum.node.core.entries import EntryId


def _key(entry_id: EntryId, member: str) -> tuple[int, str]:
    return zlib.crc32(f"{entry_id}/{member}".encode()), member


def turn_order(entry_id: EntryId, alive: Set[str]) -> list[str]:
    """The members in ``alive`` (origins) in their turns for ``entry_id``:
    its writer first if alive, then the others by a hash of (id, member)."""
    writer = entry_id.origin
    others = sorted((m for m in alive if m != writer), key=lambda m: _key(entry_id, m))
    return [writer, *others] if writer in alive else others


def rank_among(entry_id: EntryId, me: str, alive: Set[str]) -> int:
    """``me``'s place in :func:`turn_order` of ``alive`` plus ``me`` (counted
    without sorting: this runs for every remote Write)."""
    writer = entry_id.origin
    if me == writer:
        return 0
    # crc32("<id>/<member>") with the id's part hashed once: a CRC runs on,
    # crc32(b, crc32(a)) is crc32(a + b). This runs for every remote Write, so
    # the id is spelt here as str(entry_id) spells it, at half the cost.
    seed = zlib.crc32(f"{writer}:{entry_id.seq}/".encode())
    mine = zlib.crc32(me.encode(), seed)
    ahead = 1 if writer in alive else 0
    for member in alive:
        if member not in (me, writer):
            crc = zlib.crc32(member.encode(), seed)
            ahead += crc < mine or (crc == mine and member < me)
    return ahead


class MemberRanking:
    """A node's :data:`forum.node.space.surfacing.Ranking` from who it considers alive now:
    ``alive()`` gives the origins of the peers alive (this node, ``me``,
    always counts). Installed by the replicator with ``Forum.set_ranking``."""

    def __init__(self, me: str, alive: Callable[[], Set[str]]) -> None:
        self.me = me
        self._alive = alive

    def __call__(self, entry_id: EntryId) -> int:
        return rank_among(entry_id, self.me, self._alive())
