"""Entries from elsewhere, applied: idempotently and in any order.

Entries from other nodes come in through ``Forum.apply``: stored in the
Strand first, then applied here (:meth:`Applier.on_durable`). A Write goes to
its place (:class:`~forum.node.space.placement.Placement`, then its turn:
:mod:`forum.node.space.surfacing`); a Take kills its target wherever it is
(:class:`~forum.node.space.places.Places`). A Take that arrives before its
Write kills the Write when it comes (a *pending kill*); a Take of a tuple
taken already, or handed out here too, is a *double take*, counted; one
of a tuple handed out here (its payload at hand) is counted in its prefix
too (:data:`SEPARATOR`, at most :data:`MOST_PREFIXES` of up to
:data:`LONGEST_PREFIX` bytes). The same rules
apply the Strand's own entries at start (:meth:`Applier.replay`), a peer's
dead ranges (``Forum.apply_dead``) and an origin's real copies of
entries held here (``Forum.replace``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import assert_never, cast

from forum.node.core.codec import RawEntry, TakeRaw, is_write
from forum.node.core.entries import PLAIN, Entry, EntryId, Properties, Take, Tuple, Write
from forum.node.space.admission import Admission
from forum.node.space.dedup import DedupTable
from forum.node.space.kept_properties import KeptProperties
from forum.node.space.listeners import Listeners, Provenance
from forum.node.space.placement import Placement
from forum.node.space.places import Place, Places
from forum.node.space.surfacing import Found, RemoteTuples
from forum.node.storage.strand import Strand

log = logging.getLogger(__name__)

#: What a pause marker is, as the tuples a Take of one shows it.
PAUSE = Properties(pause=True)
#: The double takes of tuples handed out here are counted per prefix: a
#: payload up to and including its first separator (the payload itself
#: without one), as ``GET /v1/prefixes?separator=/`` groups tuples.
SEPARATOR = b"/"
#: The most prefixes counted (the first met; a double take of another is
#: counted in ``double_takes`` only): as many as ``GET /v1/prefixes`` shows
#: (``forum.node.api.parameters.MAX_GROUPS``; a test holds them equal).
MOST_PREFIXES = 500
#: The longest prefix counted, in bytes (a label of ``/metrics``): a double
#: take of a tuple whose prefix is longer is counted in ``double_takes`` only.
LONGEST_PREFIX = 256


class Applier:
    """Applies entries from elsewhere to the places (the Forum's, passed in
    with what moves a tuple between them: ``add_live``, ``remove_live``,
    ``dress``). Holds the ``pending_kills`` (targets of Takes whose Write has
    not come), the ids ``applying`` (being stored by ``Forum.apply`` or
    ``Forum.replace``, each with what ends when it is stored), the
    ``double_takes`` counted, and those of tuples handed out here per prefix
    (``double_takes_by_prefix``)."""

    __slots__ = (
        "_add_live",
        "_admission",
        "_dedup",
        "_dress",
        "_killed_while_taking",
        "_lapses",
        "_listeners",
        "_placement",
        "_places",
        "_props",
        "_remote",
        "_remove_live",
        "_strand",
        "applying",
        "double_takes",
        "double_takes_by_prefix",
        "pending_kills",
    )

    def __init__(
        self,
        *,
        strand: Strand,
        places: Places,
        remote: RemoteTuples,
        admission: Admission,
        placement: Placement,
        props: KeptProperties,
        dedup: DedupTable,
        lapses: dict[EntryId, int],
        killed_while_taking: set[EntryId],
        listeners: Listeners,
        add_live: Callable[[Tuple], None],
        remove_live: Callable[[EntryId], Found | None],
        dress: Callable[[Tuple], Tuple],
    ) -> None:
        self._strand = strand
        self._places = places
        self._remote = remote
        self._admission = admission
        self._placement = placement
        self._props = props
        self._dedup = dedup
        self._lapses = lapses
        self._killed_while_taking = killed_while_taking
        self._listeners = listeners
        self._add_live = add_live
        self._remove_live = remove_live
        self._dress = dress
        self.pending_kills: set[EntryId] = set()
        self.applying: dict[EntryId, Awaitable[object]] = {}
        self.double_takes = 0
        self.double_takes_by_prefix: dict[bytes, int] = {}

    def replay(self, entries: list[RawEntry]) -> None:
        """The Strand's entries at start, in log order: the survivors live
        (or placed), the Takes before their Writes pending."""
        # Plain (origin, seq) keys and one bulk load of the survivors: replay
        # is start-up time, and most entries of a long log are dead by its end.
        live: dict[tuple[str, int], bytes] = {}
        props: dict[tuple[str, int], Properties] = {}
        pending: set[tuple[str, int]] = set()
        schedule, index = self._places.schedule, self._places.index
        now, origin = schedule.now_ms(), self._strand.origin
        for raw in entries:
            if is_write(raw):
                key = (raw[0], raw[1])
                if len(raw) == 4:
                    props[key] = found = cast(Properties, raw[3])
                    if found.dedup_until > now and found.key is not None and key[0] == origin:
                        self._dedup.add(found.key, EntryId(*key), found.dedup_until)
                if key in pending:
                    pending.discard(key)
                else:
                    live[key] = cast(bytes, raw[2])
            else:
                target = cast(TakeRaw, raw)[2:]
                if live.pop(target, None) is None:
                    take = Take(EntryId(raw[0], raw[1]), EntryId(*target))
                    if target in pending or self.is_double_take(take):
                        self.double_takes += 1
                    else:
                        pending.add(target)
        self.pending_kills.update(EntryId(*key) for key in pending)
        if not props:
            index.bulk_load([Tuple(EntryId(*key), p) for key, p in live.items()])
            return
        plain: list[Tuple] = []
        for key, payload in live.items():
            found = props.get(key, PLAIN)
            item = Tuple(EntryId(*key), payload, found)
            if found is PLAIN:
                plain.append(item)
            elif (placed := self._placement.place(item, now)) is not None:
                plain.append(placed)  # live now, in log order with the rest
        index.bulk_load(plain)

    def on_durable(
        self,
        new: Sequence[Entry],
        provenance: Provenance,
        durable: asyncio.Future[list[Entry]],
    ) -> None:
        """The append of entries from elsewhere ended: if it held, apply them
        and tell the listeners."""
        # A done callback: entries in the Strand are applied to the index even
        # if the peer's request was cancelled meanwhile (else they would stay
        # invisible until a restart, and never be sent again).
        for entry in new:
            self.applying.pop(entry.id, None)
        if durable.cancelled() or durable.exception() is not None:
            return
        taken: list[Tuple] = []
        for entry in new:
            removed = self.arrive(entry)
            if removed is not None:
                taken.append(removed)
        self._listeners.notify(new, provenance, taken)

    def arrive(self, entry: Entry) -> Tuple | None:
        """A remote entry, durable here: a Write waits for its turn (or is
        dead already: its Take came first), a Take is applied. Returns the
        tuple a Take removed here, for the watchers."""
        if isinstance(entry, Take):
            return self._apply_take(entry)
        if entry.id in self.pending_kills:
            self.pending_kills.discard(entry.id)
        elif entry.props is PLAIN:
            self._remote.arrive(Tuple(entry.id, entry.payload))
        else:
            placed = self._placement.place(
                Tuple(entry.id, entry.payload, entry.props), self._places.schedule.now_ms()
            )
            if placed is not None:
                self._remote.arrive(placed)
        return None

    def not_taken_yet(self, writes: list[Write]) -> list[Write]:
        """``writes`` (local, durable) but those a Take here already killed:
        a peer took an id of ours before we wrote it, which only a forgery of
        our next seq taken there makes happen (docs/replication.md
        "Divergence"). Taken is taken: it is dead here at birth too, as everywhere."""
        taken = {w.id for w in writes} & self.pending_kills
        self.pending_kills -= taken
        return [w for w in writes if w.id not in taken]

    def _apply_take(self, take: Take) -> Tuple | None:
        """Apply a peer's Take; the tuple it removed here, if it was here."""
        target = take.target
        self._lapses.pop(target, None)
        self._remote.note_pace(take)
        if self._admission.room_waiters:
            self._admission.free_room()
        if self._props:
            self._props.forget(target)
        place = self._places.where(target)
        match place:
            case Place.INDEX:
                removed = self._remove_live(target)
                return None if removed is None else removed[1]
            case Place.SURFACING | Place.POOL:  # taken elsewhere before it was live here
                surfacing = self._remote.pop(target)
                if surfacing is None:
                    return None
                surfacing.handle.cancel()
                return surfacing.item
            case Place.SCHEDULE:  # taken elsewhere before it was due here
                return self._places.schedule.drop(target)
            case Place.PAUSE:  # resumed elsewhere
                prefix = self._admission.pause_markers[target]
                self._admission.drop_pause(target)
                return Tuple(target, prefix, PAUSE)
            case Place.RESERVED:
                return self._take_reserved(take)
            case Place.TAKING:  # our own take of it is being made durable: both of us took it
                self.double_takes += 1
                self._killed_while_taking.add(target)
                return None
            case None:
                self._kill_absent(take)
                return None
            case _:
                assert_never(place)

    def _take_reserved(self, take: Take) -> Tuple | None:
        """A peer's Take of a tuple reserved here: the end of its loan if we
        lent it to that peer (its ack); else both nodes handed it out."""
        reserved = self._places.reserved
        lent_to = reserved.lent.get(take.target) if reserved.lent else None
        reservation = reserved.pop(take.target)
        if lent_to != take.id.origin:
            self.double_takes += 1
            if reservation is not None:
                self._count_in_prefix(reservation[1].payload)
        return None if reservation is None else reservation[1]

    def _kill_absent(self, take: Take) -> None:
        """A Take whose target is not live: taken before, or not seen yet."""
        if take.target in self._strand and self._strand.position(take.target) is None:
            return  # dropped by compaction: dead long ago, nothing to wait for
        if take.target in self.pending_kills or self.is_double_take(take):
            self.double_takes += 1
            log.debug("double take of %s (again by %s)", take.target, take.id)
        else:
            self.pending_kills.add(take.target)

    def _count_in_prefix(self, payload: bytes) -> None:
        """A double take of a tuple handed out here, counted in its prefix."""
        cut = payload.find(SEPARATOR, 0, LONGEST_PREFIX)
        if cut < 0 and len(payload) > LONGEST_PREFIX:
            return
        prefix = payload if cut < 0 else payload[: cut + len(SEPARATOR)]
        counts = self.double_takes_by_prefix
        if prefix in counts:
            counts[prefix] += 1
        elif len(counts) < MOST_PREFIXES:
            counts[prefix] = 1

    def is_double_take(self, take: Take) -> bool:
        """Whether the (not live) target of ``take`` was written before it in
        the log, and so was taken already."""
        target_at = self._strand.position(take.target)
        take_at = self._strand.position(take.id)
        return target_at is not None and (take_at is None or target_at < take_at)

    def swap(self, pairs: Sequence[tuple[Entry, Entry]], done: Sequence[Entry]) -> None:
        """The real entries of ``pairs`` (``(held, real)``) that are ``done``
        (stored in place of the held ones) put in: a held Write live or
        waiting here is swapped for the real one (a real Write waits for its
        turn, a real Take is applied); one taken, reserved or being taken here
        stays so; what a held Take killed stays dead."""
        swapped = {entry.id for entry in done}
        reserved, taking = self._places.reserved, self._places.taking
        for held, real in pairs:
            if real.id not in swapped:
                continue
            if isinstance(real, Write):
                # Still reserved: a release, or a lease run out, puts back the real bytes.
                reserved.keep_real(real.id, real.payload, real.props)
            was_live = isinstance(held, Take) or (
                real.id not in reserved
                and real.id not in taking
                and self._places.remove(real.id) is not None
            )
            if was_live and isinstance(held, Write) and self._props:
                self._props.forget(real.id)  # the held copy's ttl or due time goes with it
            if was_live or isinstance(real, Take):
                self.arrive(real)

    def in_ranges(self, origin: str, ranges: Sequence[tuple[int, int]]) -> list[EntryId]:
        """The ids in ``ranges`` of ``origin`` that may be live here: each seq
        of short ranges, else each id in a place that falls in one (whichever
        is fewer to look at)."""
        seqs = sum(last - first + 1 for first, last in ranges)
        if seqs <= len(self._places):
            return [
                EntryId(origin, seq) for first, last in ranges for seq in range(first, last + 1)
            ]
        return [
            entry_id
            for entry_id in self._places.ids()
            if entry_id.origin == origin
            and any(first <= entry_id.seq <= last for first, last in ranges)
        ]

    def live_now(self, entry_ids: list[EntryId]) -> None:
        """What of ``entry_ids`` waits here (not due yet, surfacing, held) is
        live now, and a pause marker among them is dropped."""
        for entry_id in entry_ids:
            place = self._places.where(entry_id)
            match place:
                case Place.PAUSE:
                    self._admission.drop_pause(entry_id)
                case Place.SCHEDULE:
                    if (due_later := self._places.schedule.drop(entry_id)) is not None:
                        self._add_live(self._dress(due_later))
                case Place.SURFACING | Place.POOL:  # held (an aired one is in the index)
                    if (surfacing := self._remote.pop(entry_id)) is not None:
                        surfacing.handle.cancel()
                        self._add_live(surfacing.item)
                case Place.INDEX | Place.RESERVED | Place.TAKING | None:
                    pass
                case _:
                    assert_never(place)

    def dead_out(self, entry_ids: list[EntryId]) -> list[Found]:
        """Those of ``entry_ids`` that are live or reserved here (a peer
        found them dead), out of the index and the reservations, for the
        caller to take; a reserved one counts as a double take."""
        found: list[Found] = []
        for entry_id in entry_ids:
            place = self._places.where(entry_id)
            match place:
                case Place.RESERVED:
                    if (reservation := self._places.reserved.pop(entry_id)) is not None:
                        arrival, handed = reservation
                        self.double_takes += 1  # handed out here, taken for good elsewhere
                        self._count_in_prefix(handed.payload)
                        found.append((arrival, Tuple(handed.id, handed.payload, handed.props)))
                case Place.INDEX:
                    if (removed := self._remove_live(entry_id)) is not None:
                        found.append(removed)
                case Place.SURFACING | Place.POOL | Place.SCHEDULE | Place.PAUSE:
                    pass  # none is left there by live_now
                case Place.TAKING | None:
                    pass  # being taken here (or handed to a waiter by live_now), or dead
                case _:
                    assert_never(place)
        return found
