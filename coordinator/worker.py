"""The worker runtime: reserve → claim → ack → handler(job) → complete.

::

    worker = Worker(space, lens, Pattern(b"job/"), handler, concurrency=8, lease=30)
    await worker.run()          # until worker.stop() (the CLI calls it on SIGTERM)

For each job:

1. **reserve** tuples matching the pattern, as many as there are free
   handler slots; when none is live, one blocking reserve with a timeout, so
   an idle worker waits on the space instead of polling it. A reservation
   takes the tuple out of reach for the lease without taking it for good:
   if this worker dies, or the answer is lost, the tuple comes back. (A space
   without reservations is taken from instead: ``take_many`` when it has it.)
2. **claim** each one's key in the Lens, all in one round trip: the key that
   travels in the tuple's trailer (:mod:`coordinator.envelope`), else
   ``key(payload)`` when given, else the tuple's entry id. A claim carries the
   bytes to re-offer should this worker die: the next attempt, or the dead
   letter after the last one. Then **ack** the reservations (the Takes are
   appended): from here on the Lens keeps the job safe;
3. run ``handler(job)`` while a heartbeat extends the lease; if the claim is
   lost, the handler is cancelled. The handler calls ``await job.verify()``
   right before irreversible work;
4. **complete** the claim (a done marker turns duplicates away), batched with
   other finished jobs, off the slot's critical path
   (:mod:`coordinator.completions`).

Outcomes other than success:

* ``AlreadyClaimed``/``AlreadyDone`` at the claim: a double take caught. It
  is counted and logged, the duplicate is acked away, and the handler does
  not run.
* The handler raised: the claim is handed back with the next attempt's bytes
  (the attempt count and error travel in the trailer), due after a jittered
  exponential backoff, and a reaper writes it into the space then; after
  ``max_attempts`` the bytes are a dead letter under ``dead_prefix``.
  Handing back is one Lua step, so the job is never in neither place.
* The Lens is unreachable at the claim: fail closed. No handler runs; the
  reservations are released, so the tuples are live again in their places
  under their own ids (a claim granted unseen still deduplicates them; a
  space without reservations gets them written back, with their claim keys)
  and the worker waits for Redis.
* Redis lost the Lens's state (``LensStateLost``: flushed, or restarted
  without persistence): fail closed as above, and more (see
  :meth:`Worker._note_state_loss`). One error line per loss, counted in
  ``lens_state_losses``. The claims granted before the loss are gone, and
  with them the in-flight records that were the jobs' only copy: the
  handlers still running under them are cancelled and their jobs written
  back into the space by this worker, which holds the last copy. Then no
  job is claimed for ``lens_loss_pause`` seconds (default: one lease), so
  every holder from before the loss, on any worker, has stopped before a
  job can be claimed again; the Lens itself works again on its next call.
* The worker dies mid-job: its claim expires and a reaper (every worker runs
  one) writes the claim's re-offer bytes into the space.
* ``stop()``: stop taking at once (a blocking take still waiting is
  abandoned; reservations not yet claimed are released), let running
  handlers finish for ``drain_timeout`` seconds, then cancel the rest and
  hand their jobs back unchanged.

A worker killed at any point loses nothing: before the ack its reservations
run out on the node, after the claim its claim runs out in the Lens and a
reaper re-offers the job; a job that comes back both ways is one claim key,
so its effect still happens once (see docs/coordination.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from coordinator.authority import ClaimAuthority, HeldClaim
from coordinator.completions import Completions
from coordinator.deadletter import DEFAULT_DEAD_PREFIX, bury
from coordinator.envelope import Envelope
from coordinator.errors import ClaimLost, LensError, LensUnavailable
from coordinator.job import Backoff, Handler, Job, KeyFunction
from coordinator.reaper import Reaper
from node import EntryId, ForumError, Pattern, ReservingSpace, Tuple, TupleSpace

log = logging.getLogger(__name__)

#: The error the next attempt (or the dead letter) carries when the worker
#: that ran a job died.
LOST_WORKER = "the worker was lost: its lease expired"
#: How long a worker waits between tries when Redis or the space is down.
_OUTAGE_BACKOFF = (0.05, 2.0)

#: The defaults of :class:`Worker`, which ``forum worker``'s flags share.
DEFAULT_CONCURRENCY = 1
DEFAULT_LEASE = 30.0
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_DRAIN_TIMEOUT = 30.0
#: How long one blocking take waits on an idle space before the worker asks
#: again. A stop does not wait for it: the outstanding take is abandoned.
DEFAULT_TAKE_WAIT = 2.0


@runtime_checkable
class BatchReserver(Protocol):
    """A space that reserves and acks many tuples in one step each
    (``Forum``, ``ForumClient``)."""

    async def reserve_many(self, pattern: Pattern, lease: float, limit: int) -> list[Tuple]: ...

    async def ack_many(self, entry_ids: Sequence[EntryId]) -> list[bool]: ...


@runtime_checkable
class BatchTaker(Protocol):
    """A space that takes many tuples in one step (``Forum``, ``ForumClient``)."""

    async def take_many(self, pattern: Pattern, limit: int) -> list[Tuple]: ...


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """Counts since the worker started, and its state now."""

    taken: int = 0
    done: int = 0
    retried: int = 0
    dead: int = 0
    double_takes: int = 0
    claims_lost: int = 0
    lens_unavailable: int = 0
    handed_back: int = 0
    reoffered: int = 0
    #: Jobs whose claims Redis forgot while they ran, written back by this worker.
    rescued: int = 0
    #: Times Redis was found to have lost the Lens's state (each loss once).
    lens_state_losses: int = 0
    running: int = 0
    #: False while Redis is unreachable, or in the pause after a state loss:
    #: either way the worker claims nothing.
    lens_reachable: bool = True


_Interrupted = Literal["lost", "abandoned"]


@dataclass(slots=True)
class _Running:
    """A job whose handler runs now, as the heartbeat and the drain see it."""

    claim: HeldClaim
    #: The Lens's ``state_losses`` when the claim was asked for: a claim from
    #: before a loss the worker has since seen is gone with Redis's state.
    generation: int
    #: Why the worker cancelled the handler, if it did.
    interrupted: _Interrupted | None = None


class _Slots:
    """Free handler slots. The fetcher takes all that are free at once, so
    one take and one claim round trip serve as many jobs as can run."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._wake = asyncio.Event()
        self._closed = False

    async def acquire_all(self) -> int:
        """Wait for at least one free slot and take every free one; 0 once closed."""
        while self._free == 0 and not self._closed:
            self._wake.clear()
            await self._wake.wait()
        if self._closed:
            return 0
        n, self._free = self._free, 0
        return n

    def release(self, n: int = 1) -> None:
        if n:
            self._free += n
            self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()


class Worker:
    """Runs ``handler`` on jobs taken from ``space`` under claims from ``lens``."""

    def __init__(
        self,
        space: TupleSpace,
        lens: ClaimAuthority,
        pattern: Pattern,
        handler: Handler,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease: float = DEFAULT_LEASE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff: Backoff | None = None,
        key: KeyFunction | None = None,
        owner: str | None = None,
        dead_prefix: bytes = DEFAULT_DEAD_PREFIX,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        take_wait: float = DEFAULT_TAKE_WAIT,
        reaper_interval: float = 1.0,
        lens_loss_pause: float | None = None,
        seed: int | None = None,
    ) -> None:
        if concurrency < 1 or max_attempts < 1:
            raise ValueError("concurrency and max_attempts must be at least 1")
        if lease <= 0 or drain_timeout < 0 or take_wait <= 0:
            raise ValueError("lease and take_wait must be positive, drain_timeout not negative")
        if lens_loss_pause is not None and lens_loss_pause < 0:
            raise ValueError("lens_loss_pause must not be negative")
        if dead_prefix.startswith(pattern.prefix):
            # The worker would take its own dead letters and run them forever.
            raise ValueError(f"dead prefix {dead_prefix!r} matches the job pattern")
        self._space = space
        self._batches = space if isinstance(space, BatchTaker) else None
        self._reserving = space if isinstance(space, ReservingSpace) else None
        self._batch_reserver = space if isinstance(space, BatchReserver) else None
        self._lens = lens
        self._pattern = pattern
        self._handler = handler
        self.concurrency = concurrency
        self.lease = lease
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self._key = key
        self.owner = owner or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.dead_prefix = dead_prefix
        self.drain_timeout = drain_timeout
        #: How long no job is claimed after a state loss (see _note_state_loss).
        self.lens_loss_pause = lease if lens_loss_pause is None else lens_loss_pause
        self._take_wait = take_wait
        self._rng = random.Random(seed)
        self._counts: Counter[str] = Counter()
        self._reaper = Reaper(
            space, lens, interval=reaper_interval, on_reoffer=lambda: self._count("reoffered")
        )
        self._completions = Completions(lens, self._count, limit=4 * concurrency)
        self._slots = _Slots(concurrency)
        self._stopping = asyncio.Event()
        self._started = False
        self._lens_ok = True
        #: The Lens's state_losses as this worker last saw it.
        self._generation = lens.state_losses
        #: time.monotonic() before which no job is claimed (after a state loss).
        self._claim_after = 0.0
        self._jobs: set[asyncio.Task[None]] = set()
        self._running: dict[asyncio.Task[None], _Running] = {}
        self._drain_expired = False
        self._stop_deadline: float | None = None

    def stats(self) -> WorkerStats:
        return WorkerStats(
            running=len(self._running),
            lens_reachable=self._lens_ok and not self._loss_pause_left(),
            **self._counts,
        )

    def stop(self) -> None:
        """Begin a graceful drain; :meth:`run` returns when it is over."""
        if not self._stopping.is_set():
            self._stop_deadline = asyncio.get_running_loop().time() + self.drain_timeout
        self._stopping.set()
        self._slots.close()

    def _past_stop_deadline(self) -> bool:
        if self._stop_deadline is None:
            return False
        return asyncio.get_running_loop().time() > self._stop_deadline

    async def run(self) -> None:
        """Work until :meth:`stop`, then drain (see the module docstring)."""
        if self._started:
            raise RuntimeError("a Worker runs once")
        self._started = True
        reaper_stop = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._reaper.run(reaper_stop), name="reaper")
            completer = tasks.create_task(self._completions.run(), name="completions")
            heartbeat_stop = asyncio.Event()
            tasks.create_task(self._heartbeat(heartbeat_stop), name="heartbeat")
            await self._fetch(tasks)
            await self._drain()
            heartbeat_stop.set()
            self._completions.close()
            await completer
            # One last pass, so jobs handed back in the drain are in the space
            # before this worker is gone (any other worker's reaper would do it too).
            try:
                await self._reaper.run_once()
            except (LensError, ForumError, OSError) as exc:
                log.warning("drain: final reaper pass failed (%s); other reapers will do it", exc)
            reaper_stop.set()

    # -- taking and claiming ------------------------------------------------------------

    async def _fetch(self, tasks: asyncio.TaskGroup) -> None:
        """Take and claim jobs for free slots until the worker stops."""
        while free := await self._slots.acquire_all():
            self._note_state_loss()
            if paused := self._loss_pause_left():
                self._slots.release(free)
                await self._pause(paused)
                continue
            if not self._lens_ok:
                self._slots.release(free)
                await self._wait_for_lens()
                continue
            try:
                items = await self._take_unless_stopped(free)
            except (ForumError, OSError) as exc:
                self._slots.release(free)
                log.warning("take failed (%s); retrying", exc)
                await self._pause(_OUTAGE_BACKOFF[1])
                continue
            self._slots.release(free - len(items))
            if items:
                self._count("taken", len(items))
                await self._claim(items, tasks)

    async def _take_unless_stopped(self, most: int) -> list[Tuple]:
        """:meth:`_take`, but a stopping worker starts no job: its blocking wait
        is abandoned the moment :meth:`stop` is called, and reservations that
        arrive anyway (the answer crossed the stop) are released, live again
        at once rather than after a lease::

            t0  the take waits on the node (up to take_wait)
            t1  SIGTERM: stop() -> the wait is cancelled; the node, seeing its
                client gone, hands nothing over (or puts back what it had)
            t2  a job is written: it stays in the space for the other workers

        Tuples taken outright are this worker's only copy: they run in the drain.
        """
        items = await self._take(most)
        if self._stopping.is_set() and self._reserving is not None and items:
            await self._settle_reservations([item.id for item in items], ack=False)
            return []
        return items

    async def _unless_stopped(self, wait: Awaitable[Tuple | None]) -> Tuple | None:
        """``wait`` (one blocking take or reserve), or ``None`` once the worker stops."""
        if self._stopping.is_set():
            return None
        waiting = asyncio.ensure_future(wait)
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait((waiting, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            waiting.cancel()  # no-op if it is done
            # Cancelled, or done in a race with the cancel: either way, settled.
            await asyncio.wait((waiting, stopping))
        return None if waiting.cancelled() else waiting.result()

    async def _take(self, most: int) -> list[Tuple]:
        if self._reserving is not None:
            return await self._reserve(self._reserving, most)
        if self._batches is not None and most > 1:
            items = await self._batches.take_many(self._pattern, most)
            if items:
                return items
        item = await self._unless_stopped(
            self._space.take_entry(self._pattern, timeout=self._take_wait)
        )
        return [] if item is None else [item]

    async def _reserve(self, space: ReservingSpace, most: int) -> list[Tuple]:
        """Up to ``most`` reservations without waiting, or one after a wait."""
        items: list[Tuple] = []
        if self._batch_reserver is not None:
            items = await self._batch_reserver.reserve_many(self._pattern, self.lease, most)
        while self._batch_reserver is None and len(items) < most:
            try:
                item = await space.reserve(self._pattern, self.lease)
            except (ForumError, OSError):
                if not items:
                    raise
                break  # work on what we have; the space is retried next round
            if item is None:
                break
            items.append(item)
        if not items:
            item = await self._unless_stopped(
                space.reserve(self._pattern, self.lease, timeout=self._take_wait)
            )
            if item is not None:
                items.append(item)
        return items

    async def _settle_reservations(self, ids: list[EntryId], *, ack: bool) -> None:
        """Ack (take for good) or release reserved tuples. Best effort: one
        that is not settled runs out on the node and comes back, and the Lens
        turns the copy away (its claim key is held or done)."""
        if self._reserving is None or not ids:
            return
        if ack and self._batch_reserver is not None:
            try:
                await self._batch_reserver.ack_many(ids)
            except (ForumError, OSError) as exc:
                log.warning("could not ack %d reservations (%s): they will come back "
                            "and be turned away", len(ids), exc)  # fmt: skip
            return
        settle = self._reserving.ack if ack else self._reserving.release
        results = await asyncio.gather(*(settle(i) for i in ids), return_exceptions=True)
        for entry_id, result in zip(ids, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("could not %s %s (%s): it will come back and be turned away",
                            "ack" if ack else "release", entry_id, result)  # fmt: skip

    async def _claim(self, items: list[Tuple], tasks: asyncio.TaskGroup) -> None:
        keyed: list[tuple[Tuple, str, Envelope]] = []
        buried: list[EntryId] = []
        for item in items:
            found = await self._keyed(item)
            if found is None:
                self._slots.release()
                buried.append(item.id)
            else:
                keyed.append((item, *found))
        await self._settle_reservations(buried, ack=True)
        if not keyed:
            return
        requests = [(key, self._after_failure(e, LOST_WORKER)) for _, key, e in keyed]
        if self._note_state_loss():
            # A loss another call found while these were reserved: pause first.
            await self._put_back(keyed)
            return
        generation = self._generation
        try:
            outcomes = await self._lens.claim_many(requests, self.owner, self.lease)
        except LensError as exc:
            # Fail closed, lose nothing: no handler without a claim; the jobs go
            # back (with their keys: a claim may have been granted unseen).
            self._count("lens_unavailable", len(keyed))
            self._lens_ok = False
            log.warning("Lens unavailable (%s): %d jobs go back into the space", exc, len(keyed))
            self._note_state_loss()
            await self._put_back(keyed)
            if not isinstance(exc, LensUnavailable):
                # Redis answers pings but refuses the script: do not spin on it.
                await self._pause(_OUTAGE_BACKOFF[1])
            return
        # Claimed or turned away, every reserved tuple is taken for good now:
        # the Lens holds what is needed to re-offer the claimed ones.
        await self._settle_reservations([item.id for item, _, _ in keyed], ack=True)
        for (item, _, envelope), outcome in zip(keyed, outcomes, strict=True):
            if isinstance(outcome, LensError):
                self._count("double_takes")
                log.warning("double take of %s caught, not run: %s", item.id, outcome)
                self._slots.release()
                continue
            job = Job(envelope.payload, item.id, outcome.key, envelope.attempt, outcome)
            run = self._run_job(job, envelope, generation)
            task = tasks.create_task(run, name=f"job {job.key}")
            self._jobs.add(task)
            task.add_done_callback(self._jobs.discard)

    async def _put_back(self, keyed: list[tuple[Tuple, str, Envelope]]) -> None:
        """Put unclaimed jobs back into the space: release their reservations
        (live again in their places), or write them back with their keys."""
        if self._reserving is not None:
            await self._settle_reservations([item.id for item, _, _ in keyed], ack=False)
            self._slots.release(len(keyed))
            return
        for _, _, envelope in keyed:
            await self._write_back(envelope.seal())
            self._slots.release()

    async def _keyed(self, item: Tuple) -> tuple[str, Envelope] | None:
        """The tuple's claim key, and its envelope carrying it; ``None`` if the
        key function failed (the job is then parked as a dead letter)."""
        envelope = Envelope.open(item.payload)
        if envelope.key is not None:
            return envelope.key, envelope
        try:
            key = self._key(envelope.payload) if self._key else str(item.id)
            return key, envelope.with_key(key)
        except Exception:
            # Without a key there is no claim, so no worker can ever run it.
            log.exception("the key function failed on %s: parking it as a dead letter", item.id)
            await self._write_back(bury(envelope, self.dead_prefix))
            self._count("dead")
            return None

    # -- running a claimed job ----------------------------------------------------------

    async def _run_job(self, job: Job, envelope: Envelope, generation: int) -> None:
        try:
            await self._run_claimed(job, envelope, generation)
        finally:
            self._slots.release()

    async def _run_claimed(self, job: Job, envelope: Envelope, generation: int) -> None:
        # The handler runs in this task: the heartbeat cancels this task to stop
        # it, marking why first, and this task then carries on (uncancelled).
        me = asyncio.current_task()
        if me is None:
            raise RuntimeError("a job runs in a task")
        state = self._running[me] = _Running(job.claim, generation)
        error: Exception | None = None
        try:
            if generation < self._generation:
                # Claimed before a loss the worker saw while this task waited to
                # start: the claim is gone, so the handler must not run.
                raise ClaimLost(job.key, job.token, "Redis lost the Lens's state")
            await self._handler(job)
        except asyncio.CancelledError:
            if state.interrupted is None:
                raise  # not the heartbeat's or the drain's: the worker itself is cancelled
        except Exception as exc:
            error = exc
        finally:
            del self._running[me]
            if state.interrupted is not None:
                me.uncancel()
        claim = job.claim
        self._note_state_loss()
        forgotten = generation < self._generation
        if state.interrupted == "abandoned":
            if await self._hand_back(claim, envelope.seal(), forgotten=forgotten):
                self._count("handed_back")
            return
        if forgotten and (state.interrupted == "lost" or isinstance(error, LensError)):
            # Redis forgot the claim and its in-flight record: this worker holds
            # the job's only copy. The same attempt again: the job did not fail.
            await self._hand_back(claim, envelope.seal(), forgotten=True)
            return
        if state.interrupted == "lost":
            self._count("claims_lost")
            log.warning("claim on %s lost while its handler ran; handler cancelled", job.key)
            return
        if error is None:
            await self._completions.submit(claim)
            return
        if isinstance(error, ClaimLost):
            self._count("claims_lost")
            log.warning("%s: the handler found its claim lost: %s", job.key, error)
            return
        text = f"{type(error).__name__}: {error}"
        log.info("%s attempt %d failed: %s", job.key, job.attempt, text)
        last = job.attempt >= self.max_attempts
        delay = 0.0 if last else self.backoff.delay(job.attempt, self._rng)
        payload = self._after_failure(envelope, text)
        if await self._hand_back(claim, payload, delay, forgotten=forgotten):
            self._count("dead" if last else "retried")

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        """Extend every running job's claim each third of a lease, in one round
        trip; cancel the handlers whose claims are lost, or whose claims can no
        longer be shown to outlast the next beat."""
        interval = self.lease / 3
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            # A loss met by the completions, the reaper or a handler's verify().
            self._note_state_loss()
            running = list(self._running.items())
            if not running:
                continue
            try:
                outcomes = await self._lens.extend_many([state.claim for _, state in running])
            except LensError as exc:
                self._lens_ok = False
                if self._note_state_loss():
                    continue  # every claim sent was from before the loss: all interrupted
                for task, state in running:
                    if state.claim.remaining() <= interval:
                        log.warning(
                            "cannot extend %s (%s) before its lease ends", state.claim.key, exc
                        )
                        self._interrupt(task, "lost")
                continue
            for (task, _), lost in zip(running, outcomes, strict=True):
                if lost is not None:
                    self._interrupt(task, "lost")

    def _interrupt(self, task: asyncio.Task[None], why: _Interrupted) -> None:
        """Cancel ``task``'s handler, if it still runs, saying ``why``."""
        state = self._running.get(task)
        if state is not None and state.interrupted is None:
            state.interrupted = why
            task.cancel()

    def _after_failure(self, envelope: Envelope, error: str) -> bytes:
        """The bytes that go back into the space if this attempt fails with
        ``error``: the next attempt, or after the last one a dead letter."""
        if envelope.attempt >= self.max_attempts:
            return bury(envelope.failed(error), self.dead_prefix)
        return envelope.next_attempt(error).seal()

    async def _hand_back(
        self, claim: HeldClaim, payload: bytes, delay: float = 0.0, *, forgotten: bool = False
    ) -> bool:
        """Hand the claim back with ``payload`` to re-offer after ``delay``; when
        that is now, write it back at once rather than at the reaper's next pass.

        A ``forgotten`` claim is one from before a state loss: when the Lens no
        longer has it, Redis forgot its in-flight record too, so the worker
        writes ``payload`` into the space itself (now: the delay was in the
        lost record). Should the claim still be held after all (granted just
        after the loss), the hand-back succeeds and nothing is written twice.
        """
        if not await self._settle(claim, lambda: claim.hand_back(payload, delay)):
            if not forgotten:
                return False
            log.warning("%s: Redis forgot its claim; writing the job back", claim.key)
            await self._write_back(payload)
            self._count("rescued")
            return True
        if delay == 0:
            try:
                await self._reaper.reoffer(claim.key)
            except (LensError, ForumError, OSError) as exc:
                log.warning("%s handed back; a reaper will write it back (%s)", claim.key, exc)
        return True

    async def _drain(self) -> None:
        """Let running jobs finish for ``drain_timeout``; then cancel their handlers."""
        if not self._jobs:
            return
        _, late = await asyncio.wait(set(self._jobs), timeout=self.drain_timeout)
        if late:
            self._drain_expired = True
            log.warning("drain: cancelling %d handlers past the drain timeout", len(late))
            for task in list(self._running):
                self._interrupt(task, "abandoned")
            await asyncio.wait(late)

    # -- outages ------------------------------------------------------------------------

    async def _settle(self, claim: HeldClaim, action: Callable[[], Awaitable[None]]) -> bool:
        """Run a claim's final step, retrying while Redis is unreachable and the
        lease lasts. ``False`` if it could not be done: the claim is then gone
        or will expire, and its in-flight record re-offers the job."""
        delay = _OUTAGE_BACKOFF[0]
        while True:
            try:
                await action()
            except ClaimLost as exc:
                self._count("claims_lost")
                log.warning("%s: %s", claim.key, exc)
                return False
            except LensError as exc:
                self._lens_ok = False
                if claim.remaining() <= 0:
                    log.warning("%s: Redis unreachable past the lease (%s)", claim.key, exc)
                    return False
                await asyncio.sleep(min(delay, claim.remaining()))
                delay = min(delay * 2, _OUTAGE_BACKOFF[1])
            else:
                return True

    def _note_state_loss(self) -> bool:
        """Act on a state loss the Lens counted since the worker last looked
        (any call can meet it: a claim, a heartbeat, a completion, the reaper,
        a handler's ``verify()``); ``True`` if there was one.

        Once per loss: one error line for the operator and the
        ``lens_state_losses`` count; the handlers running under claims from
        before the loss are cancelled (the claims are gone) and their jobs
        written back (:meth:`_hand_back`); and no job is claimed for
        ``lens_loss_pause`` seconds.

        Why pause, when the Lens works again at once: after a loss two holders
        of one job can run at once, the one from before (until its heartbeat
        finds the claim gone) and a new one. Every holder from before stops
        within one lease of the loss: its heartbeat finds the loss within a
        third of a lease, or its own clock ends its lease. So a worker that
        waits one lease (the default) after it saw the loss claims nothing
        that a holder from before may still be running, and the operator sees
        the alarm before new work flows. Completions, hand-backs and the
        reaper go on meanwhile: they only finish or re-offer.
        """
        losses = self._lens.state_losses
        if losses <= self._generation:
            return False
        self._count("lens_state_losses", losses - self._generation)
        self._generation = losses
        self._claim_after = time.monotonic() + self.lens_loss_pause
        forgotten = [task for task, state in self._running.items() if state.generation < losses]
        log.error(
            "worker %s: Redis LOST THE LENS'S STATE (flushed, or restarted without "
            "persistence): every claim, done marker and in-flight job from before is gone. "
            "Cancelling %d running handlers and writing their jobs back; claiming nothing "
            "for %.1fs. Jobs only in flight on other (dead) workers are lost and completed "
            "jobs may run again. Operator: fix Redis persistence (appendonly yes, "
            "appendfsync always) and follow docs/coordination.md, 'A Redis that forgets'",
            self.owner, len(forgotten), self.lens_loss_pause,
        )  # fmt: skip
        for task in forgotten:
            self._interrupt(task, "lost")
        return True

    def _loss_pause_left(self) -> float:
        """Seconds left of the pause after a state loss (0 when not paused).
        On ``time.monotonic()``: ``stats()`` is also read from a metrics thread."""
        return max(0.0, self._claim_after - time.monotonic())

    async def _wait_for_lens(self) -> None:
        delay = _OUTAGE_BACKOFF[0]
        while not self._lens_ok and not self._stopping.is_set():
            try:
                await self._lens.ping()
            except LensError:
                await self._pause(delay)
                delay = min(delay * 2, _OUTAGE_BACKOFF[1])
            else:
                log.info("the Lens is reachable again")
                self._lens_ok = True

    async def _write_back(self, data: bytes) -> None:
        """Write an unclaimed job back into the space, retrying while the space
        is unreachable (this process holds its only copy)."""
        delay = _OUTAGE_BACKOFF[0]
        while True:
            try:
                await self._space.write(data)
            except (ForumError, OSError) as exc:
                if self._drain_expired or self._past_stop_deadline():
                    log.error("job lost: could not write it back (%s): %r", exc, data)
                    return
                log.warning("could not write a job back (%s); retrying", exc)
                await self._pause(delay)
                delay = min(delay * 2, _OUTAGE_BACKOFF[1])
            else:
                return

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake at once when the worker is told to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _count(self, outcome: str, n: int = 1) -> None:
        self._counts[outcome] += n
