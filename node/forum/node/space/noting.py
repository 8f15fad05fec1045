"""Noting what this node holds, every half second while its Forum is open.

Each note adds to the :class:`~forum.node.space.arrivals.Arrivals` (when
this node came to hold what) and lets go of the marks no reader needs: the
Forum's live and reserved tuples keep the marks that date them, and another
reader (replication's lag) says what it needs (:data:`ArrivalNeed`). The
notes date each group's oldest live tuple (:meth:`Noting.oldest_ages`) and
replication's lag, with or without peers. A timer, never a cost per entry.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from forum.node.space.arrivals import INTERVAL as NOTE_INTERVAL
from forum.node.space.arrivals import Arrivals, below, lowest
from forum.node.space.index import LiveIndex
from forum.node.space.reservations import Reservations
from forum.node.storage.strand import Strand

log = logging.getLogger(__name__)

#: ``need(held)``: per origin, the seq at or below which a reader of the
#: arrivals (replication's lag) needs only the latest mark, given what this
#: node holds (``held``). See ``Forum.need_arrivals``.
ArrivalNeed = Callable[[Mapping[str, int]], Mapping[str, int]]
#: The most live keys one ``oldest_ages`` call scans (some 20 ms here): a
#: group past it, and past the cheap answers, has no age (forum.node.space.index).
AGE_SCAN = 100_000


class Noting:
    """The notes of one node's vector into ``arrivals``, on a timer from
    :meth:`start` to :meth:`stop`; ``need``: what another reader needs kept."""

    __slots__ = ("_index", "_reservations", "_strand", "_timer", "arrivals", "need")

    def __init__(self, strand: Strand, index: LiveIndex, reservations: Reservations) -> None:
        self.arrivals = Arrivals()
        self.need: ArrivalNeed | None = None
        self._strand = strand
        self._index = index
        self._reservations = reservations
        self._timer: asyncio.TimerHandle | None = None

    @property
    def started(self) -> bool:
        return self._timer is not None

    def start(self) -> None:
        """Note now (the first note dates all the node holds), and every
        :data:`~forum.node.space.arrivals.INTERVAL` seconds from now on."""
        self._note()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def oldest_ages(self, prefixes: Sequence[bytes]) -> dict[bytes, float]:
        """Per prefix, the age in seconds of its live tuple that has been
        live the longest (``Forum.oldest_ages``)."""
        now = time.monotonic()
        ages: dict[bytes, float] = {}
        for prefix, entry_id in self._index.first_arrivals(prefixes, AGE_SCAN).items():
            held = self.arrivals.held_by(entry_id.origin, entry_id.seq)
            ages[prefix] = 0.0 if held is None else max(0.0, now - held)
        return ages

    def _note(self) -> None:
        """Note what this node holds, let go of the marks no reader needs,
        and come back in half a second."""
        try:
            held = self._strand.vector()
            self.arrivals.note(held, time.monotonic())
            tuples = below(
                itertools.chain(
                    self._index.least_seqs(),
                    ((entry_id.origin, entry_id.seq) for entry_id in self._reservations),
                )
            )
            needs = [] if self.need is None else [self.need(held)]
            self.arrivals.forget_below(lowest(held, tuples, *needs))
        except Exception:  # a figure for people: never a reason to stop noting
            log.exception("noting what this node holds failed: ages and lags may be off")
        self._timer = asyncio.get_running_loop().call_later(NOTE_INTERVAL, self._note)
