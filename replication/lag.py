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

How it is kept, off the replication path: every :data:`INTERVAL` seconds
the replicator notes this node's vector (one dict copy, whatever the write
rate). Per origin that makes a list of *marks* ``(seq, at)``: "at ``at``,
this node held the origin up to ``seq``", one per seq reached, its time
moved forward at each note that finds the origin where it was. For a peer
whose first missing seq of an origin is ``s``, the latest mark below ``s``
is the latest moment it held all of that origin this node held; ``T`` is
the earliest of those over the origins. So the lag is exact to one
interval, and never under: a peer caught up within the interval shows at
most that much. Entries held when the node started are dated from its
start (a peer that lacks one lags "since this node started").

Marks nobody needs are let go: of the seqs every peer heard from holds,
only the latest mark is kept. A peer that stays down keeps the marks of
what arrived since (one per interval per origin written to); past
:data:`MAX_MARKS` an origin's older half is thinned, every other mark
dropped, which can only make an old lag read longer, by at most the gap
it leaves.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from replication.vector import VersionVector

#: Seconds between two notes of this node's vector: the lag's resolution.
INTERVAL = 0.5
#: The most marks kept per origin before the older ones are thinned.
MAX_MARKS = 2048


@dataclass(slots=True)
class _Marks:
    """One origin's marks: ``seqs[i]`` held (gap-free) at monotonic ``times[i]``."""

    seqs: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)


@dataclass(slots=True)
class Arrivals:
    """When this node came to hold what, as marks per origin (see the module docstring)."""

    #: Monotonic time of the first note (``None``: none yet), and of the last.
    started: float | None = None
    last: float | None = None
    marks: dict[str, _Marks] = field(default_factory=dict)

    def note(self, held: Mapping[str, int], now: float) -> None:
        """This node holds, gap-free, each origin up to ``held[origin]`` at ``now``."""
        for origin, seq in held.items():
            marks = self.marks.get(origin)
            if marks is None:
                marks = self.marks[origin] = _Marks()
                if self.last is not None:
                    # Unseen at the last note: it held none of it then.
                    marks.seqs.append(0)
                    marks.times.append(self.last)
            if marks.seqs and marks.seqs[-1] >= seq:
                marks.times[-1] = now  # still there: held up to it until now
            else:
                marks.seqs.append(seq)
                marks.times.append(now)
                if len(marks.seqs) > MAX_MARKS:
                    _thin(marks)
        if self.started is None:
            self.started = now
        self.last = now

    def lag(self, peer: VersionVector, held: Mapping[str, int], now: float) -> float:
        """Seconds since ``peer`` (its last heard vector) last held all this
        node held then, ``held`` being what it holds now; 0 when it holds it all."""
        since = now
        for origin, seq in held.items():
            missing = next(peer.missing(origin, seq), None)
            if missing is None:
                continue
            marks = self.marks.get(origin)
            first = missing[0]
            # The latest mark below the first seq it lacks: it held all of that.
            i = 0 if marks is None else bisect.bisect_left(marks.seqs, first)
            if marks is None or i == 0:
                return max(0.0, now - (self.started if self.started is not None else now))
            since = min(since, marks.times[i - 1])
        return max(0.0, now - since)

    def forget_below(self, floors: Mapping[str, int]) -> None:
        """Every peer that counts holds each origin up to ``floors[origin]``:
        of the marks at or below it, only the latest is still needed."""
        for origin, floor in floors.items():
            marks = self.marks.get(origin)
            if marks is None:
                continue
            cut = bisect.bisect_right(marks.seqs, floor) - 1
            if cut > 0:
                del marks.seqs[:cut], marks.times[:cut]


def floors(held: Mapping[str, int], peers: Iterable[VersionVector]) -> dict[str, int]:
    """Per origin, what this node and every one of ``peers`` hold gap-free."""
    low = dict(held)
    for vector in peers:
        for origin, seq in low.items():
            low[origin] = min(seq, vector.contiguous.get(origin, 0))
    return low


def _thin(marks: _Marks) -> None:
    """Drop every other mark of the older half (the first kept): an old
    lag then reads longer by at most the gap, never shorter."""
    half = len(marks.seqs) // 2
    del marks.seqs[1:half:2], marks.times[1:half:2]
