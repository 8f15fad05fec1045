"""Replication lag in seconds: how long ago a peer last held all this node held then.

``behind`` counts the entries a peer lacks; it does not say whether they
are a second old or an hour. The lag does::

    lag(P) = now - T, where T is the latest moment at which P held every
             entry this node held at that moment; 0 when P holds all this
             node holds now

that is, the age of the oldest entry this node holds that P lacks, aged
from when this node came to hold it. "Holds" is the gap-free prefix of each
origin (``Strand.vector()``: every seq up to it held, or dropped by
compaction), and what P holds is its vector as this node last heard it
(``membership.Peer.vector``: pushes' acknowledgements and anti-entropy
rounds), so a peer this node has not heard from lags more and more while
entries arrive here, whatever it holds by now. A peer never heard from has
no lag (``None``).

When this node came to hold what is the node's own record
(:class:`forum.node.space.arrivals.Arrivals`: marks of its vector, noted by the Forum
every half second, which also date the Prefixes panel's oldest tuples):
for a peer whose first missing seq of an origin is ``s``, the latest mark
below ``s`` is the latest moment it held all of that origin this node held;
``T`` is the earliest of those over the origins. So the lag is exact to one
interval, and never under: a peer caught up within the interval shows at
most that much. Entries held when the node started are dated from its
start (a peer that lacks one lags "since this node started").

Marks nobody needs are let go: the replicator tells the Forum
(``Forum.need_arrivals``) that of the seqs every peer heard from holds,
only the latest mark is needed for the lag (:func:`floors`). A peer that
stays down keeps the marks of what arrived since (one per interval per
origin written to); past ``MAX_MARKS`` an origin's older half is thinned,
which can only make an old lag read longer, by at most the gap it leaves.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

from forum.node.space.arrivals import Arrivals
from forum.replication.vector import VersionVector


def lag(arrivals: Arrivals, peer: VersionVector, held: Mapping[str, int], now: float) -> float:
    """Seconds since ``peer`` (its last heard vector) last held all this
    node held then, ``held`` being what it holds now; 0 when it holds it all."""
    since = now
    for origin, seq in held.items():
        missing = next(peer.missing(origin, seq), None)
        if missing is None:
            continue
        marks = arrivals.marks.get(origin)
        first = missing[0]
        # The latest mark below the first seq it lacks: it held all of that.
        i = 0 if marks is None else bisect.bisect_left(marks.seqs, first)
        if marks is None or i == 0:
            started = arrivals.started
            return max(0.0, now - (started if started is not None else now))
        since = min(since, marks.times[i - 1])
    return max(0.0, now - since)


def floors(held: Mapping[str, int], peers: Iterable[VersionVector]) -> dict[str, int]:
    """Per origin, what this node and every one of ``peers`` hold gap-free."""
    low = dict(held)
    for vector in peers:
        for origin, seq in low.items():
            low[origin] = min(seq, vector.contiguous.get(origin, 0))
    return low
