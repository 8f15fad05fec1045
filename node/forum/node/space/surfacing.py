"""Remote surfacing: how a tuple written on a peer becomes live here.

A remote Write is durable here at once (:meth:`forum.node.space.forum.Forum.apply`),
but becomes live only after ``remote_delay`` times this node's rank for it
(the :data:`Ranking`). Why: every node has takers waiting, and without the
delay one write wakes a taker on every node at once, each taking the same
tuple (a double take for the Lens to catch, per node). The node it was
written on hands it out at once (rank 0); the others take their turns one
delay apart, so a node takes a tuple only after the ones ranked before it
had theirs, and a Take made in a turn usually arrives here within the delay.
With replication the ranks are among the members it considers alive, the
writer first, then an order by a hash of the id and the member that every
node computes alike (``forum.replication.ranking``): no tuple waits on a
node that is down, and the wait is at most ``remote_delay`` times the live
members less one. A Forum alone ranks 1 to 4 by a hash (:func:`slot_ranking`).

A turn is a chance, not a duty: if no taker here wants the tuple when its
turn comes, it goes into the :class:`Pool`: *held* for ``remote_hold``
seconds (not live: not read, counted or listed, and taken or reserved here
only when nothing live matches), then *aired* (live, but still taken in the
pool's order: lowest rank first, the newest first within a rank, and not
while its writer keeps pace, see :meth:`RemoteTuples.stealable`). So under a
backlog each node drains its own writes, and those whose turn came while it
had a taker waiting, before it competes for the others', and it steals from
the far end of a backlog its writer drains oldest first: else every node
drains the same oldest-first queue and, since a reservation is not
replicated (only the ack's Take is), nearly every job is reserved on every
node, a double take each. A tuple ranked 0 (this node wrote it, or the
members before us are down) is live at once, in no pool.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import Callable, Iterator

from forum.node.core.entries import EntryId, Take, Tuple
from forum.node.space.index import LiveIndex

#: How long a tuple written on another node waits per rank before it can be
#: taken here (its wait is this times this node's :data:`Ranking` of it).
REMOTE_DELAY = 0.01
#: How long a remote tuple whose turn came while no taker here wanted it is
#: held back (taken here only when nothing live matches) before it is live.
REMOTE_HOLD = 2.0
_REMOTE_SLOTS = 4
#: Pooled tuples a take looks at for the one this node ranks best, and live
#: matches it looks through for one not pooled, before it settles for the
#: oldest (bounds on the scans when other prefixes, or tuples, abound).
STEAL_SCAN = 64
#: ``ranking(entry_id)``: this node's turn for a tuple written on a peer, as a
#: whole number (0: at once); the tuple waits ``remote_delay`` times it. A Forum
#: alone ranks by :func:`slot_ranking`; replication installs a rank among the
#: live members (``forum.replication.ranking``) with ``Forum.set_ranking``.
Ranking = Callable[[EntryId], int]
#: A tuple out of the index, with the arrival it is put back with if need be.
Found = tuple[int, Tuple]


def slot_ranking(origin: str) -> Ranking:
    """The ranking of a node that knows no members, for the node whose origin
    is ``origin``: 1 to 4, by a hash of the id and the origin (so the nodes
    that did not write a tuple mostly wake in turn; with four or more of them
    some share a slot)."""

    def rank(entry_id: EntryId) -> int:
        return 1 + zlib.crc32(f"{entry_id}/{origin}".encode()) % _REMOTE_SLOTS

    return rank


class Surfacing:
    """A remote tuple waiting for its turn here, or in the pool after it
    (:class:`Pool`): since when (loop time), its rank, the timer that ends
    the wait (re-set when its rank changes), and whether it is aired (its
    hold ended: live, in the index)."""

    __slots__ = ("aired", "arrived", "handle", "item", "rank")

    def __init__(self, item: Tuple, arrived: float, rank: int, handle: asyncio.TimerHandle) -> None:
        self.item = item
        self.arrived = arrived
        self.rank = rank
        self.handle = handle
        self.aired = False


class Pool:
    """Remote tuples whose turn came while no taker here wanted them, by id
    and, held and aired apart, by rank. *Held*: not live yet, taken here only
    when nothing live matches. *Aired*: the hold ended, so the tuple is live
    (read, counted, listed, in the index), but a take that reaches it gets
    the aired match this node ranks best instead.

    Either way a take here gets the one it ranks best (lowest rank), the
    newest first within a rank: the writer drains its own tuples oldest
    first, so a node that steals from its backlog starts from the other end
    and meets it last, and two nodes never start on the same tuple (no two
    rank a tuple alike)."""

    __slots__ = ("_aired", "_by_id", "_held", "_per_origin")

    def __init__(self) -> None:
        self._by_id: dict[EntryId, Surfacing] = {}
        self._held: dict[int, dict[EntryId, Surfacing]] = {}
        self._aired: dict[int, dict[EntryId, Surfacing]] = {}
        self._per_origin: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._by_id

    def __iter__(self) -> Iterator[EntryId]:
        return iter(self._by_id)

    def values(self) -> list[Surfacing]:
        return list(self._by_id.values())

    def get(self, entry_id: EntryId) -> Surfacing | None:
        return self._by_id.get(entry_id)

    def of(self, origin: str) -> int:
        """How many pooled tuples ``origin`` wrote."""
        return self._per_origin.get(origin, 0)

    def held(self) -> list[EntryId]:
        """The ids of the held ones (not the aired)."""
        return [entry_id for bucket in self._held.values() for entry_id in bucket]

    def add(self, held: Surfacing) -> None:
        self._by_id[held.item.id] = held
        self._buckets(held).setdefault(held.rank, {})[held.item.id] = held
        origin = held.item.id.origin
        self._per_origin[origin] = self._per_origin.get(origin, 0) + 1

    def air(self, entry_id: EntryId) -> Surfacing | None:
        """The hold of ``entry_id`` ended: it is aired from now on."""
        held = self.pop(entry_id)
        if held is not None:
            held.aired = True
            self.add(held)
        return held

    def pop(self, entry_id: EntryId) -> Surfacing | None:
        held = self._by_id.pop(entry_id, None)
        if held is not None:
            buckets = self._buckets(held)
            del buckets[held.rank][entry_id]
            if not buckets[held.rank]:
                del buckets[held.rank]
            left = self._per_origin.pop(entry_id.origin) - 1
            if left:
                self._per_origin[entry_id.origin] = left
        return held

    def best(
        self,
        prefix: bytes,
        stealable: Callable[[str], bool],
        *,
        aired: bool,
        limit: int | None = None,
        priority: int | None = None,
    ) -> Surfacing | None:
        """The match ranked best here whose writer is ``stealable`` from, the
        newest first within a rank: of the held ones, and with ``aired`` of
        the aired ones too; of ``priority`` alone, when given; ``None`` if
        none is among the first ``limit`` looked at. A scan: of held tuples,
        which are held ``remote_hold`` at most; of aired ones, bounded by
        ``limit``."""
        kinds = (self._held, self._aired) if aired else (self._held,)
        looked = 0
        for rank in sorted({rank for buckets in kinds for rank in buckets}):
            found: list[Surfacing] = []
            for buckets in kinds:
                for pooled in reversed(buckets.get(rank, {}).values()):
                    item = pooled.item
                    if (
                        item.payload.startswith(prefix)
                        and (priority is None or item.props.priority == priority)
                        and stealable(item.id.origin)
                    ):
                        found.append(pooled)
                        break
                    looked += 1
                    if limit is not None and looked >= limit:
                        break
            if found:
                return max(found, key=lambda pooled: pooled.arrived)
            if limit is not None and looked >= limit:
                return None
        return None

    def clear(self) -> None:
        self._by_id.clear()
        self._held.clear()
        self._aired.clear()
        self._per_origin.clear()

    def _buckets(self, held: Surfacing) -> dict[int, dict[EntryId, Surfacing]]:
        return self._aired if held.aired else self._held


class RemoteTuples:
    """The remote tuples on their way to being live here: ``waiting`` for
    their turn (by id), then in the ``pool``; the ranking that sets their
    turns, and each writer's pace at taking its own tuples.

    The Forum owns the index, the waiters and the properties: it passes the
    index, ``add_live`` (make a tuple live: into the index, or to a waiter),
    ``wanted`` (whether a waiter here wants a tuple), ``retry_waiters`` and
    ``dress`` (a tuple with its Write's properties)."""

    __slots__ = (
        "_add_live",
        "_dress",
        "_index",
        "_origin",
        "_pace",
        "_retry",
        "_retry_waiters",
        "_wanted",
        "delay",
        "hold",
        "owns",
        "pool",
        "ranking",
        "waiting",
    )

    def __init__(
        self,
        *,
        origin: str,
        delay: float,
        hold: float,
        index: LiveIndex,
        add_live: Callable[[Tuple], None],
        wanted: Callable[[Tuple], bool],
        retry_waiters: Callable[[], None],
        dress: Callable[[Tuple], Tuple],
    ) -> None:
        if delay < 0:
            raise ValueError("remote_delay must be >= 0")
        if hold < 0:
            raise ValueError("remote_hold must be >= 0")
        self._origin = origin
        self.delay = delay
        self.hold = hold
        self.ranking = slot_ranking(origin)
        self.waiting: dict[EntryId, Surfacing] = {}
        self.pool = Pool()
        self._index = index
        self._add_live = add_live
        self._wanted = wanted
        self._retry_waiters = retry_waiters
        self._dress = dress
        # Per writer, when it took its own tuples lately; a retry of the
        # waiters when tuples were left to their writers (see ``stealable``).
        self._pace: dict[str, deque[float]] = {}
        self._retry: asyncio.TimerHandle | None = None
        #: ``owns(origin)``: whether that writer lends its tuples, which are
        #: then never handed out here (``forum.node.space.lending``).
        self.owns: Callable[[str], bool] | None = None

    def arrive(self, item: Tuple) -> None:
        """A remote tuple that may be live now: live at once if it ranks 0
        here, else waiting for its turn."""
        rank = self.ranking(item.id)
        if not rank or not self.delay:
            self._add_live(item)
            return
        loop = asyncio.get_running_loop()
        arrived = loop.time()
        handle = loop.call_at(arrived + self.delay * rank, self._surface, item.id)
        self.waiting[item.id] = Surfacing(item, arrived, rank, handle)

    def pop(self, entry_id: EntryId) -> Surfacing | None:
        """``entry_id`` out of the waiting ones or the pool, its timer left
        to the caller; ``None`` if it is in neither."""
        return self.waiting.pop(entry_id, None) or self.pool.pop(entry_id)

    def set_ranking(self, ranking: Ranking | None) -> None:
        """Rank with ``ranking`` from now on (``None``: :func:`slot_ranking`),
        and re-rank those waiting (:meth:`rerank`)."""
        self.ranking = ranking or slot_ranking(self._origin)
        self.rerank()

    def rerank(self) -> None:
        """The ranking's answers changed: each tuple waiting whose new turn
        comes earlier than its timer surfaces then, at once if that time has
        passed; none waits longer than it was going to. A held tuple that now
        ranks 0 is live at once."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for entry_id, surfacing in self.waiting.items():
            rank = self.ranking(entry_id)
            due = surfacing.arrived + self.delay * rank
            if due < surfacing.handle.when():
                surfacing.rank = rank
                surfacing.handle.cancel()
                surfacing.handle = loop.call_at(max(due, now), self._surface, entry_id)
        # A held tuple that now ranks 0 has nobody before it to wait for.
        # (Aired ones are live already, their ranks only order this node's
        # takes: they are not looked at, however many a backlog leaves.)
        for entry_id in [i for i in self.pool.held() if not self.ranking(i)]:
            if (held := self.pool.pop(entry_id)) is not None:
                held.handle.cancel()
                self._add_live(held.item)

    def _surface(self, entry_id: EntryId) -> None:
        """Its turn: live if a taker here wants it (or nobody ranks before
        us), else held for ``hold`` seconds."""
        surfacing = self.waiting.pop(entry_id)
        item = surfacing.item
        if not (surfacing.rank and self.hold) or self._wanted(item):
            self._add_live(item)
            return
        surfacing.handle = asyncio.get_running_loop().call_later(self.hold, self._unhold, entry_id)
        self.pool.add(surfacing)

    def _unhold(self, entry_id: EntryId) -> None:
        """The hold ended: live (aired), still taken in this node's order."""
        if (held := self.pool.air(entry_id)) is not None:
            self._add_live(held.item)
            if held.item.id not in self._index:  # handed to a waiter at once
                self.pool.pop(entry_id)

    def steal(self, prefix: bytes, found: Found | None) -> Found | None:
        """What a take of ``prefix`` gets when the index's oldest match,
        ``found``, is pooled (aired), or there is none: the pooled match this
        node ranks best, of a writer that is not keeping pace with its own
        backlog (:meth:`stealable`), else the oldest live match not pooled;
        with no live match, the held one so ranked. Out of the index (and the
        pool). ``None`` when every match here is left to its writer for now
        (the waiters are tried again within ``hold``)."""
        index, pool = self._index, self.pool
        live = found is not None  # and pooled: aired
        limit = STEAL_SCAN if live else None  # held ones last `hold` at most
        # The pool orders a class, not the classes: only the index's best
        # class is looked at (no tuple of a lower priority is served first).
        top = None if found is None else self._dress(found[1]).props.priority
        best = pool.best(prefix, self.stealable, aired=live, limit=limit, priority=top)
        if best is not None:
            return self._out_of_pool(best)
        owns = self.owns
        oldest = None if found is None else pool.get(found[1].id)
        if owns is None:
            if oldest is not None and index.count(prefix) > STEAL_SCAN:
                # Too many to look through for one not pooled: the oldest.
                return self._out_of_pool(oldest)
            for arrival, item in [] if found is None else index.iter_matching(prefix):
                if item.id not in pool and (item := self._dress(item)).props.priority == top:
                    index.remove(arrival)
                    return arrival, item
        elif found is not None:
            # Writers alive lend theirs: one not pooled that is not theirs, in a bounded scan.
            for looked, (arrival, item) in enumerate(index.iter_matching(prefix)):
                origin = item.id.origin
                if (
                    item.id not in pool
                    and (origin == self._origin or not owns(origin))
                    and (item := self._dress(item)).props.priority == top
                ):
                    index.remove(arrival)
                    return arrival, item
                if looked >= STEAL_SCAN:
                    break
        if pool:  # some were left to their writers, maybe
            self._retry_later()
        return None

    def stealable(self, origin: str) -> bool:
        """Whether to take tuples ``origin`` wrote that are pooled here: not
        while it keeps pace with them, i.e. while it took more of its own in
        the last ``hold`` seconds than are pooled here. Those are mostly in
        its hands already (a reservation is not replicated), and the rest it
        reaches within about that time: a copy taken here would be a double
        take, not help. A writer that stalls, or is down (then its tuples
        rank 0 somewhere), is stolen from again."""
        if self.owns is not None and self.owns(origin):
            return False  # it lends them (forum.node.space.lending)
        took = self._pace.get(origin)
        if took is not None:
            self._forget_pace(origin, took)
        return took is None or not took or self.pool.of(origin) > len(took)

    def note_pace(self, take: Take) -> None:
        """A Take from a peer: if its writer took one of its own tuples, that
        counts to its pace (see :meth:`stealable`)."""
        if take.id.origin == take.target.origin and self.hold:
            took = self._pace.setdefault(take.id.origin, deque())
            took.append(asyncio.get_running_loop().time())
            self._forget_pace(take.id.origin, took)

    def _forget_pace(self, origin: str, took: deque[float]) -> None:
        """Drop the takes older than ``hold`` (so a writer's pace costs what
        it took in that time, at most)."""
        since = asyncio.get_running_loop().time() - self.hold
        while took and took[0] < since:
            took.popleft()
        if not took:
            del self._pace[origin]

    def _retry_later(self) -> None:
        """Some tuples were left to their writers: try the waiters again in
        ``hold`` seconds (a writer may have stalled by then)."""
        if self._retry is None:
            loop = asyncio.get_running_loop()
            self._retry = loop.call_later(self.hold, self.retry_now)

    def retry_now(self) -> None:
        """Try the waiters again now (a pending retry is done with)."""
        self._retry = None
        self._retry_waiters()

    def _out_of_pool(self, pooled: Surfacing) -> Found:
        """A pooled tuple out of the pool (and of the index, if aired), with
        an arrival to be put back with if need be."""
        entry_id = pooled.item.id
        self.pool.pop(entry_id)
        if pooled.aired and (removed := self._index.remove_id(entry_id)) is not None:
            return removed[0], pooled.item
        pooled.handle.cancel()
        arrival = self._index.add(pooled.item)
        self._index.remove(arrival)
        return arrival, pooled.item

    def close(self) -> None:
        """Stop every timer: the tuples are in the Strand, live again after a restart."""
        for surfacing in [*self.waiting.values(), *self.pool.values()]:
            surfacing.handle.cancel()
        self.waiting.clear()
        self.pool.clear()
        if self._retry is not None:
            self._retry.cancel()
