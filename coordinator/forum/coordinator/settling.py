"""How a worker settles a claimed job once its handler is over, or was never
run (:class:`Settling`): the node's reservation (``job.entry_id``) holds the
job until this settles it.

* Done: the claim is completed, batched with other finished jobs, off the
  slot's critical path (:mod:`forum.coordinator.completions`), and only then
  the reservation acked (the Take is appended).
* The handler raised: the claim is released with the failure (the Lens
  records the next attempt and when it is due, or that the job is buried,
  in the same call), then the next attempt (the
  attempt count and error in the trailer, ``not_before`` after a jittered
  exponential backoff) is written into the space, *then* the failed
  reservation is acked: the job is always in the space, as e1 or as the
  retry (a worker dying between the write and the ack leaves both; the claim
  key lets one of them run at a time). After ``max_attempts`` the written
  bytes are a dead letter under ``dead_prefix``. A handler that raised
  :class:`forum.coordinator.job.RetryAfter` chose the delay itself, and is retried
  past ``max_attempts``; one that raised :class:`forum.coordinator.job.GiveUp` is
  buried at once (forum.coordinator.job).
* The job killed its worker (or the worker died while running it): the node
  counts the leases of a tuple that ran out unsettled
  (``Reserved.deliveries``), and the worker counts each as an attempt: a
  delivery is attempt ``envelope.attempt + deliveries - 1``, or the
  Lens's count when higher (a claim whose lease ran out counts, on any
  node: ``HeldClaim.lapsed``). One past
  ``max_attempts`` is not run: once claimed (so not a copy of a job done or
  running elsewhere), it is buried as a dead letter with the error
  :data:`LOST_WORKER` (write the dead letter, then ack). So a job that
  crashes every worker that runs it ends in ``dead/`` after ``max_attempts``
  deliveries, not in a crash loop. The count lives in the node's memory and
  in the Lens: only both forgetting starts it again.
* Abandoned in the drain, or its claim forgotten by Redis (a state loss:
  :meth:`forum.coordinator.keeping.ClaimKeeper.note_state_loss`): the claim
  is released (if still held) and the reservation: live again at once.
* Its claim lost to another holder: nothing is touched. The reservation runs
  out (or the new holder, who reserved the same tuple, settles it).
* Cancelled (its claim retired by a cancel): the reservation is acked.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from forum.coordinator.authority import Failed
from forum.coordinator.completions import Completions
from forum.coordinator.deadletter import bury
from forum.coordinator.envelope import Envelope
from forum.coordinator.errors import ClaimLost, LensError
from forum.coordinator.job import Backoff, GiveUp, Job, RetryAfter
from forum.coordinator.keeping import ClaimKeeper, Interrupted
from forum.coordinator.reservations import Reservations
from forum.coordinator.stats import WorkerStats

#: The worker's logger: how its jobs end is the worker's to report.
log = logging.getLogger("forum.coordinator.worker")

#: The error a dead letter carries when the job's workers died running it.
LOST_WORKER = "the worker was lost: its lease expired"


@dataclass(frozen=True, slots=True, kw_only=True)
class Settling:
    """Settles the worker's jobs (see the module docstring). ``write_back``
    writes a job into the space (``False`` if it could not), ``outage_waits``
    gives the waits between tries of a call while Redis is down: both the
    worker's, so its one outage policy and its stop deadline hold here too."""

    keeper: ClaimKeeper
    reservations: Reservations
    completions: Completions
    counts: WorkerStats
    max_attempts: int
    backoff: Backoff
    dead_prefix: bytes
    rng: random.Random
    write_back: Callable[[bytes], Awaitable[bool]]
    outage_waits: Callable[[], Iterator[float]]

    async def settle(
        self,
        job: Job,
        envelope: Envelope,
        interrupted: Interrupted | None,
        error: Exception | None,
        forgotten: bool,
    ) -> None:
        """The end of a job whose handler ran: done, failed, abandoned or
        forgotten, lost, or cancelled (see the module docstring). Should a
        failed job's write fail, the reservation is left to run out and the
        job comes back, its lapse counted as the failed attempt."""
        if interrupted == "abandoned" or (
            forgotten and (interrupted == "lost" or isinstance(error, LensError))
        ):
            await self.keeper.release(
                job.claim, self.outage_waits()
            )  # a forgotten one is ClaimLost: fine
            await self.reservations.release([job.entry_id])
            if forgotten:
                self.counts.rescued += 1
                log.warning("%s: Redis forgot its claim; its reservation is released", job.key)
            else:
                self.counts.handed_back += 1
            return
        if interrupted == "cancelled":
            await self.reservations.ack([job.entry_id])  # the job is over: not re-offered
            return
        if interrupted == "lost" or isinstance(error, ClaimLost):
            self.counts.claims_lost += 1
            log.warning(
                "claim on %s lost while its handler ran (%s)", job.key, error or "cancelled"
            )
            return
        if error is None:
            await self.completions.submit(job.claim, job.entry_id)
        elif isinstance(error, GiveUp):
            await self.failure(job, envelope, error.error, last=True)
        elif isinstance(error, RetryAfter):
            await self.failure(job, envelope, error.error, last=False, delay=error.delay)
        else:
            await self.failure(job, envelope, f"{type(error).__name__}: {error}")

    async def lost_worker(self, job: Job, envelope: Envelope) -> None:
        """Bury a job claimed past ``max_attempts`` only by deliveries whose
        workers died, without running it: the attempt that failed is the one
        before this delivery."""
        made = job.attempt - 1
        log.warning("%s: its worker was lost on attempt %d of %d: burying it",
                    job.key, made, self.max_attempts)  # fmt: skip
        await self.failure(job, envelope.at_attempt(made), LOST_WORKER)

    async def failure(
        self,
        job: Job,
        envelope: Envelope,
        error: str,
        *,
        last: bool | None = None,
        delay: float | None = None,
    ) -> None:
        """Attempt ``envelope.attempt`` failed with ``error``: release the
        claim, write the next attempt (or after the last, the dead letter),
        then ack the failed reservation. The handler may have said whether
        this was the last (``GiveUp``, ``RetryAfter``) and when the next is
        due; else ``max_attempts`` and the backoff decide."""
        log.info("%s attempt %d failed: %s", job.key, envelope.attempt, error)
        if last is None:
            last = envelope.attempt >= self.max_attempts
        if last:
            payload = bury(envelope.failed(error), self.dead_prefix)
        else:
            if delay is None:
                delay = self.backoff.delay(envelope.attempt, self.rng)
            payload = envelope.next_attempt(error, time.time() + delay if delay else None).seal()
        # Released first, so the next attempt, once due, finds the key free;
        # the Lens counts the failure in the same call, so a copy of the job
        # met anywhere from now on is the next attempt, due when this one's is
        # (or, after the last, not run at all).
        failed = Failed(None if last else delay, envelope.revived)
        await self.keeper.release(job.claim, self.outage_waits(), failed)
        if await self.write_back(payload):
            await self.reservations.ack([job.entry_id])
            if last:
                self.counts.dead += 1
            else:
                self.counts.retried += 1
