"""When this node came to hold what: marks of its vector, noted on a timer.

Tuples carry no timestamp (a live tuple costs some 125 bytes here, and a
time would add to every one). What the node knows instead is its vector,
each origin's gap-free prefix (``Strand.vector()``: every seq up to it held,
or dropped by compaction). The Forum notes it every :data:`INTERVAL`
seconds (one dict copy, whatever the write rate: a timer, never a cost per
entry); per origin that makes a list of *marks*, one per seq reached::

    (seq, first, last)   "this node held the origin up to seq at each note
                          from first to last" (monotonic seconds; last moves
                          forward at each note that finds the origin there)

Two readers date entries with them:

* **a live tuple** (the Prefixes panel's oldest age: ``Forum.oldest_ages``):
  ``held_by(origin, seq)`` is the ``first`` of the first mark at or above its
  seq, a time by which this node held it. So an age read from it is never
  more than the truth, and short of it by at most one interval (later, if
  marks it needed were let go: see below). A tuple not held at the last
  note (it came since, or waits behind a gap) has no date yet: it is at
  most an interval old.
* **a peer's lag** (forum.replication.lag): the ``last`` of the latest mark below
  the first seq a peer lacks is the latest moment it held all this node held.

Entries held when the node started are dated from its start (its first
note): a node knows nothing of its past runs.

What is kept, so that memory stays bounded: of the marks at or below an
origin's *floor*, only the latest. The floor is the least of what the
readers still need: the seq below the least one of a tuple live or reserved
here (the Forum's, looked at on each note: each origin's first live seq, and
the reservations), and what replication says its lag needs (every peer
heard from holds up to it; a node alone needs none). A tuple waiting
elsewhere meanwhile (not due yet, a peer's before its turn) may have its
marks let go and read younger once live; never older. Past
:data:`MAX_MARKS` marks an origin's older half is thinned, every other mark
dropped: a lag then reads longer by at most the gap, an age shorter. At most
``MAX_MARKS`` marks an origin, three numbers each: some 150 KiB per origin
at worst.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: Seconds between two notes of this node's vector: the marks' resolution.
INTERVAL = 0.5
#: The most marks kept per origin before the older ones are thinned.
MAX_MARKS = 2048


@dataclass(slots=True)
class Marks:
    """One origin's marks: held up to ``seqs[i]`` (gap-free) at every note
    from monotonic ``firsts[i]`` to ``times[i]``."""

    seqs: list[int] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def append(self, seq: int, at: float) -> None:
        self.seqs.append(seq)
        self.firsts.append(at)
        self.times.append(at)

    def drop(self, cut: slice) -> None:
        del self.seqs[cut], self.firsts[cut], self.times[cut]


@dataclass(slots=True)
class Arrivals:
    """When this node came to hold what, as marks per origin (see the module docstring)."""

    #: Monotonic time of the first note (``None``: none yet), and of the last.
    started: float | None = None
    last: float | None = None
    marks: dict[str, Marks] = field(default_factory=dict)

    def note(self, held: Mapping[str, int], now: float) -> None:
        """This node holds, gap-free, each origin up to ``held[origin]`` at ``now``."""
        for origin, seq in held.items():
            marks = self.marks.get(origin)
            if marks is None:
                marks = self.marks[origin] = Marks()
                if self.last is not None:
                    # Unseen at the last note: it held none of it then.
                    marks.append(0, self.last)
            if marks.seqs and marks.seqs[-1] >= seq:
                marks.times[-1] = now  # still there: held up to it until now
            else:
                marks.append(seq, now)
                if len(marks.seqs) > MAX_MARKS:
                    _thin(marks)
        if self.started is None:
            self.started = now
        self.last = now

    def held_by(self, origin: str, seq: int) -> float | None:
        """A monotonic time by which this node held entry ``seq`` of
        ``origin`` (the first note that found it held, as far as the marks
        kept reach back); ``None`` when no note found it held yet."""
        marks = self.marks.get(origin)
        if marks is None:
            return None
        i = bisect.bisect_left(marks.seqs, seq)
        return marks.firsts[i] if i < len(marks.seqs) else None

    def forget_below(self, floors: Mapping[str, int]) -> None:
        """No reader needs to tell apart the seqs of each origin at or below
        ``floors[origin]``: of those marks, only the latest is kept."""
        for origin, floor in floors.items():
            marks = self.marks.get(origin)
            if marks is None:
                continue
            cut = bisect.bisect_right(marks.seqs, floor) - 1
            if cut > 0:
                marks.drop(slice(None, cut))


def lowest(held: Mapping[str, int], *needs: Mapping[str, int]) -> dict[str, int]:
    """Per origin of ``held``, the least of it and of each of ``needs`` (an
    origin a need does not name it does not hold back)."""
    low = dict(held)
    for need in needs:
        for origin, seq in need.items():
            if origin in low and seq < low[origin]:
                low[origin] = seq
    return low


def below(seqs: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Per origin, the seq just below the least of ``seqs`` (``(origin, seq)``
    pairs): the floor that keeps the marks that date each of them."""
    floors: dict[str, int] = {}
    for origin, seq in seqs:
        if seq - 1 < floors.get(origin, seq):
            floors[origin] = seq - 1
    return floors


def _thin(marks: Marks) -> None:
    """Drop every other mark of the older half (the first kept): an old
    lag then reads longer by at most the gap, never shorter; an age shorter,
    never longer."""
    half = len(marks.seqs) // 2
    marks.drop(slice(1, half, 2))
