"""Lending: while a tuple's writer is alive, only the writer hands it out.

A reservation is not replicated (only the ack's Take is), so a node that
hands out a copy of a peer's tuple cannot know that the peer has it in hand
already: both hand it out, a double take for the Lens to catch, a job later.
So while a tuple's writer is alive (a :class:`Lender`, installed by
replication with ``Forum.set_lender``, says so from its membership), a node
never hands out the writer's tuples itself: a take or reserve here that
finds none of its own asks the writer to **lend** it some (one round trip,
up to the number wanted): the writer reserves them for this node, as it
would for a taker of its own, and sends them. Here they are taken or
reserved as usual. The ack's Take reaches the writer as any Take does and
ends its reservation (not a double take: it was ours); a release here, or
the lease running out, hands them back (:meth:`Lender.returned`), and a
heartbeat's extension is passed on (:meth:`Lender.extended`).

What is asked, and when (timelines in docs/replication.md "Lending"):

- A remote tuple still has its turn here (``forum.node.space.surfacing``):
  when a taker here wants it at its turn, the taker asks the writer instead
  of taking it (the writer, rank 0, had its chance first).
- A take that finds nothing of its own asks the writer of the oldest match
  here it may not take itself, unless that writer had nothing to lend it for
  that prefix within ``DRY`` (it is *dry*: its tuples are in hand there;
  a worker's reservations ahead are given back within 0.2 s, so not long).
- The writer does not answer within the lender's bound, or is not alive (a
  partition, a crash: its membership's failure detector): its tuples are
  handed out here as before lending, at their turns.

Each node hands out its own tuples oldest first, and lends what its takers
leave: a tuple is handed out once cluster-wide while its writer is reachable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from forum.node.core.entries import EntryId, Tuple, Write
from forum.node.space.index import LiveIndex
from forum.node.space.places import Place, Places
from forum.node.space.reservations import Reservations
from forum.node.space.surfacing import STEAL_SCAN, Found, Pool, RemoteTuples


@dataclass(frozen=True, slots=True)
class Lent:
    """A tuple its writer reserved for another node: the Write, and how many
    times it has been handed out there (``Reserved.deliveries``)."""

    write: Write
    deliveries: int


class Lender(Protocol):
    """The writers of remote tuples, as replication knows them."""

    def owns(self, origin: str) -> bool:
        """Whether the node of ``origin`` is alive: it hands out its tuples."""

    async def borrow(
        self, origin: str, prefix: bytes, limit: int, lease: float
    ) -> Sequence[Lent] | None:
        """Ask ``origin``'s node to reserve for us up to ``limit`` of its
        tuples under ``prefix`` for ``lease`` seconds: those it lent (stored
        here before this returns, as any entry from a peer); ``None`` if it
        did not answer within the lender's bound."""

    def returned(self, origin: str, entry_ids: Sequence[EntryId]) -> None:
        """Tell ``origin``'s node (without waiting) that its tuples lent to us
        are back: released, or run out here."""

    def extended(self, origin: str, entry_ids: Sequence[EntryId], lease: float) -> None:
        """Tell ``origin``'s node (without waiting) to keep its tuples lent to
        us reserved for ``lease`` seconds from now."""


#: Seconds a writer that had nothing to lend for a prefix is not asked again
#: for it unbidden; and how often a waiting take here looks again. Short:
#: what it has in hand comes back within a worker's hold of reservations
#: made ahead (0.2 s), and a node with idle takers should find it soon.
DRY = 0.25


class Ask:
    """What a waiting taker is handed instead of a tuple: a tuple it wants
    came up whose writer lends it (ask the writer)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ASK"


ASK = Ask()


class Borrowing:
    """This node's side of lending: which writers are asked for what, and
    the tuples they lend, out of their places here. The Forum passes its
    index, places, remote tuples, reservations and ``dress`` (a tuple with
    its Write's properties: the index keeps only the priority)."""

    __slots__ = (
        "_dress", "_dry", "_index", "_origin", "_places", "_remote", "_reservations", "lender",
    )  # fmt: skip

    def __init__(
        self,
        *,
        origin: str,
        index: LiveIndex,
        places: Places,
        remote: RemoteTuples,
        reservations: Reservations,
        dress: Callable[[Tuple], Tuple],
    ) -> None:
        self._origin = origin
        self._index = index
        self._places = places
        self._remote = remote
        self._reservations = reservations
        self._dress = dress
        self.lender: Lender | None = None
        #: (writer, prefix) -> loop time until which it is not asked unbidden.
        self._dry: dict[tuple[str, bytes], float] = {}

    def owned(self, entry_id: EntryId) -> bool:
        """Whether ``entry_id`` is another node's, which hands it out itself."""
        lender = self.lender
        return (
            lender is not None and entry_id.origin != self._origin and lender.owns(entry_id.origin)
        )

    def owns(self, origin: str) -> bool:
        """:meth:`owned`, by the writer's origin."""
        lender = self.lender
        return lender is not None and origin != self._origin and lender.owns(origin)

    async def borrow(self, prefix: bytes, lease: float, limit: int, asked: bool) -> list[Found]:
        """Up to ``limit`` tuples under ``prefix`` lent by the writer of the
        oldest match here this node may not take itself (``asked``: a taker
        was woken for one, so a dry writer is asked too), out of their places
        here; if that writer does not answer in time, that match, taken here.
        ``[]`` when there is none to ask for, or nothing was lent."""
        lender = self.lender
        wanted = self._wanted(prefix, asked)
        if lender is None or wanted is None:
            return []
        origin = wanted.origin
        lent = await lender.borrow(origin, prefix, limit, lease)
        if lent is None:  # not in time: the writer is slow, or going down
            found = self._out(wanted)
            return [] if found is None else [found]
        if not lent:
            self._dry[(origin, prefix)] = asyncio.get_running_loop().time() + DRY
            return []
        self._dry.pop((origin, prefix), None)
        claimed: list[Found] = []
        unwanted: list[EntryId] = []
        for one in lent:
            found = self._out(one.write.id, one.write)
            if found is None:  # taken here meanwhile (a Take came): give it back
                unwanted.append(one.write.id)
                continue
            if one.deliveries > 1:
                self._reservations.lapses[one.write.id] = one.deliveries - 1
            claimed.append(found)
        if unwanted:
            lender.returned(origin, unwanted)
        return claimed

    def extended(self, entry_ids: Sequence[EntryId], lease: float) -> None:
        """Reservations here were extended: those lent us, at their writers too."""
        lender, borrowed = self.lender, self._reservations.borrowed
        if lender is None:
            return
        by_writer: dict[str, list[EntryId]] = {}
        for entry_id in entry_ids:
            if (writer := borrowed.get(entry_id)) is not None:
                by_writer.setdefault(writer, []).append(entry_id)
        for writer, ids in by_writer.items():
            lender.extended(writer, ids, lease)

    def _wanted(self, prefix: bytes, asked: bool) -> EntryId | None:
        """The match here a take would serve first (the highest priority, then
        the oldest) whose writer lends it (and is not dry, unless ``asked``):
        live (a bounded scan), else held in the pool."""
        now = asyncio.get_running_loop().time()
        dry = self._dry
        if dry:
            for key in [key for key, until in dry.items() if until <= now]:
                del dry[key]

        def askable(origin: str) -> bool:
            return self.owns(origin) and (asked or (origin, prefix) not in dry)

        best: Tuple | None = None  # the highest priority, then the oldest
        for looked, (_, item) in enumerate(self._index.iter_matching(prefix)):
            if askable(item.id.origin) and (
                best is None or item.props.priority > best.props.priority
            ):
                best = item
            if looked >= STEAL_SCAN:
                break
        if best is not None:
            return best.id
        held = self._remote.pool.best(prefix, askable, aired=False, limit=STEAL_SCAN)
        return None if held is None else held.item.id

    def _out(self, entry_id: EntryId, write: Write | None = None) -> Found | None:
        """``entry_id`` out of its place here (live, waiting for its turn,
        pooled or not due), with an arrival to be put back with; ``None`` if
        it is in none of those (reserved, being taken, or dead here)."""
        if self._places.where(entry_id) not in _TAKEABLE:
            return None
        item = self._places.remove(entry_id)
        if item is None:
            return None
        # Its key, expiry and the rest: a lent Write carries them; one taken
        # here (its writer did not answer) has them from this node's table.
        item = self._dress(item) if write is None else Tuple(write.id, write.payload, write.props)
        arrival = self._index.add(item)
        self._index.remove(arrival)
        return arrival, item


#: The places a lent tuple is taken out of.
_TAKEABLE = frozenset({Place.INDEX, Place.SURFACING, Place.POOL, Place.SCHEDULE})


class Loans:
    """The writer's side of lending: its own live tuples reserved for the
    nodes that ask (``Reservations.lent`` says for whom), given back and
    extended as they say. The Forum passes its index, pool, reservations and
    ``dress`` (a tuple with its Write's properties)."""

    __slots__ = ("_dress", "_index", "_origin", "_pool", "_reservations")

    def __init__(
        self,
        *,
        origin: str,
        index: LiveIndex,
        pool: Pool,
        reservations: Reservations,
        dress: Callable[[Tuple], Tuple],
    ) -> None:
        self._origin = origin
        self._index = index
        self._pool = pool
        self._reservations = reservations
        self._dress = dress

    def lend(self, asker: str, prefix: bytes, limit: int, lease: float) -> list[Lent]:
        """Up to ``limit`` of this node's own live tuples under ``prefix``,
        reserved for ``asker`` for ``lease`` seconds (its Take of one ends
        the loan, and counts no double take), in the order a take here
        serves them."""
        if not lease > 0:
            raise ValueError("lease must be > 0 seconds")
        reservations = self._reservations
        found = lend_from(
            self._index, self._origin, prefix, limit, lambda item: item.id not in self._pool
        )
        lent: list[Lent] = []
        for arrival, live in found:
            handed = reservations.hand_out(arrival, self._dress(live), lease)
            reservations.lent[handed.id] = asker
            lent.append(Lent(Write(handed.id, handed.payload, handed.props), handed.deliveries))
        return lent

    def returned(self, asker: str, entry_ids: Sequence[EntryId]) -> int:
        """Tuples lent to ``asker`` are back: live here again. How many were."""
        lent = self._reservations.lent
        back = [i for i in entry_ids if lent.get(i) == asker]
        return sum(self._reservations.release(entry_id) for entry_id in back)

    def extend(self, asker: str, entry_ids: Sequence[EntryId], lease: float) -> int:
        """Keep the tuples lent to ``asker`` reserved ``lease`` seconds from
        now. How many still were."""
        if not lease > 0:
            raise ValueError("lease must be > 0 seconds")
        lent = self._reservations.lent
        kept = [i for i in entry_ids if lent.get(i) == asker]
        return sum(self._reservations.extend(kept, lease))


def lend_from(
    index: LiveIndex,
    origin: str,
    prefix: bytes,
    limit: int,
    lendable: Callable[[Tuple], bool],
) -> list[Found]:
    """Up to ``limit`` of this node's own live tuples under ``prefix``
    (``origin``'s) that are ``lendable``, out of the index, in the order a
    take here serves (the highest priority first, then the oldest). Others'
    tuples met on the way are put back in their places; past ``STEAL_SCAN``
    of them, no more is looked for (a bound on the scan)."""
    found: list[Found] = []
    passed: list[Found] = []
    while len(found) < limit and len(passed) < STEAL_SCAN:
        best = index.oldest(prefix)
        if best is None:
            break
        index.remove(best[0])
        if best[1].id.origin == origin and lendable(best[1]):
            found.append(best)
        else:
            passed.append(best)
    for arrival, item in passed:
        index.restore(arrival, item)
    return found
