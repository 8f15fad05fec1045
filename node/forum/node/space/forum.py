"""The Forum: the tuple-space API over one node's Strand and live index.

``write`` appends a Write and makes the tuple live once it is durable.
``take`` removes the oldest live match from the index, appends a Take, and
returns the payload once the Take is durable; if the append fails the tuple
is put back in its old place and ``StrandError`` is raised, so the index
never claims a take the log does not hold. ``reserve`` takes the oldest
match out of the index for a lease without writing anything; ``ack`` takes
it for good.

Blocking takes wait in one FIFO queue. A tuple that becomes live is handed
straight to the first waiter whose pattern it matches (so one write wakes
exactly one taker, and waiters are served in arrival order); that waiter
then makes the Take durable. Invariant: no live tuple matches a waiter.

The Forum owns its node's containers and hands each collaborator the ones it
needs, each a module of this package:

* ``reservations``: reserved tuples, their leases and lapses;
* ``admission``: limits on prefixes, dedup keys at write, pauses;
* ``placement``: where a Write with properties goes (due later, expiring);
* ``surfacing``: a peer's tuples on their way to being live here (turns,
  the pool, stealing);
* ``applying``: entries from elsewhere (``apply``, ``replace``,
  ``apply_dead``) and the Strand's own at start;
* ``places``: where a tuple not dead can be, the one answer to it;
* ``taking``: the takes under way;
* ``listeners``: who hears what the Forum does (replication, watchers);
* ``copies``: which peers hold this node's writes, and the writes waiting
  for their ``copies`` (fed by replication's acknowledgements);
* ``noting``: what this node holds, noted every half second while the
  Forum is open (``async with``), which dates each group's oldest live
  tuple (:meth:`Forum.oldest_ages`) and replication's lag.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Mapping, Sequence
from typing import Self

from forum.node.core.entries import PLAIN, Entry, EntryId, Properties, Reserved, Take, Tuple, Write
from forum.node.core.errors import ForumError
from forum.node.core.reports import CompactionReport, ForumStats
from forum.node.core.resource import AsyncResource
from forum.node.core.space import ListPage, Pattern
from forum.node.core.write_options import expiring_properties, write_properties
from forum.node.space.admission import Admission
from forum.node.space.applying import PAUSE, Applier
from forum.node.space.arrivals import Arrivals
from forum.node.space.copies import COPIES_TIMEOUT, Copies
from forum.node.space.dedup import DedupTable
from forum.node.space.index import LiveIndex
from forum.node.space.kept_properties import KeptProperties
from forum.node.space.lending import ASK, DRY, Ask, Borrowing, Lender, Lent, Loans
from forum.node.space.listeners import (
    LOCAL,
    ExpiryListener,
    Listener,
    Listeners,
    LiveListener,
    Provenance,
    TakeListener,
)
from forum.node.space.noting import ArrivalNeed, Noting
from forum.node.space.placement import Placement
from forum.node.space.places import Places
from forum.node.space.reservations import Reservations
from forum.node.space.schedule import Clock, Schedule
from forum.node.space.surfacing import REMOTE_DELAY, REMOTE_HOLD, Found, Ranking, RemoteTuples
from forum.node.space.taking import Takes
from forum.node.storage.strand import Strand

log = logging.getLogger(__name__)


#: Live ids turned into keys per step of a compaction, between two turns of the loop.
_LIVE_SLICE = 10_000
#: How long a writer keeps a tuple it lent for a take here reserved: the
#: Take follows at once; this bounds the wait if it never comes.
_TAKE_LEASE = 60.0
#: The arrival a withdrawn tuple that was not due yet stands on while its
#: Take is appended: put back, it goes back to the schedule (``_put_live``).
_NOT_DUE = -1


def prefix_text(prefix: bytes) -> str:
    """A prefix as text for people: UTF-8, any other byte as ``\\xNN``."""
    return prefix.decode(errors="backslashreplace")


class _Waiter:
    """A blocking take: its pattern's prefix, and the future it is handed a
    tuple by (or :data:`~forum.node.space.lending.ASK`: ask the writer of one)."""

    __slots__ = ("future", "prefix")

    def __init__(self, prefix: bytes, future: asyncio.Future[Found | Ask | None]) -> None:
        self.prefix = prefix
        self.future = future


class Forum(AsyncResource):
    """A tuple space on one node. ``Forum(strand)`` replays the Strand's entries."""

    def __init__(
        self,
        strand: Strand,
        remote_delay: float = REMOTE_DELAY,
        remote_hold: float = REMOTE_HOLD,
        limits: Mapping[bytes, int] | None = None,
        clock: Clock = time.time,
        *,
        ack_copies: int = 1,
        copies_timeout: float = COPIES_TIMEOUT,
    ) -> None:
        """``ack_copies``: the copies of a write that gives none
        (:mod:`forum.node.space.copies`), waited for up to ``copies_timeout`` s."""
        # Who holds this node's writes, for writes with copies (fed by replication).
        # No attribute more: past 30, CPython keeps an instance's attributes in
        # a dict of its own, and every attribute read on the hot paths costs more.
        self.copies = Copies(strand.origin, copies_timeout, ack_copies)
        self.strand = strand
        self._index = LiveIndex()
        self._waiters: deque[_Waiter] = deque()
        # The properties of every tuple not dead whose Write has more than a
        # priority (the index keeps only that: the rest is put back from here).
        self._props = KeptProperties()
        # Remote tuples before their turn, and pooled after it (forum.node.space.surfacing).
        self._remote = RemoteTuples(
            origin=strand.origin,
            delay=remote_delay,
            hold=remote_hold,
            index=self._index,
            add_live=self._add_live,
            wanted=self._wanted,
            retry_waiters=self._retry_waiters,
            dress=self._dress,
        )
        self._pool = self._remote.pool
        # Reserved tuples: out of the index until acked, released or expired;
        # and per live tuple whose leases ran out, how many times
        # (``Reserved.deliveries``; an entry goes when its tuple is taken,
        # here or elsewhere). (The Forum keeps at most 30 attributes: past
        # that, CPython 3.11 gives up its fast attribute reads for all.)
        lapses: dict[EntryId, int] = {}
        self._reservations = Reservations(lapses, self._put_live)
        # What every local append is given to call once durable: one bound
        # method, so that the Strand, which tells a row of appends with the
        # same callback and Properties in one call, finds them the same.
        self._durable = self._on_writes_durable
        # The wall clock that due times, expiries and dedup windows are read by.
        self._clock = clock
        self._schedule = Schedule(self._on_due, self._on_expiry, clock)
        self._dedup = DedupTable(strand.origin)
        # The limits, the dedup keys of writes under way and the pauses
        # (forum.node.space.admission); the limits and paused prefixes are
        # looked at on every write and take.
        self._admission = Admission(
            limits=limits,
            strand=strand,
            durable=self._durable,
            dedup=self._dedup,
            index=self._index,
            schedule=self._schedule,
            reservations=self._reservations,
            retry_waiters=self._remote.retry_now,
        )
        self._limits = self._admission.limits
        self._paused = self._admission.paused
        # Where a Write with properties goes (forum.node.space.placement).
        self._placement = Placement(
            origin=strand.origin,
            props=self._props,
            schedule=self._schedule,
            dedup=self._dedup,
            clock=clock,
            add_live=self._add_live,
            add_pause=self._admission.add_pause,
        )
        self._listeners = Listeners()
        self._live_listeners = self._listeners.live  # called as each tuple is offered
        # The takes under way here (forum.node.space.taking).
        self._taker = Takes(
            strand=strand,
            listeners=self._listeners,
            admission=self._admission,
            props=self._props,
            lapses=lapses,
            durable=self._durable,
            put_live=self._put_live,
            expired_now=self._expired_now,
            tell_expired=self._tell_expired,
        )
        # Every place a tuple not dead can be in (forum.node.space.places).
        self._places = Places(
            index=self._index,
            reserved=self._reservations,
            surfacing=self._remote.waiting,
            pool=self._pool,
            schedule=self._schedule,
            pause=self._admission.pause_markers,
            taking=self._taker.taking,
        )
        self._expired = 0
        # What this node holds, noted every half second while the Forum is
        # open (``async with``): ``arrivals``, when it came to hold what.
        self._noting = Noting(strand, self._index, self._reservations)
        # Entries from elsewhere, applied to the places (forum.node.space.applying).
        self._applier = Applier(
            strand=strand,
            places=self._places,
            remote=self._remote,
            admission=self._admission,
            placement=self._placement,
            props=self._props,
            dedup=self._dedup,
            lapses=lapses,
            killed_while_taking=self._taker.killed_while_taking,
            listeners=self._listeners,
            add_live=self._add_live,
            remove_live=self._remove_live,
            dress=self._dress,
        )
        self._pending_kills = self._applier.pending_kills  # looked at on every write
        # Tuples lent by their writers (forum.node.space.lending); none until
        # replication installs a lender.
        self._borrowing = Borrowing(
            origin=strand.origin,
            index=self._index,
            places=self._places,
            remote=self._remote,
            reservations=self._reservations,
            dress=self._dress,
        )
        self._loans = Loans(
            origin=strand.origin,
            index=self._index,
            pool=self._pool,
            reservations=self._reservations,
            dress=self._dress,
        )
        self._lender: Lender | None = None
        self._applying = self._applier.applying
        self._writes = 0
        self._closed = False
        # The windows compaction kept as keys, then the Writes since (replay).
        self._dedup.load(strand.config.storage, self._schedule.now_ms())
        self._applier.replay(strand.take_replayed())

    @property
    def remote_delay(self) -> float:
        """How long a remote tuple waits per rank here (forum.node.space.surfacing)."""
        return self._remote.delay

    @property
    def remote_hold(self) -> float:
        """How long a remote tuple no taker here wanted is held (forum.node.space.surfacing)."""
        return self._remote.hold

    @property
    def arrivals(self) -> Arrivals:
        """When this node came to hold what (:mod:`forum.node.space.noting`)."""
        return self._noting.arrivals

    async def __aenter__(self) -> Self:
        """Start noting what this node holds (the first note dates all it
        held at the start)."""
        if not self._noting.started and not self._closed:
            self._noting.start()
        return self

    # -- the tuple-space API ---------------------------------------------------

    async def write(
        self,
        payload: bytes,
        *,
        delay: float | None = None,
        not_before: float | None = None,
        ttl: float | None = None,
        priority: int = 0,
        key: bytes | str | None = None,
        dedup_window: float | None = None,
        wait: float | None = None,
        copies: int | None = None,
    ) -> EntryId:
        """Add a tuple; returns its id once it is durable.

        The options (:func:`~forum.node.core.write_options.write_properties`; ``ValueError``
        for a bad one): ``delay`` or ``not_before``, when it is due;
        ``ttl``, how long it lives once due; ``priority``; ``key`` and
        ``dedup_window``, a second write with the key within the window
        answers with the first one's id. A write that would put a limited
        prefix over its limit raises :class:`~forum.node.core.errors.LimitExceeded`, or
        with ``wait`` waits up to so many seconds for room first. ``copies``:
        answered once so many members hold it durably (:mod:`forum.node.space.copies`;
        not given: the node's ``ack_copies``)."""
        self._check_open()
        if copies is not None or self.copies.waits_by_default:
            written = await self.write_many(
                (payload,), delay=delay, not_before=not_before, ttl=ttl, priority=priority,
                key=key, dedup_window=dedup_window, wait=wait, copies=copies,
            )  # fmt: skip
            return written[0]
        if (
            delay is None
            and not_before is None
            and key is None
            and dedup_window is None
            and wait is None
            and not self._limits
        ):
            if ttl is None and not priority:
                # write_many for one, without its list of ids: the hottest call there is.
                return (await self.strand.submit_writes((payload,), self._durable))[0].id
            # A ttl, a priority or both, and no dedup, wait or limit: straight to the Strand.
            props = expiring_properties(self._clock(), ttl, priority)
            writes = await self.strand.submit_writes((payload,), self._durable, props)
            return writes[0].id
        props = write_properties(self._clock(), delay, not_before, ttl, priority, key, dedup_window)
        if props.dedup_until or wait is not None or self._limits:
            return (await self._admission.write((payload,), props, wait))[0]
        return (await self.strand.submit_writes((payload,), self._durable, props))[0].id

    async def write_many(
        self,
        payloads: Sequence[bytes],
        *,
        delay: float | None = None,
        not_before: float | None = None,
        ttl: float | None = None,
        priority: int = 0,
        key: bytes | str | None = None,
        dedup_window: float | None = None,
        wait: float | None = None,
        copies: int | None = None,
        keys: Sequence[bytes | str] | None = None,
    ) -> list[EntryId]:
        """Add many tuples in one append: all become durable, or none. The
        options are :meth:`write`'s, for every tuple (a ``key`` only with one
        payload). ``keys``, one per payload (not with ``key``), gives each
        its own key: with ``dedup_window``, each is deduplicated as a single
        write with its key is (a key whose window is open here, or that an
        earlier payload of the batch has, answers with that write's id and
        writes nothing), and the others are written in one group commit.

        The tuples become live when the append is durable, even if the caller
        was cancelled meanwhile (a write whose answer is lost still happened).
        With ``copies`` above 1 the answer waits for the copies after that
        (:class:`~forum.node.core.errors.TooFewCopies` when short of them in time).
        """
        self._check_open()
        need = 1
        if copies is not None or self.copies.waits_by_default:
            need = self.copies.check(self.copies.default if copies is None else copies)
        if keys is not None:
            if key is not None or len(keys) != len(payloads):
                raise ValueError("keys names each write of a batch: one per payload, not with key")
            now = self._clock()
            each = [
                write_properties(now, delay, not_before, ttl, priority, k, dedup_window)
                for k in keys
            ]
            ids = await self._admission.write_each(payloads, each, wait)
            if need > 1:
                await self.copies.wait(ids, need)
            return ids
        props = write_properties(self._clock(), delay, not_before, ttl, priority, key, dedup_window)
        if props is PLAIN and wait is None and not self._limits:
            writes = await self.strand.submit_writes(payloads, self._durable)
            ids = [entry.id for entry in writes]
        else:
            if props.key is not None and len(payloads) != 1:
                raise ValueError("a key names one write: give it with one payload")
            ids = await self._admission.write(payloads, props, wait)
        if need > 1:
            await self.copies.wait(ids, need)
        return ids

    def end_room_waits(self) -> None:
        """End the waits of writes for room under a prefix's limit, now and
        later (a node shutting down): such a write raises ``ForumError``,
        having written nothing, instead of waiting out its ``wait``."""
        self._admission.end_room_waits()

    # -- pausing a prefix ------------------------------------------------------

    async def pause(self, prefix: bytes) -> EntryId:
        """Pause the takes and reserves of ``prefix`` (and of every pattern
        that starts with it) on every node: they answer nothing until
        :meth:`resume`. Writes, reads and acks go on. The pause is a marker
        Write, replicated as any: it reaches every node, and survives restarts.
        Returns the marker's id."""
        self._check_open()
        if not isinstance(prefix, bytes):
            raise TypeError("a prefix is bytes")
        marker = Properties(pause=True)
        writes = await self.strand.submit_writes((prefix,), self._durable, marker)
        return writes[0].id

    async def resume(self, prefix: bytes) -> int:
        """End every pause of exactly ``prefix`` known here (a Take of each
        marker, replicated); returns how many. A pause made on a node cut off
        from this one is not known here yet, and outlives this resume: resume
        again once it arrives (``paused`` shows it)."""
        self._check_open()
        markers = builtins.list(self._paused.get(prefix, ()))
        if not markers:
            return 0
        append = self.strand.submit_takes(markers)
        append.add_done_callback(functools.partial(self._resumed, prefix, markers))
        await asyncio.shield(append)
        return len(markers)

    def _resumed(
        self,
        prefix: bytes,
        markers: builtins.list[EntryId],
        append: asyncio.Future[builtins.list[Take]],
    ) -> None:
        """The end of a resume's append, whether or not its caller still waits:
        a resume cancelled while its Takes were appended must not leave the
        prefix paused here (until a restart) while the Takes stand everywhere."""
        if append.cancelled() or append.exception() is not None:
            return  # nothing was taken: the markers stand (the caller sees why)
        for marker in markers:
            self._admission.drop_pause(marker)
        takes = append.result()
        self._taker.made += len(takes)
        self._listeners.notify(takes, LOCAL, [Tuple(marker, prefix, PAUSE) for marker in markers])

    def paused(self) -> builtins.list[bytes]:
        """The prefixes paused here, sorted."""
        return sorted(self._paused)

    def fill(self) -> dict[bytes, tuple[int, int]]:
        """Per limited prefix, how many tuples it holds here and its limit."""
        return self._admission.fill()

    def groups(self, separator: bytes, most: int) -> dict[bytes, tuple[int, int, int]]:
        """Per group of tuples here (a payload up to and including its first
        ``separator``; see ``LiveIndex.groups``), how many are live, not due
        yet and reserved; at most ``most`` groups of each kind."""
        live = self._index.groups(separator, most)
        delayed = self._schedule.groups(separator, most)
        reserved = self._reservations.groups(separator, most)
        return {
            group: (live.get(group, 0), delayed.get(group, 0), reserved.get(group, 0))
            for group in sorted(live.keys() | delayed.keys() | reserved.keys())
        }

    def double_takes_by_prefix(self) -> dict[bytes, int]:
        """Per prefix (a payload up to its first ``/``), the double takes of
        tuples handed out here (see forum.node.space.applying)."""
        return dict(self._applier.double_takes_by_prefix)

    def live_groups(self, separator: bytes, most: int, under: bytes) -> dict[bytes, int]:
        """Per group of the live tuples here under ``under`` (grouped at the
        first ``separator`` after it: ``LiveIndex.groups``), how many."""
        return self._index.groups(separator, most, under)

    def oldest_ages(self, prefixes: Sequence[bytes]) -> dict[bytes, float]:
        """Per prefix, the age in seconds of its live tuple here that has
        been live the longest (the first to arrive in the index), dated from
        when this node came to hold its Write (``arrivals``: never more than
        the truth, short of it by up to half a second; 0 for one held since
        the last note). A prefix with no live tuple has none, and so has one
        the index could not look at cheaply within
        :data:`~forum.node.space.noting.AGE_SCAN` keys."""
        return self._noting.oldest_ages(prefixes)

    def need_arrivals(self, need: ArrivalNeed | None) -> None:
        """What another reader of ``arrivals`` needs kept (replication's lag;
        ``None``: nothing). The Forum keeps the marks that date its live and
        reserved tuples either way."""
        self._noting.need = need

    def _on_writes_durable(self, writes: builtins.list[Write]) -> None:
        # Called by the Strand's writer in log order, whether or not the caller waits,
        # with the writes of one append or of a row of appends in one group
        # commit that share their Properties (Strand._answer_now).
        live = writes
        if self._pending_kills:  # empty unless a peer took one of ours before we wrote it
            live = self._applier.not_taken_yet(writes)
        if live:
            self._placement.make_live(live)
        if writes[0].props.pause:
            self._listeners.notify(writes, LOCAL)
            return
        self._writes += len(writes)
        self._listeners.notify(writes, LOCAL)

    def _on_due(self, items: builtins.list[Tuple]) -> None:
        """Tuples fell due: live, in due order; a peer's after its turn here."""
        origin = self.strand.origin
        for item in items:
            dressed = self._dress(item)
            if item.id.origin == origin:
                self._add_live(dressed)
            else:
                self._remote.arrive(dressed)

    def _on_expiry(self, entry_ids: builtins.list[EntryId]) -> None:
        """Expiry times came: each tuple still alive is gone, wherever it is,
        without a Take (every node expires it from its Write alike)."""
        self._placement.end_run()
        expired: builtins.list[Tuple] = []
        for entry_id in entry_ids:
            props = self._props.of(entry_id)
            if props is None or entry_id in self._taker.taking:
                continue  # dead already, or being taken (its put-back checks)
            item = self._places.remove(entry_id)
            self._props.forget(entry_id)
            self._reservations.lapses.pop(entry_id, None)
            if item is not None:
                expired.append(Tuple(item.id, item.payload, props))
        if expired:
            self._tell_expired(expired)

    def _tell_expired(self, expired: builtins.list[Tuple]) -> None:
        self._expired += len(expired)
        self._admission.free_room()
        self._listeners.expired(expired)

    def _expired_now(self, entry_id: EntryId) -> bool:
        """Whether ``entry_id`` has expired (it is not to be put back)."""
        props = self._props.of(entry_id)
        return props is not None and 0 < props.expires <= self._schedule.now_ms()

    def _dress(self, item: Tuple) -> Tuple:
        """``item`` with its Write's properties (the index keeps only the priority)."""
        if self._props:
            props = self._props.of(item.id)
            if props is not None:
                return Tuple(item.id, item.payload, props)
        return item

    async def read(self, pattern: Pattern) -> bytes | None:
        """The payload of the oldest live match, left live; ``None`` if none."""
        found = await self.read_entry(pattern)
        return None if found is None else found.payload

    async def read_entry(self, pattern: Pattern) -> Tuple | None:
        found = self._index.oldest(pattern.prefix)
        return None if found is None else self._dress(found[1])

    async def take(self, pattern: Pattern, timeout: float | None = None) -> bytes | None:
        """Remove and return the oldest live match.

        ``timeout`` ``None`` or ``0``: answer at once. Otherwise wait up to
        ``timeout`` seconds for a match to be written (here or on a peer).
        """
        found = await self.take_entry(pattern, timeout)
        return None if found is None else found.payload

    async def take_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        """Like :meth:`take`, with the tuple's id."""
        self._check_open()
        found = await self._find(pattern.prefix, _TAKE_LEASE, timeout)
        if found is None:
            return None
        taken = await self._taker.commit([found])
        return taken[0]

    async def reserve(
        self, pattern: Pattern, lease: float, timeout: float | None = None
    ) -> Reserved | None:
        """Take the oldest match out of reach for ``lease`` seconds, without a
        Take in the log; ``ack`` makes it a take, ``release`` gives it back.
        ``timeout`` waits for a match as in :meth:`take`. The tuple comes with
        how many times it has been handed out (:class:`Reserved`)."""
        self._check_open()
        if not lease > 0:
            raise ValueError("lease must be > 0 seconds")
        found = await self._find(pattern.prefix, lease, timeout)
        if found is None:
            return None
        return self._hand_out(found, lease)

    async def reserve_many(self, pattern: Pattern, lease: float, limit: int) -> list[Reserved]:
        """Reserve up to ``limit`` oldest matches for ``lease`` seconds; never waits."""
        self._check_open()
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if not lease > 0:
            raise ValueError("lease must be > 0 seconds")
        reserved: list[Reserved] = []
        while len(reserved) < limit and (found := self._oldest_out(pattern.prefix)) is not None:
            reserved.append(self._hand_out(found, lease))
        if len(reserved) < limit and self._lender is not None:
            lent = await self._borrowing.borrow(
                pattern.prefix, lease, limit - len(reserved), asked=False
            )
            reserved += [self._hand_out(found, lease) for found in lent]
        return reserved

    def _hand_out(self, found: Found, lease: float) -> Reserved:
        """``found`` reserved for ``lease`` seconds (if its writer lent it to
        us, it goes back to the writer when released or run out)."""
        handed = self._reservations.hand_out(found[0], found[1], lease)
        if self._lender is not None and self._borrowing.owned(handed.id):
            self._reservations.borrowed[handed.id] = handed.id.origin
        return handed

    async def _find(self, prefix: bytes, lease: float, timeout: float | None) -> Found | None:
        """The tuple a take or reserve gets: the oldest match here, else one
        its writer lends us (for ``lease`` seconds), else, with a
        ``timeout``, one that comes within it."""
        found = self._oldest_out(prefix)
        if found is None and self._lender is not None:
            lent = await self._borrowing.borrow(prefix, lease, 1, asked=False)
            found = lent[0] if lent else None
        if found is None and timeout:
            found = await self._wait(prefix, timeout, lease)
        return found

    async def ack(self, entry_id: EntryId) -> bool:
        """Take the reserved tuple ``entry_id`` for good. ``False`` when it is
        no longer here to take (taken by another after its lease ran out, or
        on another node); if its lease ran out but it is still live, it is
        taken now."""
        return (await self.ack_many([entry_id]))[0]

    async def ack_many(self, entry_ids: Sequence[EntryId]) -> list[bool]:
        """:meth:`ack` for many, in one append; one flag per id, in order."""
        self._check_open()
        found: builtins.list[Found] = []
        acked = []
        for entry_id in entry_ids:
            reservation = self._reservations.pop(entry_id)
            if reservation is not None:
                arrival, handed = reservation
                found.append((arrival, Tuple(handed.id, handed.payload, handed.props)))
            elif (removed := self._remove_live(entry_id)) is not None:
                found.append(removed)
            else:
                acked.append(False)
                continue
            acked.append(True)
        if found:
            await self._taker.commit(found, rescue=False)
        return acked

    async def extend(self, entry_id: EntryId, lease: float) -> bool:
        """Keep the reserved tuple ``entry_id`` out of reach for ``lease``
        seconds from now; ``False`` if it is not reserved (its lease ran out,
        it was acked or released, or the node restarted)."""
        return (await self.extend_many([entry_id], lease))[0]

    async def extend_many(self, entry_ids: Sequence[EntryId], lease: float) -> list[bool]:
        """:meth:`extend` for many at once (a worker's heartbeat); one flag per
        id, in order. Nothing is appended: a reservation lives in memory only."""
        self._check_open()
        if not lease > 0:
            raise ValueError("lease must be > 0 seconds")
        extended = self._reservations.extend(entry_ids, lease)
        if self._reservations.borrowed:
            self._borrowing.extended(entry_ids, lease)
        return extended

    async def release(self, entry_id: EntryId) -> bool:
        """Give the reserved tuple back now; ``False`` if it is not reserved."""
        return self._reservations.release(entry_id)

    def _put_live(self, arrival: int, item: Tuple) -> None:
        """A tuple back in the index at ``arrival``, offered to the waiters;
        one a withdraw took before it was due, back in the schedule."""
        if arrival == _NOT_DUE:
            self._schedule.hold(item, item.props.due)  # due meanwhile: live at once
            return
        self._index.restore(arrival, item)
        self._offer(arrival, item)

    async def take_many(self, pattern: Pattern, limit: int) -> list[Tuple]:
        """Take up to ``limit`` oldest matches in one append; never waits.
        All are taken, or (on error) none."""
        self._check_open()
        if limit < 1:
            raise ValueError("limit must be at least 1")
        found: builtins.list[Found] = []
        for _ in range(limit):
            match = self._oldest_out(pattern.prefix)
            if match is None:
                break
            found.append(match)
        if len(found) < limit and self._lender is not None:
            found += await self._borrowing.borrow(
                pattern.prefix, _TAKE_LEASE, limit - len(found), asked=False
            )
        if not found:
            return []
        return await self._taker.commit(found)

    async def withdraw(self, pattern: Pattern, limit: int) -> list[Tuple]:
        """Take up to ``limit`` matches here, live or not yet due, in one
        append; never waits, whatever is paused. Their Takes replicate as any
        take's, so every copy goes. A reserved match is left to its holder
        (its ack takes it), and so is a peer's tuple not yet live here (its
        turn to come: docs/replication.md). What a job's cancel uses
        (docs/tasks.md), so that a delayed job is gone from the counts at
        once; a take never reaches a tuple not due."""
        self._check_open()
        if limit < 1:
            raise ValueError("limit must be at least 1")
        found: builtins.list[Found] = []
        while len(found) < limit and (live := self._index.oldest(pattern.prefix)) is not None:
            removed = self._remove_live(live[1].id)
            if removed is not None:
                found.append(removed)
        while (
            len(found) < limit and (waiting := self._schedule.take_out(pattern.prefix)) is not None
        ):
            found.append((_NOT_DUE, self._dress(waiting)))
        return await self._taker.commit(found) if found else []

    async def compact(
        self, horizon: Mapping[str, int] | None = None, *, seal: bool = False
    ) -> CompactionReport:
        """Drop from the Strand what every member holds and nobody needs: the
        Writes at or below ``horizon`` that Takes at or below it killed, and
        those Takes (see :mod:`forum.node.storage.compaction`). ``horizon`` is the per-origin
        minimum of every member's vector (replication computes it); ``None``
        means this node is the whole cluster: its own vector. ``seal`` seals
        the current segment first, so that it can be compacted too."""
        self._check_open()
        stable = self.strand.vector() if horizon is None else horizon
        # The open dedup windows are kept as their keys, not as their Writes
        # and Takes (forum.node.space.dedup): saved before the pass may drop those.
        now, storage = self._schedule.now_ms(), self.strand.config.storage
        await self._dedup.save(storage, now)
        return await self.strand.compact(stable, self._live_keys, seal=seal)

    async def apply_dead(self, origin: str, ranges: Sequence[tuple[int, int]]) -> int:
        """A peer dropped these seqs of ``origin`` (``(first, last)`` ranges,
        from an anti-entropy page): they were dead everywhere it heard of.
        Whatever of them is live here (this node was cut off, or forgotten)
        is taken, durably, so it does not come back; the rest is noted dead,
        so it is never taken in again. Returns how many live tuples died."""
        self._check_open()
        candidates = self._applier.in_ranges(origin, ranges)
        self._applier.live_now(candidates)  # then taken below, as any live one
        found = self._applier.dead_out(candidates)
        if found:
            await self._taker.commit(found, rescue=False)
        await self.strand.mark_dead(origin, ranges)
        return len(found)

    async def _live_keys(self) -> set[tuple[str, int]]:
        """Every tuple not dead, in whatever place (:class:`Places`): live,
        reserved, surfacing, pooled, not due yet, a pause marker (a Write
        kept for what it says), or being taken (a write whose dedup window
        is open is kept as its key, forum.node.space.dedup). Built a slice
        at a time, so a large backlog does not stall the loop (a tuple dead
        when looked at stays dead, so no snapshot is needed)."""
        ids = self._places.ids()
        keys: set[tuple[str, int]] = set()
        for start in range(0, len(ids), _LIVE_SLICE):
            keys.update((i.origin, i.seq) for i in ids[start : start + _LIVE_SLICE])
            await asyncio.sleep(0)
        # Whatever turned live meanwhile (a write, an entry applied) is above
        # the horizon or was live before: only what was taken meanwhile is
        # kept longer than it had to be, until the next pass.
        return keys

    async def count(self, pattern: Pattern) -> int:
        """How many live tuples match."""
        return self._index.count(pattern.prefix)

    def list(self, pattern: Pattern, cursor: int = 0, limit: int = 100) -> ListPage:
        """Live matches, oldest first, a page at a time (start with cursor 0)."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        page: list[Tuple] = []
        last = cursor
        for arrival, item in self._index.iter_matching(pattern.prefix, after=cursor):
            if len(page) == limit:
                return ListPage(page, last)
            page.append(self._dress(item))
            last = arrival
        return ListPage(page, None)

    def stats(self) -> ForumStats:
        strand = self.strand.stats()
        return ForumStats(
            origin=self.strand.origin,
            entries=strand.entries,
            live=len(self._index),
            strand_bytes=strand.bytes,
            segments=strand.segments,
            waiting_takers=len(self._waiters),
            reserved=len(self._reservations),
            writes=self._writes,
            takes=self._taker.made,
            double_takes=self._applier.double_takes,
            tails_cut=strand.tails_cut,
            compactions=strand.compactions,
            bytes_reclaimed=strand.bytes_reclaimed,
            entries_dropped=strand.entries_dropped,
            vector=self.strand.vector(),
            delayed=self._delayed_count(),
            expired=self._expired,
            paused=tuple(map(prefix_text, self.paused())),
            limits={prefix_text(p): [held, limit] for p, (held, limit) in self.fill().items()},
            double_takes_by_prefix={
                prefix_text(p): n for p, n in self.double_takes_by_prefix().items()
            },
        )

    def _delayed_count(self) -> int:
        return len(self._schedule)

    # -- the seam for replication ---------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(entries, provenance)`` with every entry once it is
        durable here: ``LOCAL`` for entries made here, else what was given to
        :meth:`apply`."""
        self._listeners.entries.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.entries.remove(listener)

    def add_take_listener(self, listener: TakeListener) -> None:
        """Call ``listener(entries, taken)`` as a :meth:`add_listener` one is
        called, with ``taken``: the tuples the Takes among ``entries``
        removed here (a watcher needs their payloads to filter the Takes)."""
        self._listeners.takes.append(listener)

    def remove_take_listener(self, listener: TakeListener) -> None:
        self._listeners.takes.remove(listener)

    def add_live_listener(self, listener: LiveListener) -> None:
        """Call ``listener(tuple)`` whenever a tuple becomes live here (which,
        for a tuple from a peer, is after the remote delay, not on arrival)."""
        self._listeners.live.append(listener)

    def remove_live_listener(self, listener: LiveListener) -> None:
        self._listeners.live.remove(listener)

    def add_expiry_listener(self, listener: ExpiryListener) -> None:
        """Call ``listener(tuples)`` with the tuples that expired here, as they do."""
        self._listeners.expiry.append(listener)

    def remove_expiry_listener(self, listener: ExpiryListener) -> None:
        self._listeners.expiry.remove(listener)

    async def apply(
        self, entries: Sequence[Entry], provenance: Provenance = LOCAL
    ) -> builtins.list[Entry]:
        """Store and apply entries from elsewhere. Entries already held are
        skipped; returns the new ones. Those being stored by a concurrent call
        are skipped too, but waited for: on return every entry is held here
        (a repair pass that finds nothing new must find nothing missing).
        The listeners get the new ones with ``provenance``.

        A remote Write is durable here at once, but becomes live only after
        ``remote_delay`` times this node's rank for it (the
        :data:`~forum.node.space.surfacing.Ranking`), or later, if no taker
        here wants it then: :mod:`forum.node.space.surfacing` says how and why.
        A Take is applied at once.
        """
        self._check_open()
        new: dict[EntryId, Entry] = {}
        others: set[Awaitable[object]] = set()
        for entry in entries:
            if not isinstance(entry, Write | Take):
                raise TypeError(f"not an entry: {entry!r}")
            if entry.id in self.strand or entry.id in new:
                continue
            storing = self._applying.get(entry.id)
            if storing is not None:
                others.add(storing)
                continue
            new[entry.id] = entry
        stored = builtins.list(new.values())
        if stored:
            durable = self.strand.submit_remote(stored)
            self._applying.update(dict.fromkeys(new, durable))
            on_durable = functools.partial(self._applier.on_durable, stored, provenance)
            durable.add_done_callback(on_durable)
            await asyncio.shield(durable)
        if others:
            # Registered after on_durable: by the time this wakes, they are applied.
            await asyncio.shield(asyncio.gather(*others))
        return stored

    async def replace(self, pairs: Sequence[tuple[Entry, Entry]]) -> builtins.list[Entry]:
        """Put an origin's own entries in place of the copies held here that
        differ: ``(held, real)`` pairs with one id each (replication finds
        them, docs/replication.md "Divergence"). Returns the real entries put in.

        Nothing taken comes back and no id is handed out twice: a held Write
        live or waiting here is swapped for the real one (a real Write waits
        for its turn, a real Take is applied); one taken, reserved or being
        taken here stays so; what a held Take killed stays dead."""
        self._check_open()
        pairs = [(held, real) for held, real in pairs if real.id not in self._applying]
        replaced: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._applying.update(dict.fromkeys((real.id for _, real in pairs), replaced))
        try:
            done = await self.strand.replace([real for _, real in pairs])
        finally:
            for _, real in pairs:
                self._applying.pop(real.id, None)
            replaced.set_result(None)
        self._applier.swap(pairs, done)
        return done

    def set_ranking(self, ranking: Ranking | None) -> None:
        """Rank remote tuples with ``ranking`` from now on (``None``: the
        default, :func:`~forum.node.space.surfacing.slot_ranking`), and
        re-rank those waiting (:meth:`rerank`)."""
        self._remote.set_ranking(ranking)

    def rerank(self) -> None:
        """The ranking's answers changed (a member died, or came back): each
        tuple waiting to surface whose new turn comes earlier than its timer
        surfaces then, at once if that time has passed. None is made to wait
        longer than it was going to: a member that comes back does not hold
        back what was already on its way (at worst two nodes share a turn,
        and the Lens catches the double take). With a lender, the waiting
        takers look again at once: a writer gone down lends no more, and
        its tuples live here are theirs now. Called by replication."""
        self._remote.rerank()
        if self._lender is not None:
            self._retry_waiters()

    def set_lender(self, lender: Lender | None) -> None:
        """While a tuple's writer is alive (``lender.owns``), hand it out only
        as the writer lends it (:mod:`forum.node.space.lending`); ``None``:
        hand out every tuple here at its turn. Installed by replication."""
        self._lender = self._borrowing.lender = lender
        self._remote.owns = self._borrowing.owns if lender is not None else None
        self._reservations.returned = lender.returned if lender is not None else None

    def lend(self, asker: str, prefix: bytes, limit: int, lease: float) -> builtins.list[Lent]:
        """Reserve up to ``limit`` of this node's own live tuples under
        ``prefix`` for ``lease`` seconds, for the node of origin ``asker``
        (its Take of one ends the reservation, and counts no double take):
        the tuples, oldest first. None while the prefix is paused here."""
        self._check_open()
        if self._paused and self._admission.is_paused(prefix):
            return []
        return self._loans.lend(asker, prefix, limit, lease)

    def returned(self, asker: str, entry_ids: Sequence[EntryId]) -> int:
        """Tuples lent to ``asker`` are back: live here again. How many were."""
        return self._loans.returned(asker, entry_ids)

    def extend_lent(self, asker: str, entry_ids: Sequence[EntryId], lease: float) -> int:
        """Keep the tuples lent to ``asker`` reserved for ``lease`` seconds
        from now. How many still were."""
        return self._loans.extend(asker, entry_ids, lease)

    def _wanted(self, item: Tuple) -> bool:
        """Whether a waiting taker here wants ``item``."""
        return any(
            not waiter.future.done() and item.payload.startswith(waiter.prefix)
            for waiter in self._waiters
        )

    def _oldest_out(self, prefix: bytes) -> Found | None:
        """The oldest live match, out of the index (the caller takes or
        reserves it), unless it is pooled (aired) or there is none: then what
        the pool gives (:meth:`~forum.node.space.surfacing.RemoteTuples.steal`).
        ``None`` when the prefix is paused, or every match here is left to
        its writer for now (the waiters are tried again within ``remote_hold``)."""
        if self._paused and self._admission.is_paused(prefix):
            return None  # resume retries the waiters
        found = self._index.oldest(prefix)
        if (
            found is not None
            and found[1].id not in self._pool
            and (self._lender is None or not self._borrowing.owned(found[1].id))
        ):
            self._index.remove(found[0])
            return found if not self._props else (found[0], self._dress(found[1]))
        return self._remote.steal(prefix, found)

    def _retry_waiters(self) -> None:
        """Try the waiters again (tuples were left to their writers, or a
        prefix was resumed)."""
        for waiter in builtins.list(self._waiters):
            if waiter.future.done():
                continue
            found = self._oldest_out(waiter.prefix)
            if found is not None:
                self._waiters.remove(waiter)
                waiter.future.set_result(found)

    def _remove_live(self, entry_id: EntryId) -> Found | None:
        """Out of the index by id (and out of the pool, if aired)."""
        removed = self._index.remove_id(entry_id)
        if removed is not None:
            self._pool.pop(entry_id)
            if self._props:
                return removed[0], self._dress(removed[1])
        return removed

    # -- internals -------------------------------------------------------------

    def _add_live(self, item: Tuple) -> None:
        arrival = self._index.add(item)
        self._offer(arrival, item)

    def _offer(self, arrival: int, item: Tuple) -> None:
        """Hand a newly live tuple to the first waiter it matches, if any;
        else tell the live listeners it is there."""
        for waiter in self._waiters:
            if not waiter.future.done() and item.payload.startswith(waiter.prefix):
                if self._paused and self._admission.is_paused(waiter.prefix):
                    continue
                self._waiters.remove(waiter)
                # Asked only with a waiter that wants it: most tuples have none.
                if self._lender is not None and self._borrowing.owned(item.id):
                    # Its writer hands it out: the taker asks it.
                    waiter.future.set_result(ASK)
                    break
                self._index.remove(arrival)
                waiter.future.set_result((arrival, item))
                return
        for listener in self._live_listeners:
            try:
                listener(item)
            except Exception:
                log.exception("a Forum live listener failed")

    async def _wait(self, prefix: bytes, timeout: float, lease: float) -> Found | None:
        """A match that comes within ``timeout`` seconds, or ``None``. With a
        lender, one its writer lends us when a taker here is asked to ask
        (:data:`~forum.node.space.lending.ASK`), and every
        :data:`~forum.node.space.lending.DRY` seconds what a take would find
        now (a writer that had nothing to lend may have some again: no
        reservation of its comes back here)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            if self._lender is not None:
                left = min(left, DRY)
            found = await self._wait_once(prefix, left)
            if found is None and self._lender is None:
                return None
            if found is None or isinstance(found, Ask):
                asked = found is ASK
                found = self._oldest_out(prefix)
                if found is None and self._lender is not None:
                    lent = await self._borrowing.borrow(prefix, lease, 1, asked=asked)
                    found = lent[0] if lent else None
            if found is not None:
                return found
        return None

    async def _wait_once(self, prefix: bytes, timeout: float) -> Found | Ask | None:
        future: asyncio.Future[Found | Ask | None] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(prefix, future)
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            # The timeout may fire just as a tuple was handed over: keep it.
            if future.done() and not future.cancelled():
                return future.result()
            return None
        except asyncio.CancelledError:
            found = future.result() if future.done() and not future.cancelled() else None
            if found is not None and not isinstance(found, Ask):  # a tuple handed over: put back
                self._index.restore(*found)
                self._offer(*found)
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _check_open(self) -> None:
        if self._closed:
            raise ForumError("the Forum is closed")
        if self._schedule.unarmed:  # replayed outside a running loop
            self._schedule.arm()

    # -- closing ---------------------------------------------------------------

    async def close(self) -> None:
        """Wake every waiting taker with ``None``, settle cancelled takes, close the Strand."""
        if self._closed:
            return
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_result(None)
        self._waiters.clear()
        self._remote.close()  # they are in the Strand: live again after a restart
        self.copies.close()  # the writes stand; each answers with its copies so far
        self._schedule.close()  # due and expiry times are in the Strand: kept after a restart
        self._admission.free_room()
        self._noting.stop()
        self._reservations.close()  # never taken in the log: live again after a restart
        # Settling takes may write tuples back, so they finish before the Forum closes.
        while self._taker.settling:
            await asyncio.gather(*self._taker.settling, return_exceptions=True)
        self._closed = True
        await self.strand.close()

    async def aclose(self) -> None:
        """:meth:`close`, by the name every resource here is closed with."""
        await self.close()
