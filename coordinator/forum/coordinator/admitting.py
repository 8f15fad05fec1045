"""The worker's side of limits (forum.coordinator.limits): :class:`Admitting`
asks the worker's :class:`Admission` to admit the offers it is about to
claim, parks the ones over a limit (reserved, not claimed, so not counted as
an attempt), ends admissions that no job runs under, and wakes the jobs it
parked over a concurrency limit when it frees a slot of it;
:class:`OverLimit` keeps what one worker parks, and caps it."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence

from forum.coordinator.errors import LensError
from forum.coordinator.holding import Slots
from forum.coordinator.limits import Admission, Wait
from forum.coordinator.offers import Offer
from forum.coordinator.reservations import Reservations
from forum.coordinator.stats import WorkerStats
from forum.node.core.entries import EntryId

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
        the wait the Lens named, or until this worker frees a slot of the
        limit (:meth:`release`): reserved, not claimed (so not counted as an
        attempt), then released, to be offered again; the worker reaches
        past it to the others."""
        waits = await self.admission.admit(
            [(offer.key, offer.envelope.payload) for offer in offers], self._lease
        )
        pairs = list(zip(offers, waits, strict=True))
        over = [(offer.item.id, wait) for offer, wait in pairs if wait.seconds > 0]
        if over:
            self._counts.over_limit += len(over)
            self._parked.add(asyncio.get_running_loop().time(), over)
            self._slots.release(len(over))
            await self._reservations.park([(entry_id, wait.seconds) for entry_id, wait in over])
        return [offer for offer, wait in pairs if wait.seconds <= 0]

    def full_for(self) -> float:
        """How long to reserve nothing: while this worker has parked as many
        jobs over a limit as it may (:class:`OverLimit`); 0 when it may go on."""
        return self._parked.full_for(asyncio.get_running_loop().time())

    async def release(self, keys: Sequence[str]) -> None:
        """End the admissions of ``keys`` (their jobs ended, or were not
        claimed), and wake a job parked over each limit a slot of which this
        freed. Best effort: one not ended expires with its lease (and the
        jobs parked over it ask again when their wait is over)."""
        if keys:
            try:
                freed = await self.admission.release(keys)
            except LensError as exc:
                log.warning("could not end %d admissions (%s): they expire", len(keys), exc)
                return
            if freed:
                woken = self._parked.wake(asyncio.get_running_loop().time(), freed)
                if woken:
                    self._reservations.wake(woken)


class OverLimit:
    """The jobs a worker parked over a limit: when each falls due
    (``loop.time()``) and the concurrency limits a freed slot of which wakes
    it, capped at ``most``: at the cap the worker reserves nothing more
    until enough fall due (:meth:`full_for`; one woken meanwhile no longer
    counts), so parking cannot grow without bound while a limit stays full."""

    def __init__(self, most: int) -> None:
        self.most = most
        #: Per job parked, in the order parked: when it falls due, and its limits.
        self._parked: dict[EntryId, tuple[float, tuple[str, ...]]] = {}

    def add(self, now: float, parked: Sequence[tuple[EntryId, Wait]]) -> None:
        self._drop_due(now)
        for entry_id, wait in parked:
            self._parked.pop(entry_id, None)  # parked again: last in the order
            self._parked[entry_id] = (now + wait.seconds, wait.on)

    def wake(self, now: float, freed: Sequence[str]) -> list[EntryId]:
        """The jobs to release now that a slot of each limit named in
        ``freed`` (a name per slot) is free: per slot, the one parked longest
        over that limit; no longer counted."""
        self._drop_due(now)
        slots = Counter(freed)
        woken = []
        for entry_id, (_, on) in self._parked.items():
            name = next((name for name in on if slots[name] > 0), None)
            if name is not None:
                slots[name] -= 1
                woken.append(entry_id)
        for entry_id in woken:
            del self._parked[entry_id]
        return woken

    def full_for(self, now: float) -> float:
        """Seconds until fewer than ``most`` are parked (0 when fewer are)."""
        self._drop_due(now)
        if len(self._parked) < self.most:
            return 0.0
        due = sorted(at for at, _ in self._parked.values())
        return due[len(due) - self.most] - now

    def _drop_due(self, now: float) -> None:
        """Forget the jobs fallen due: released already."""
        self._parked = {i: parked for i, parked in self._parked.items() if parked[0] > now}
