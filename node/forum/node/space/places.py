"""Where a tuple not dead can be on a node: the one answer.

A tuple whose Write is here and that no Take killed is in exactly one
:class:`Place` at a time (an aired pooled tuple is in the index, and the
pool only orders its takes). Whatever must find a tuple wherever it is (an
expiry, a peer's Take, compaction's survivors, a peer's dead ranges, a
replaced copy) asks :meth:`Places.where`, walks :meth:`Places.ids`, or
takes it out with :meth:`Places.remove`, and matches on the :class:`Place`
with ``assert_never`` for the rest: a place added here is one every such
caller must handle before mypy passes.

Not places, though they hold ids: the dedup table (a key's window names the
id it answers with, whatever became of that tuple), the kept properties and
the lapses (about tuples that are in a place), the pending kills (Takes whose
Write has not come) and the entries being applied (on their way to the Strand).
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from typing import assert_never

from forum.node.core.entries import EntryId, Tuple
from forum.node.space.index import LiveIndex
from forum.node.space.reservations import Reservations
from forum.node.space.schedule import Schedule
from forum.node.space.surfacing import Pool, Surfacing


class Place(enum.Enum):
    """A place a tuple not dead can be in."""

    #: Live: in the index (aired pooled tuples too).
    INDEX = "index"
    #: Reserved for a lease, out of the index.
    RESERVED = "reserved"
    #: A peer's tuple waiting for its turn here.
    SURFACING = "surfacing"
    #: A peer's tuple held in the pool after its turn (not live yet).
    POOL = "pool"
    #: Not due yet, in the schedule.
    SCHEDULE = "schedule"
    #: A pause marker: a Write kept for the pause it says.
    PAUSE = "pause"
    #: Out of the index while its Take is made durable here.
    TAKING = "taking"


class Places:
    """The containers of the places, one per :class:`Place` (the Forum
    owns them and passes them in): which holds a tuple, and what they hold."""

    __slots__ = ("index", "pause", "pool", "reserved", "schedule", "surfacing", "taking")

    def __init__(
        self,
        *,
        index: LiveIndex,
        reserved: Reservations,
        surfacing: dict[EntryId, Surfacing],
        pool: Pool,
        schedule: Schedule,
        pause: dict[EntryId, bytes],
        taking: set[EntryId],
    ) -> None:
        self.index = index
        self.reserved = reserved
        self.surfacing = surfacing
        self.pool = pool
        self.schedule = schedule
        self.pause = pause
        self.taking = taking

    def where(self, entry_id: EntryId) -> Place | None:
        """The place ``entry_id`` is in here; ``None``: none (dead, or not here yet)."""
        if entry_id in self.index:
            return Place.INDEX
        if entry_id in self.reserved:
            return Place.RESERVED
        if entry_id in self.surfacing:
            return Place.SURFACING
        if entry_id in self.pool:
            return Place.POOL
        if entry_id in self.schedule:
            return Place.SCHEDULE
        if entry_id in self.pause:
            return Place.PAUSE
        if entry_id in self.taking:
            return Place.TAKING
        return None

    def remove(self, entry_id: EntryId) -> Tuple | None:
        """Take a tuple out of wherever it is waiting or live (not being
        taken: that is left to the take; a pause marker ends by a Take):
        the tuple as its place held it, or ``None``."""
        place = self.where(entry_id)
        match place:
            case Place.INDEX:  # an aired pooled tuple leaves the pool too
                removed = self.index.remove_id(entry_id)
                self.pool.pop(entry_id)
                return None if removed is None else removed[1]
            case Place.SURFACING | Place.POOL:
                waiting = self.surfacing.pop(entry_id, None) or self.pool.pop(entry_id)
                if waiting is None:
                    return None
                waiting.handle.cancel()
                return waiting.item
            case Place.RESERVED:
                reservation = self.reserved.pop(entry_id)
                return None if reservation is None else reservation[1]
            case Place.SCHEDULE:
                return self.schedule.drop(entry_id)
            case Place.PAUSE | Place.TAKING | None:
                return None
            case _:
                assert_never(place)

    def of(self, place: Place) -> Collection[EntryId]:
        """The ids in ``place`` (aired pooled tuples are in :attr:`Place.INDEX`
        and :attr:`Place.POOL` alike: the one place that overlaps)."""
        match place:
            case Place.INDEX:
                return self.index.ids()
            case Place.RESERVED:
                return list(self.reserved)
            case Place.SURFACING:
                return self.surfacing.keys()
            case Place.POOL:
                return list(self.pool)
            case Place.SCHEDULE:
                return self.schedule.ids()
            case Place.PAUSE:
                return self.pause.keys()
            case Place.TAKING:
                return self.taking

    def count(self, place: Place) -> int:
        """How many ids are in ``place`` (without listing them)."""
        match place:
            case Place.INDEX:
                return len(self.index)
            case Place.RESERVED:
                return len(self.reserved)
            case Place.SURFACING:
                return len(self.surfacing)
            case Place.POOL:
                return len(self.pool)
            case Place.SCHEDULE:
                return len(self.schedule)
            case Place.PAUSE:
                return len(self.pause)
            case Place.TAKING:
                return len(self.taking)

    def ids(self) -> list[EntryId]:
        """Every id in some place, once or (aired pooled tuples) twice."""
        return [entry_id for place in Place for entry_id in self.of(place)]

    def __len__(self) -> int:
        """How many :meth:`ids` there are."""
        return sum(self.count(place) for place in Place)
