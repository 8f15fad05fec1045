"""The worker runtime: reserve → claim → handler(job) → complete → ack.

::

    worker = Worker(space, lens, Pattern(b"job/"), handler, concurrency=8, lease=30)
    await worker.run()          # until worker.stop() (the CLI calls it on SIGTERM)

The durable path (a space with reservations: ``Forum``, ``ForumClient``). The
node keeps a copy of every job until the job is completed, so Redis losing
everything (a FLUSHALL, a restart without persistence) costs re-runs, never a
job. For each job:

1. **reserve** tuples matching the pattern, as many as there are free
   handler slots; when none is live, one blocking reserve with a timeout, so
   an idle worker waits on the space instead of polling it. A reservation
   takes the tuple out of reach for the lease without taking it for good:
   if this worker dies, or the answer is lost, the tuple comes back. A retry
   whose backoff is not over (``not_before`` in its trailer,
   :mod:`coordinator.envelope`) is not claimed: its reservation is extended
   to its due time and the worker forgets it; it comes back then.
2. **claim** each one's key in the Lens, all in one round trip: the key that
   travels in the tuple's trailer, else ``key(payload)`` when given, else the
   tuple's entry id. The claim carries no re-offer bytes: the reservation is
   the job's copy. Nothing is acked yet.
3. run ``handler(job)`` while a heartbeat, each third of a lease, extends the
   Lens claims of all running jobs in one call and their node reservations in
   one more (``extend_many``); if a claim is lost, the handler is cancelled.
   The handler calls ``await job.verify()`` right before irreversible work;
4. **complete** the claim (a done marker turns copies away), batched with
   other finished jobs, off the slot's critical path
   (:mod:`coordinator.completions`), and only then
5. **ack** the reservations of the completed jobs (the Takes are appended),
   in one call.

At every moment a durable copy exists on a node::

    t0  reserve e1            the node holds e1, reserved
    t1  claim k               the node holds e1; the Lens holds the claim
    t2  handler runs          heartbeats renew both leases
    t3  complete k            done marker; the node still holds e1
    t4  ack e1                the Take is appended: the job is over

A worker killed anywhere in t0..t4 lets e1's reservation run out: e1 comes
back, and its claim key dedups it (``AlreadyDone`` after t3: acked away;
``AlreadyClaimed`` while a live holder still runs it: kept reserved for a
third of a lease, then offered again). Redis forgetting anywhere in t1..t3 leaves e1 on
the node: the job comes back and runs again (a re-run, not a loss).

Outcomes other than success:

* ``AlreadyDone`` at the claim: a copy of a finished job, acked away.
  ``AlreadyClaimed``: a copy of a job another holder runs now, kept reserved
  for a third of a lease and then offered again (see above). Both are
  counted as ``double_takes`` and the handler does not run.
* The handler raised: the claim is released, then the next attempt (the
  attempt count and error in the trailer, ``not_before`` after a jittered
  exponential backoff) is written into the space, *then* the failed
  reservation is acked: the job is always in the space, as e1 or as the
  retry (a worker dying between the write and the ack leaves both; the claim
  key lets one of them run at a time). After ``max_attempts`` the written
  bytes are a dead letter under ``dead_prefix``.
* The Lens is unreachable at the claim: fail closed. No handler runs; the
  reservations are released, so the tuples are live again in their places
  under their own ids, and the worker waits for Redis.
* Redis lost the Lens's state (``LensStateLost``: flushed, or restarted
  without persistence): fail closed as above, and more (see
  :meth:`Worker._note_state_loss`). One error line per loss, counted in
  ``lens_state_losses``. The handlers still running under claims from before
  the loss are cancelled and their reservations released (``rescued``); no
  job is claimed for ``lens_loss_pause`` seconds (default: one lease), so
  every holder from before the loss, on any worker, has stopped before a job
  can be claimed again. Completed jobs whose acks had not landed come back
  and run again: the done markers are gone.
* ``stop()``: stop taking at once (a blocking take still waiting is
  abandoned; reservations not yet claimed are released), let running
  handlers finish for ``drain_timeout`` seconds, then cancel the rest and
  release their claims and reservations.

A job whose worker dies comes back from the node at the *same* attempt (the
node does not count deliveries), so ``max_attempts`` bounds the attempts that
fail with an exception, not the workers a job kills.

The take-only path (a space without reservations) is the one before: take →
claim with the re-offer bytes (the next attempt, or the dead letter) → handler
→ complete. After the take the Lens's in-flight record is the job's only copy:
a worker that dies is re-offered by a reaper (every worker runs one) when its
claim expires; a failed attempt is handed back to the Lens with its backoff
delay, and the reaper writes it into the space when due; on a Lens outage at
the claim the jobs are written back with their keys; on a state loss this
worker writes back the jobs it was running, but a job in flight on a dead
worker is lost with Redis's state. Retries written with ``not_before`` by a
durable worker are run at once on this path.

A job that comes back more than one way is one claim key, so its effect
still happens once while the Lens remembers (see docs/coordination.md).
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
from typing import Literal, Protocol, TypeVar, runtime_checkable

from coordinator.authority import ClaimAuthority, HeldClaim
from coordinator.completions import Completions
from coordinator.deadletter import DEFAULT_DEAD_PREFIX, bury
from coordinator.envelope import Envelope
from coordinator.errors import AlreadyClaimed, AlreadyDone, ClaimLost, LensError, LensUnavailable
from coordinator.job import Backoff, Handler, Job, KeyFunction
from coordinator.reaper import Reaper
from node import EntryId, ForumError, Pattern, Reserved, ReservingSpace, Tuple, TupleSpace

_T = TypeVar("_T", bound=Tuple)

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
#: The longest a retry that is not due yet is kept reserved in one go (the
#: node's longest lease); one due later is deferred again when it comes back.
_LONGEST_DEFER = 3600.0


@runtime_checkable
class BatchReserver(Protocol):
    """A space that reserves, extends and acks many tuples in one step each
    (``Forum``, ``ForumClient``)."""

    async def reserve_many(self, pattern: Pattern, lease: float, limit: int) -> list[Reserved]: ...

    async def extend_many(self, entry_ids: Sequence[EntryId], lease: float) -> list[bool]: ...

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
    #: Retries reserved before they were due, put off on the node until then.
    deferred: int = 0
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
    #: The reserved tuple the job came from (the heartbeat renews it).
    entry_id: EntryId
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
        #: The durable path (see the module docstring): a job stays reserved on
        #: the node until its claim is completed; the Lens keeps no copy.
        self._durable = self._reserving is not None
        self._completions = Completions(
            lens, self._count, limit=4 * concurrency, ack=self._ack_completed
        )
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

    async def _unless_stopped(self, wait: Awaitable[_T | None]) -> _T | None:
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
            return list(await self._reserve(self._reserving, most))
        if self._batches is not None and most > 1:
            items = await self._batches.take_many(self._pattern, most)
            if items:
                return items
        item = await self._unless_stopped(
            self._space.take_entry(self._pattern, timeout=self._take_wait)
        )
        return [] if item is None else [item]

    async def _reserve(self, space: ReservingSpace, most: int) -> list[Reserved]:
        """Up to ``most`` reservations without waiting, or one after a wait."""
        items: list[Reserved] = []
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
        keyed = await self._defer_not_due(keyed)
        if not keyed:
            return
        # On the durable path the node's reservation is the copy to fall back
        # on, so the Lens is given none; on the take-only path it keeps one.
        requests = [
            (key, None if self._durable else self._after_failure(e, LOST_WORKER))
            for _, key, e in keyed
        ]
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
        await self._settle_reservations(self._to_ack(keyed, outcomes), ack=True)
        if self._durable:
            # A copy of a job another holder runs: kept out of reach for a beat,
            # then offered again (done by then, or its holder dead and its claim
            # run out). Not released (it would come straight back), not acked.
            held = [i.id for (i, _, _), o in zip(keyed, outcomes, strict=True) if _held(o)]
            beat = self.lease / 3
            await self._extend_reservations(held, beat, within=beat)
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

    def _to_ack(
        self, keyed: list[tuple[Tuple, str, Envelope]], outcomes: Sequence[HeldClaim | LensError]
    ) -> list[EntryId]:
        """The reservations to take for good once their claims are asked for.

        Take-only path: all of them, the Lens holds what is needed to re-offer
        the claimed ones. Durable path: only the copies of jobs already done
        (``AlreadyDone``); a claimed job stays reserved until it is completed,
        and a copy met by ``AlreadyClaimed`` (its holder still runs it) is
        neither acked nor released: it comes back a beat later, to be turned
        away as done, or run if its holder died meanwhile.
        """
        if not self._durable:
            return [item.id for item, _, _ in keyed]
        return [
            item.id
            for (item, _, _), outcome in zip(keyed, outcomes, strict=True)
            if isinstance(outcome, AlreadyDone)
        ]

    async def _defer_not_due(
        self, keyed: list[tuple[Tuple, str, Envelope]]
    ) -> list[tuple[Tuple, str, Envelope]]:
        """The jobs that may run now. A retry reserved before its backoff is
        over (``not_before`` in its trailer) stays reserved on the node until
        it is due: the worker extends its reservation to then and forgets it,
        so the retry waits in the space, durably, without being polled."""
        if not self._durable or self._reserving is None:
            return keyed
        now = time.time()
        due = [entry for entry in keyed if entry[2].due_in(now) == 0]
        later = [
            (item.id, min(e.due_in(now), _LONGEST_DEFER))
            for item, _, e in keyed
            if e.due_in(now) > 0
        ]
        if later:
            self._count("deferred", len(later))
            self._slots.release(len(later))
            extend = self._reserving.extend
            results = await asyncio.gather(
                *(extend(i, d) for i, d in later), return_exceptions=True
            )
            for (entry_id, _), result in zip(later, results, strict=True):
                if isinstance(result, BaseException):
                    # Its reservation runs out and it comes back sooner: deferred again.
                    log.warning("could not defer %s (%s)", entry_id, result)
        return due

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
        state = self._running[me] = _Running(job.claim, generation, job.entry_id)
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
        self._note_state_loss()
        forgotten = generation < self._generation
        if self._durable:
            await self._settle_durably(job, envelope, state.interrupted, error, forgotten)
            return
        claim = job.claim
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

    async def _settle_durably(
        self,
        job: Job,
        envelope: Envelope,
        interrupted: _Interrupted | None,
        error: Exception | None,
        forgotten: bool,
    ) -> None:
        """The end of a job on the durable path, where the node's reservation
        (``job.entry_id``) holds the job until this settles it:

        * done: complete the claim, then ack the reservation (batched);
        * failed: release the claim, write the next attempt (due after the
          backoff) or the dead letter into the space, *then* ack; should the
          write fail, the reservation is left to run out and the same attempt
          comes back;
        * abandoned in the drain, or its claim forgotten by Redis: release the
          claim (if still held) and the reservation: live again at once;
        * its claim lost to another holder: touch nothing. The reservation runs
          out (or the new holder, who reserved the same tuple, settles it).
        """
        claim = job.claim
        if interrupted == "abandoned" or (
            forgotten and (interrupted == "lost" or isinstance(error, LensError))
        ):
            await self._settle(claim, claim.release)  # a forgotten one is ClaimLost: fine
            await self._settle_reservations([job.entry_id], ack=False)
            self._count("rescued" if forgotten else "handed_back")
            if forgotten:
                log.warning("%s: Redis forgot its claim; its reservation is released", job.key)
            return
        if interrupted == "lost" or isinstance(error, ClaimLost):
            self._count("claims_lost")
            log.warning(
                "claim on %s lost while its handler ran (%s)", job.key, error or "cancelled"
            )
            return
        if error is None:
            await self._completions.submit(claim, job.entry_id)
            return
        text = f"{type(error).__name__}: {error}"
        log.info("%s attempt %d failed: %s", job.key, job.attempt, text)
        last = job.attempt >= self.max_attempts
        delay = 0.0 if last else self.backoff.delay(job.attempt, self._rng)
        payload = self._after_failure(envelope, text, time.time() + delay if delay else None)
        # Released first, so the next attempt, once due, finds the key free.
        await self._settle(claim, claim.release)
        if await self._write_back(payload):
            await self._settle_reservations([job.entry_id], ack=True)
            self._count("dead" if last else "retried")

    async def _ack_completed(self, entry_ids: list[EntryId]) -> None:
        """Take the reservations of completed jobs for good (:class:`Completions`)."""
        await self._settle_reservations(entry_ids, ack=True)

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        """Each third of a lease, extend every running job's claim in one round
        trip and, beside it, its node reservation in one request; cancel the
        handlers whose claims are lost, or whose claims can no longer be shown
        to outlast the next beat."""
        interval = self.lease / 3
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            # A loss met by the completions, the reaper or a handler's verify().
            self._note_state_loss()
            running = list(self._running.items())
            if not running:
                continue
            # Side by side: a slow node must not hold back the claims' extension.
            ids = [state.entry_id for _, state in running]
            await asyncio.gather(
                self._beat(running, interval),
                self._extend_reservations(ids, self.lease, within=interval),
            )

    async def _beat(
        self, running: list[tuple[asyncio.Task[None], _Running]], interval: float
    ) -> None:
        """Extend the claims of ``running`` (see :meth:`_heartbeat`)."""
        try:
            outcomes = await self._lens.extend_many([state.claim for _, state in running])
        except LensError as exc:
            self._lens_ok = False
            if self._note_state_loss():
                return  # every claim sent was from before the loss: all interrupted
            for task, state in running:
                if state.claim.remaining() <= interval:
                    log.warning("cannot extend %s (%s) before its lease ends", state.claim.key, exc)
                    self._interrupt(task, "lost")
            return
        for (task, _), lost in zip(running, outcomes, strict=True):
            if lost is not None:
                self._interrupt(task, "lost")

    async def _extend_reservations(
        self, ids: list[EntryId], lease: float, *, within: float
    ) -> None:
        """Renew reservations to ``lease`` seconds from now, in one call that
        may take up to ``within`` seconds (the next beat tries again). Best
        effort: a reservation that ran out (or a node that restarted) puts the
        tuple back; its copy meets the live claim and waits, or, once this job
        is completed, is turned away as done."""
        if not self._durable or self._reserving is None or not ids:
            return
        try:
            async with asyncio.timeout(within):
                if self._batch_reserver is not None:
                    extended = await self._batch_reserver.extend_many(ids, lease)
                else:
                    extend = self._reserving.extend
                    extended = list(await asyncio.gather(*(extend(i, lease) for i in ids)))
        except (ForumError, OSError, TimeoutError) as exc:
            log.warning("could not extend %d reservations (%s)", len(ids), exc)
            return
        gone = [str(i) for i, ok in zip(ids, extended, strict=True) if not ok]
        if gone:
            log.warning("reservations no longer held on the node: %s", ", ".join(gone))

    def _interrupt(self, task: asyncio.Task[None], why: _Interrupted) -> None:
        """Cancel ``task``'s handler, if it still runs, saying ``why``."""
        state = self._running.get(task)
        if state is not None and state.interrupted is None:
            state.interrupted = why
            task.cancel()

    def _after_failure(
        self, envelope: Envelope, error: str, not_before: float | None = None
    ) -> bytes:
        """The bytes that go back into the space if this attempt fails with
        ``error``: the next attempt (to run no earlier than ``not_before``),
        or after the last one a dead letter."""
        if envelope.attempt >= self.max_attempts:
            return bury(envelope.failed(error), self.dead_prefix)
        return envelope.next_attempt(error, not_before).seal()

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
            "persistence): every claim, done marker and in-flight record from before is gone. "
            "Cancelling %d running handlers and putting their jobs back; claiming nothing "
            "for %.1fs. Completed jobs may run again%s. Operator: fix Redis persistence "
            "(appendonly yes, appendfsync always) and follow docs/coordination.md, "
            "'A Redis that forgets'",
            self.owner, len(forgotten), self.lens_loss_pause,
            "" if self._durable else ", and jobs only in flight on other (dead) workers are lost",
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

    async def _write_back(self, data: bytes) -> bool:
        """Write a job into the space, retrying while the space is unreachable
        (until the drain is over); ``False`` if it could not be written."""
        delay = _OUTAGE_BACKOFF[0]
        while True:
            try:
                await self._space.write(data)
            except (ForumError, OSError) as exc:
                if self._drain_expired or self._past_stop_deadline():
                    log.error("could not write a job back (%s): %r", exc, data)
                    return False
                log.warning("could not write a job back (%s); retrying", exc)
                await self._pause(delay)
                delay = min(delay * 2, _OUTAGE_BACKOFF[1])
            else:
                return True

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake at once when the worker is told to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _count(self, outcome: str, n: int = 1) -> None:
        self._counts[outcome] += n


def _held(outcome: HeldClaim | LensError) -> bool:
    """Whether a claim was refused because another holder's claim is live."""
    return isinstance(outcome, AlreadyClaimed)
