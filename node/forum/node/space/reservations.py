"""Reservations: tuples handed out for a lease, out of the index until acked.

``Forum.reserve`` takes the oldest match out of the index for ``lease``
seconds without writing anything; :meth:`Reservations.extend` renews the
lease (a worker's heartbeat keeps a running job reserved); ``Forum.ack``
then takes it for good (appends the Take); :meth:`Reservations.release`, or
the lease running out (a *lapse*), or a restart of the node, puts it back.
A consumer that dies between receiving a tuple and making it safe elsewhere
(a claim in the Lens) therefore loses nothing: the tuple comes back.

A reservation lives in memory only: nothing of it is in the Strand, and it
is not replicated (only the ack's Take is). A tuple reserved here may be
*lent* to another node (``lent``: the writer reserves it for the node that
asked, :mod:`forum.node.space.lending`) or *borrowed* from its writer
(``borrowed``: a release, or the lease running out, tells the writer,
through ``returned``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence

from forum.node.core.entries import EntryId, Properties, Reserved, Tuple

log = logging.getLogger(__name__)


class Reservations:
    """The reserved tuples, by id: each with its arrival in the index (to be
    put back in its old place) and the timer of its lease; and ``lapses``,
    per live tuple whose leases ran out, how many times (a job that kills
    every worker that runs it shows here, ``Reserved.deliveries``; an entry
    goes when its tuple is taken, here or elsewhere, which the Forum sees
    to). ``restore`` (the Forum's) puts a tuple back in the index at its
    arrival and offers it to the waiters. ``lent``: per tuple reserved here
    for another node, that node's origin; ``borrowed``: per tuple reserved
    here that its writer lent us, the writer's origin, which ``returned``
    is told of when the tuple comes back here (released, or run out)."""

    __slots__ = ("_held", "_restore", "borrowed", "lapses", "lent", "returned")

    def __init__(self, lapses: dict[EntryId, int], restore: Callable[[int, Tuple], None]) -> None:
        self._held: dict[EntryId, tuple[int, Reserved, asyncio.TimerHandle]] = {}
        self.lapses = lapses
        self._restore = restore
        self.lent: dict[EntryId, str] = {}
        self.borrowed: dict[EntryId, str] = {}
        self.returned: Callable[[str, Sequence[EntryId]], None] | None = None

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._held

    def __iter__(self) -> Iterator[EntryId]:
        return iter(self._held)

    def hand_out(self, arrival: int, item: Tuple, lease: float) -> Reserved:
        """Reserve ``item``, out of the index from ``arrival``, for ``lease``
        seconds: the tuple with how many times it has been handed out."""
        handed = Reserved(item.id, item.payload, item.props, self.lapses.get(item.id, 0) + 1)
        expiry = asyncio.get_running_loop().call_later(lease, self._expire, item.id)
        self._held[item.id] = (arrival, handed, expiry)
        return handed

    def pop(self, entry_id: EntryId) -> tuple[int, Reserved] | None:
        """The reservation of ``entry_id`` ended here (acked, taken, expired
        elsewhere): its arrival and tuple, its lease stopped; ``None`` if it
        is not reserved."""
        reservation = self._held.pop(entry_id, None)
        if reservation is None:
            return None
        arrival, handed, expiry = reservation
        expiry.cancel()
        if self.lent:
            self.lent.pop(entry_id, None)
        if self.borrowed:
            self.borrowed.pop(entry_id, None)
        return arrival, handed

    def extend(self, entry_ids: Sequence[EntryId], lease: float) -> list[bool]:
        """Renew the leases of ``entry_ids`` to ``lease`` seconds from now;
        one flag per id, in order: ``False`` for one not reserved."""
        loop = asyncio.get_running_loop()
        extended = []
        for entry_id in entry_ids:
            reservation = self._held.get(entry_id)
            if reservation is not None:
                arrival, item, expiry = reservation
                expiry.cancel()
                renewed = loop.call_later(lease, self._expire, entry_id)
                self._held[entry_id] = (arrival, item, renewed)
            extended.append(reservation is not None)
        return extended

    def release(self, entry_id: EntryId) -> bool:
        """Give the reserved tuple back now; ``False`` if it is not reserved."""
        writer = self.borrowed.get(entry_id) if self.borrowed else None
        reservation = self.pop(entry_id)
        if reservation is None:
            return False
        self._put_back(*reservation, writer)
        return True

    def keep_real(self, entry_id: EntryId, payload: bytes, props: Properties) -> None:
        """The real bytes of a reserved tuple's Write (``Forum.replace``): a
        release, or a lease run out, puts them back."""
        reservation = self._held.get(entry_id)
        if reservation is not None:
            arrival, handed, expiry = reservation
            kept = dataclasses.replace(handed, payload=payload, props=props)
            self._held[entry_id] = (arrival, kept, expiry)

    def count(self, prefix: bytes) -> int:
        """How many reserved tuples fall under ``prefix``."""
        return sum(1 for _, r, _ in self._held.values() if r.payload.startswith(prefix))

    def groups(self, separator: bytes, most: int) -> dict[bytes, int]:
        """Per group of the reserved tuples (a payload up to and including
        its first ``separator``), how many; at most ``most`` groups."""
        reserved: dict[bytes, int] = {}
        for _, item, _ in self._held.values():
            cut = item.payload.find(separator)
            group = item.payload if cut < 0 else item.payload[: cut + len(separator)]
            if group in reserved or len(reserved) < most:
                reserved[group] = reserved.get(group, 0) + 1
        return reserved

    def close(self) -> None:
        """Stop every lease: never taken in the log, so live again after a restart."""
        for _, _, expiry in self._held.values():
            expiry.cancel()
        self._held.clear()
        self.lapses.clear()
        self.lent.clear()
        self.borrowed.clear()

    def _expire(self, entry_id: EntryId) -> None:
        writer = self.borrowed.get(entry_id) if self.borrowed else None
        reservation = self.pop(entry_id)
        if reservation is not None:
            arrival, handed = reservation
            log.info("reservation of %s expired: it is live again", entry_id)
            self.lapses[entry_id] = handed.deliveries
            self._put_back(arrival, handed, writer)

    def _put_back(self, arrival: int, handed: Reserved, writer: str | None) -> None:
        """A reserved tuple live again, as the plain tuple it was; one its
        ``writer`` lent us goes back to it too (so that it can hand it out)."""
        if writer is not None and self.returned is not None:
            self.returned(writer, [handed.id])
        self._restore(arrival, Tuple(handed.id, handed.payload, handed.props))
