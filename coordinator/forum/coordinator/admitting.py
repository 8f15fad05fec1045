"""The worker's side of limits (forum.coordinator.limits): :class:`Admitting`
asks the worker's :class:`Admission` to admit the offers it is about to
claim, parks the ones over a limit (reserved, not claimed, so not counted as
an attempt) and ends admissions that no job runs under; :class:`OverLimit`
caps what one worker parks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from forum.coordinator.errors import LensError
from forum.coordinator.holding import Slots
from forum.coordinator.limits import Admission
from forum.coordinator.offers import Offer
from forum.coordinator.reservations import Reservations
from forum.coordinator.stats import WorkerStats

#: The worker's logger: what befalls its jobs is the worker's to report.
log = logging.getLogger("forum.coordinator.worker")

#: How many jobs a worker may park over a limit, per handler slot.
PARKED_PER_SLOT = 4


class Admitting:
    """A worker's admissions under ``admission``: its ``slots``, its
    ``reservations`` (where jobs over a limit are parked), its ``counts``
    (``over_limit``), each job admitted for ``lease`` seconds (renewed with
    the heartbeat, forum.coordinator.keeping)."""

    def __init__(
        self,
        admission: Admission,
        reservations: Reservations,
        slots: Slots,
        counts: WorkerStats,
        *,
        lease: float,
        concurrency: int,
    ) -> None:
        self.admission = admission
        self._reservations = reservations
        self._slots = slots
        self._counts = counts
        self._lease = lease
        self._parked = OverLimit(PARKED_PER_SLOT * concurrency)

    async def admitted(self, offers: list[Offer]) -> list[Offer]:
        """The offers their limits admit now. One over a limit is parked for
        the wait the Lens named: reserved, not claimed (so not counted as an
        attempt), released when the wait is over, to be offered again; the
        worker reaches past it to the others."""
        waits = await self.admission.admit(
            [(offer.key, offer.envelope.payload) for offer in offers], self._lease
        )
        over = [(o.item.id, wait) for o, wait in zip(offers, waits, strict=True) if wait > 0]
        if over:
            self._counts.over_limit += len(over)
            self._parked.add(asyncio.get_running_loop().time(), [wait for _, wait in over])
            self._slots.release(len(over))
            await self._reservations.park(over)
        return [offer for offer, wait in zip(offers, waits, strict=True) if wait <= 0]

    def full_for(self) -> float:
        """How long to reserve nothing: while this worker has parked as many
        jobs over a limit as it may (:class:`OverLimit`); 0 when it may go on."""
        return self._parked.full_for(asyncio.get_running_loop().time())

    async def release(self, keys: Sequence[str]) -> None:
        """End the admissions of ``keys`` (their jobs ended, or were not
        claimed). Best effort: one not ended expires with its lease."""
        if keys:
            try:
                await self.admission.release(keys)
            except LensError as exc:
                log.warning("could not end %d admissions (%s): they expire", len(keys), exc)


class OverLimit:
    """A worker's count of the jobs it parked over a limit, with when each
    falls due (``loop.time()``), capped at ``most``: at the cap the worker
    reserves nothing more until some fall due, so parking cannot grow
    without bound while a limit stays full."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._due: list[float] = []

    def add(self, now: float, waits: Sequence[float]) -> None:
        self._due = [at for at in self._due if at > now] + [now + wait for wait in waits]

    def full_for(self, now: float) -> float:
        """Seconds until fewer than ``most`` are parked (0 when fewer are)."""
        self._due = [at for at in self._due if at > now]
        if len(self._due) < self.most:
            return 0.0
        return sorted(self._due)[len(self._due) - self.most] - now
