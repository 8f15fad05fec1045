"""The claims of a worker's running jobs, kept (:class:`ClaimKeeper`): each
handler runs in a task of its own, the heartbeat extends the claims of all
of them in one call, and a claim lost, a state loss, a cancel or the drain
cancels the handler, saying why (the worker's module docstring,
forum.coordinator.worker, tells what follows).

A cancel (cancel.lua) retires a running job's claim in Redis; the worker
hears of it by asking, every :data:`CANCEL_WATCH` seconds while it runs
jobs, whether each running claim's key was cancelled under it (one round
trip for all of them, cancelled.lua): so a cancelled handler stops within
that, not at the next heartbeat (a third of a lease). Asking rather than
being told (Redis pub/sub) because a message is lost on a reconnect while an
answer is not, the ask goes through the ``ClaimAuthority`` seam (the
in-memory authority too) and any Redis (Sentinel, Cluster: one script per
key's shard, as every call), and it costs a read per running job per
interval and nothing to an idle worker."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from forum.coordinator.authority import ClaimAuthority, Failed, HeldClaim
from forum.coordinator.availability import Availability
from forum.coordinator.errors import ClaimLost, LensError
from forum.coordinator.job import Handler, Job
from forum.coordinator.limits import Admission
from forum.coordinator.presence import HEAD
from forum.coordinator.reservations import Reservations
from forum.coordinator.stats import WorkerStats
from forum.node.core.cancellation import wait_event
from forum.node.core.entries import EntryId

#: The worker's logger: what befalls its claims is the worker's to report.
log = logging.getLogger("forum.coordinator.worker")

Interrupted = Literal["lost", "abandoned", "cancelled"]

#: How often a worker running jobs asks whether any was cancelled (seconds).
CANCEL_WATCH = 0.5


@dataclass(slots=True)
class Running:
    """A job whose handler runs now, as the heartbeat and the drain see it."""

    claim: HeldClaim
    #: The Lens's ``state_losses`` when the claim was asked for: a claim from
    #: before a loss the worker has since seen is gone with Redis's state.
    generation: int
    #: The reserved tuple the job came from (the heartbeat renews it).
    entry_id: EntryId
    #: The start of the job's payload, for the presence record (a group of jobs).
    head: bytes = b""
    #: Why the worker cancelled the handler, if it did.
    interrupted: Interrupted | None = None


class ClaimKeeper:
    """The running handlers of one worker, and the claims they run under.

    ``counts`` is the worker's own :class:`WorkerStats`, which this adds to
    (the state losses it notes, the claims found lost at a release);
    ``loss_pause`` is how long no job is claimed after a state loss
    (:meth:`note_state_loss`)."""

    def __init__(
        self,
        lens: ClaimAuthority,
        availability: Availability,
        reservations: Reservations,
        counts: WorkerStats,
        *,
        owner: str,
        lease: float,
        loss_pause: float,
    ) -> None:
        self._lens = lens
        #: Told of each Lens error the beat and a release meet.
        self._availability = availability
        #: Where the running jobs' reservations are renewed, beside their claims.
        self._reservations = reservations
        self._counts = counts
        self._owner = owner
        #: Claims are extended each third of it.
        self._lease = lease
        self._loss_pause = loss_pause
        #: The running handlers: each is its own task, cancelled to stop it.
        self.running: dict[asyncio.Task[None], Running] = {}
        #: The Lens's state_losses as this worker last saw it.
        self.generation = lens.state_losses
        #: time.monotonic() before which no job is claimed (after a state loss).
        self._claim_after = 0.0
        #: The limits the running jobs were admitted under (the worker's), if any.
        self.admission: Admission | None = None

    async def run_handler(
        self, handler: Handler, job: Job, generation: int
    ) -> tuple[Interrupted | None, Exception | None]:
        """Run ``handler(job)`` in a task of its own, which the heartbeat, the
        state loss or the drain cancel to stop it (marking why first); why it
        was stopped, if it was, and what it raised, if it did."""
        if generation < self.generation:
            # Claimed before a loss the worker saw while this job waited to
            # start: the claim is gone, so the handler must not run.
            return None, ClaimLost(job.key, job.token, "Redis lost the Lens's state")
        task = asyncio.create_task(handler(job), name=f"handler {job.key}")
        state = self.running[task] = Running(
            job.claim, generation, job.entry_id, job.payload[:HEAD]
        )
        try:
            await asyncio.wait((task,))
        finally:
            del self.running[task]
            if not task.done():  # this task is cancelled: the worker itself is
                task.cancel()
                await asyncio.wait((task,))
        if task.cancelled():
            if state.interrupted is None:
                # The handler let a CancelledError of its own out: a failure.
                return None, RuntimeError("the handler was cancelled")
            return state.interrupted, None
        error = task.exception()
        if error is not None and not isinstance(error, Exception):
            raise error  # KeyboardInterrupt, SystemExit: not the job's failure
        return state.interrupted, error

    async def heartbeat(
        self, stop: asyncio.Event, announce: Callable[[float], Awaitable[None]]
    ) -> None:
        """Until ``stop``: each third of a lease, extend every running job's
        claim in one round trip and, beside it, its node reservation in one
        request, and ``announce`` the worker (within the beat); cancel the
        handlers whose claims are lost, or whose claims can no longer be shown
        to outlast the next beat."""
        interval = self._lease / 3
        while not stop.is_set():
            await wait_event(stop, interval)
            # A loss met by the completions, the reaper or a handler's verify().
            self.note_state_loss()
            running = list(self.running.items())
            # Side by side: a slow node must not hold back the claims' extension.
            ids = [state.entry_id for _, state in running]
            beats = [
                self._beat(running, interval),
                self._reservations.extend(ids, self._lease, interval),
                announce(interval),
            ]
            if self.admission is not None:
                beats.append(self._extend_admissions(self.admission, running, interval))
            await asyncio.gather(*beats)

    async def _beat(
        self, running: list[tuple[asyncio.Task[None], Running]], interval: float
    ) -> None:
        """Extend the claims of ``running`` in one call; cancel the handlers
        whose claims are lost, or whose claims can no longer be shown to
        outlast the next beat, ``interval`` seconds on."""
        if not running:
            return
        try:
            outcomes = await self._lens.extend_many([state.claim for _, state in running])
        except LensError as exc:
            self._availability.failed(exc)
            if self.note_state_loss():
                return  # every claim sent was from before the loss: all interrupted
            self._interrupt_ending(running, interval, exc)
            return
        for (handler, _), lost in zip(running, outcomes, strict=True):
            if lost is not None:
                self.interrupt(handler, "lost")

    async def _extend_admissions(
        self, admission: Admission, running: list[tuple[asyncio.Task[None], Running]],
        interval: float,
    ) -> None:  # fmt: skip
        """Extend the admissions of ``running`` under their limits; cancel the
        handlers whose admissions are gone, or (Redis unreachable) can no
        longer be shown to outlast the next beat, as a lost claim's: so no
        more run under a limit than it allows, at every instant."""
        if not running:
            return
        try:
            kept = await admission.extend([state.claim.key for _, state in running], self._lease)
        except LensError as exc:
            self._interrupt_ending(running, interval, exc)
            return
        for (handler, state), held in zip(running, kept, strict=True):
            if not held:
                log.warning("%s: its admission under a limit ran out", state.claim.key)
                self.interrupt(handler, "lost")

    def _interrupt_ending(
        self, running: list[tuple[asyncio.Task[None], Running]], interval: float, exc: LensError
    ) -> None:
        """Cancel the handlers of ``running`` whose claims cannot be shown to
        outlast the next beat, ``interval`` seconds on, now that their
        extension (of the claim or of the admission) met ``exc``."""
        for handler, state in running:
            if state.claim.remaining() <= interval:
                log.warning("cannot extend %s (%s) before its lease ends", state.claim.key, exc)
                self.interrupt(handler, "lost")

    async def watch(self, stop: asyncio.Event) -> None:
        """Until ``stop``: every :data:`CANCEL_WATCH` seconds, cancel the
        handlers whose keys were cancelled under their claims (the module
        docstring). An outage is the heartbeat's to report: skipped here."""
        while not stop.is_set():
            await wait_event(stop, CANCEL_WATCH)
            running = list(self.running.items())
            if not running:
                continue
            try:
                cancelled = await self._lens.cancelled_many([state.claim for _, state in running])
            except LensError:
                continue
            for (handler, state), stopped in zip(running, cancelled, strict=True):
                if stopped:
                    log.info("%s was cancelled: stopping its handler", state.claim.key)
                    self.interrupt(handler, "cancelled")

    def interrupt(self, handler: asyncio.Task[None], why: Interrupted) -> None:
        """Cancel a running handler's task, if it still runs, saying ``why``."""
        state = self.running.get(handler)
        if state is not None and state.interrupted is None and handler.cancel():
            state.interrupted = why

    def abandon_all(self) -> None:
        """Cancel every running handler (the drain is over)."""
        for handler in list(self.running):
            self.interrupt(handler, "abandoned")

    def note_state_loss(self) -> bool:
        """Act on a state loss the Lens counted since the worker last looked
        (any call can meet it: a claim, a heartbeat, a completion, the reaper,
        a handler's ``verify()``); ``True`` if there was one.

        Once per loss: one error line for the operator and the
        ``lens_state_losses`` count; the handlers running under claims from
        before the loss are cancelled (the claims are gone) and their
        reservations released (forum.coordinator.settling); and no job is
        claimed for ``lens_loss_pause`` seconds.

        Why pause, when the Lens works again at once: after a loss two holders
        of one job can run at once, the one from before (until its heartbeat
        finds the claim gone) and a new one. Every holder from before stops
        within one lease of the loss: its heartbeat finds the loss within a
        third of a lease, or its own clock ends its lease. So a worker that
        waits one lease (the default) after it saw the loss claims nothing
        that a holder from before may still be running, and the operator sees
        the alarm before new work flows. Completions and the reaper go on
        meanwhile: they only finish or re-offer.
        """
        losses = self._lens.state_losses
        if losses <= self.generation:
            return False
        self._counts.lens_state_losses += losses - self.generation
        self.generation = losses
        self._claim_after = time.monotonic() + self._loss_pause
        forgotten = [task for task, state in self.running.items() if state.generation < losses]
        log.error(
            "worker %s: Redis LOST THE LENS'S STATE (flushed, or restarted without "
            "persistence): every claim, done marker and in-flight record from before is gone. "
            "Cancelling %d running handlers and putting their jobs back; claiming nothing "
            "for %.1fs. Completed jobs may run again. Operator: fix Redis persistence "
            "(appendonly yes, appendfsync always) and follow docs/coordination.md, "
            "'A Redis that forgets'",
            self._owner, len(forgotten), self._loss_pause,
        )  # fmt: skip
        for task in forgotten:
            self.interrupt(task, "lost")
        return True

    async def release(
        self, claim: HeldClaim, waits: Iterator[float], failed: Failed | None = None
    ) -> bool:
        """Release a claim (after a failed attempt with ``failed``: claim.py),
        retrying while Redis is unreachable (waiting each of ``waits`` in
        turn) and the lease lasts. ``False`` if it could not be done: the
        claim is then gone or will expire by itself (and its lapse counts
        the attempt as made: lua/claim.lua)."""
        while True:
            try:
                await claim.release(failed)
            except ClaimLost as exc:
                self._counts.claims_lost += 1
                log.warning("%s: %s", claim.key, exc)
                return False
            except LensError as exc:
                self._availability.failed(exc)
                if claim.remaining() <= 0:
                    log.warning("%s: Redis unreachable past the lease (%s)", claim.key, exc)
                    return False
                await asyncio.sleep(min(next(waits), claim.remaining()))
            else:
                return True

    def pause_left(self) -> float:
        """Seconds left of the pause after a state loss (0 when not paused).
        On ``time.monotonic()``: ``Worker.stats()`` is also read from a metrics thread."""
        return max(0.0, self._claim_after - time.monotonic())
