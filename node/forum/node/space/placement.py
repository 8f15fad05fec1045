"""Where a Write with properties goes when it comes to a node.

A Write's properties (:class:`~forum.node.core.entries.Properties`,
docs/scheduling.md) are applied alike for local and remote Writes: a tuple
not due yet waits in the :class:`~forum.node.space.schedule.Schedule`, out
of the index; one whose expiry comes is removed wherever it is, without a
Take (the Forum's ``_on_expiry``); its priority orders the index; a pause
marker pauses the takes of its prefix
(:class:`~forum.node.space.admission.Admission`); a dedup key opens a window
in the :class:`~forum.node.space.dedup.DedupTable`. A tuple whose Write has
more than a priority keeps its Properties in the
:class:`~forum.node.space.kept_properties.KeptProperties` until it is dead.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

from forum.node.core.entries import PLAIN, Properties, Tuple, Write
from forum.node.core.write_options import is_priority_alone
from forum.node.space.dedup import DedupTable
from forum.node.space.kept_properties import KeptProperties
from forum.node.space.schedule import Clock, Schedule


class Placement:
    """Places tuples with properties: keeps their Properties (``props``),
    times them in the schedule, opens dedup windows, and hands pause markers
    to ``add_pause`` and what is live now to ``add_live`` (the Forum's).

    Local writes with an expiry (and maybe a priority) and nothing else
    share one *run* in the schedule's timetable while a burst of them shares
    its Properties: the last such Properties, and the run their expiries are
    appended to (PLAIN: none is open)."""

    __slots__ = (
        "_add_live",
        "_add_pause",
        "_clock",
        "_dedup",
        "_expiring",
        "_expiring_run",
        "_origin",
        "_schedule",
        "props",
    )

    def __init__(
        self,
        *,
        origin: str,
        props: KeptProperties,
        schedule: Schedule,
        dedup: DedupTable,
        clock: Clock,
        add_live: Callable[[Tuple], None],
        add_pause: Callable[[Tuple], None],
    ) -> None:
        self._origin = origin
        self.props = props
        self._schedule = schedule
        self._dedup = dedup
        self._clock = clock
        self._add_live = add_live
        self._add_pause = add_pause
        self._expiring = PLAIN
        self._expiring_run: array[int] = array("Q")

    def make_live(self, writes: list[Write]) -> None:
        """Local writes, durable and sharing their Properties: live, or
        waiting (due later)."""
        props = writes[0].props
        if props is PLAIN:
            for entry in writes:
                self._add_live(Tuple(entry.id, entry.payload))
        elif (props is self._expiring and props.expires > self._clock() * 1000) or (
            props.expires and self._expiry_run_for(props)
        ):
            # An expiry (and maybe a priority) alone, live now: what place
            # does, inline, each expiry appended to the open run. (An int of
            # ms is later than the clock's ms exactly when later than its time.)
            kept, run = self.props, self._expiring_run
            lane = kept.get(self._origin)
            if lane is None:
                lane = kept[self._origin] = {}
            for entry in writes:
                entry_id = entry.id
                lane[entry_id.seq] = props
                run.append(entry_id.seq)
                self._add_live(Tuple(entry_id, entry.payload, props))
        elif is_priority_alone(props):  # what place does for them: the index keeps it all
            for entry in writes:
                self._add_live(Tuple(entry.id, entry.payload, props))
        else:
            now = self._schedule.now_ms()
            for entry in writes:
                props = entry.props
                if props.dedup_until and props.key is not None:
                    self._dedup.add(props.key, entry.id, props.dedup_until)
                placed = self.place(Tuple(entry.id, entry.payload, props), now)
                if placed is not None:
                    self._add_live(placed)

    def _expiry_run_for(self, props: Properties) -> bool:
        """Whether local writes with ``props`` (not the open run's) expire and
        have no other property but a priority, and are live now; if so,
        their run is open (``Schedule.expire_run``): one triple in the
        timetable for them all, while the writes of a burst share ``props``
        and nothing else is timed for expiry meanwhile."""
        if props.due or props.key is not None or props.pause:
            return False
        expires = props.expires
        if expires <= self._schedule.now_ms():  # none, or expired before it got here
            return False
        self._expiring_run = self._schedule.expire_run(self._origin, expires)
        self._expiring = props
        return True

    def place(self, item: Tuple, now: int) -> Tuple | None:
        """Where a tuple with properties goes: a pause marker among the
        pauses, an expired one nowhere, one not due yet to the schedule;
        ``item`` back if it is live now (the caller makes it so)."""
        props = item.props
        if props.pause:
            self._add_pause(item)
            return None
        if props.expires and props.expires <= now:
            return None  # expired before it got here: never live
        if props.due or props.expires or props.key is not None:
            self.props.keep(item.id, props)  # a priority alone the index keeps
        if props.expires:
            self._expiring = PLAIN  # the open run ends: this time comes after its ids
            self._schedule.expire_at(item.id, props.expires)
        if props.due > now:
            self._schedule.hold(item, props.due)
            return None
        return item

    def end_run(self) -> None:
        """Expiry times came (the open run's may be among them): the next run is new."""
        self._expiring = PLAIN
