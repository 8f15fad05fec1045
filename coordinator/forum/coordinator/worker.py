"""The worker runtime: reserve → claim → handler(job) → complete → ack.

::

    worker = Worker(space, lens, Pattern(b"job/"), handler, concurrency=8, lease=30)
    await worker.run()          # until worker.stop() (the CLI calls it on SIGTERM)

The space is a :class:`forum.coordinator.spaces.WorkSpace` (``Forum``,
``ForumClient``): the node keeps a copy of every job until the job is
completed, so Redis losing everything (a FLUSHALL, a restart without
persistence) costs re-runs, never a job. (A plain take-only space is wrapped
in :class:`forum.coordinator.spaces.TakeOnly`, which gives that up: see there.)
For each job:

1. **reserve** tuples matching the pattern, as many as there are free
   handler slots; when none is live, one blocking reserve with a timeout, so
   an idle worker waits on the space instead of polling it. A reservation
   takes the tuple out of reach for the lease without taking it for good:
   if this worker dies, or the answer is lost, the tuple comes back. A retry
   whose backoff is not over (``not_before`` in its trailer,
   :mod:`forum.coordinator.envelope`) is not claimed: it is parked, reserved until
   it is due, then released (:class:`forum.coordinator.holding.Parked`).
   The next batch may be reserved ahead (:mod:`forum.coordinator.reservations`).
2. **claim** each one's key in the Lens, all in one round trip: the key that
   travels in the tuple's trailer, else the key it was written with
   (``write(..., key=...)``), else ``key(payload)`` when given, else the
   tuple's entry id. The claim carries no re-offer bytes: the reservation is
   the job's copy. The job runs as the attempt the Lens counts it
   (``HeldClaim.attempt``: every copy of a job, on any node, is counted in
   one sequence; docs/coordination.md, "How many times can my task run?").
   Nothing is acked yet. Under limits (forum.coordinator.limits), each is
   admitted first; one over a limit is parked unclaimed, so its wait is no
   attempt (:mod:`forum.coordinator.admitting`).
3. run ``handler(job)`` while a heartbeat, each third of a lease, extends the
   Lens claims of all running jobs in one call and their node reservations in
   one more (``extend_many``); if a claim is lost, the handler is cancelled,
   and so is one whose job was cancelled (the claim keeper's watch asks
   every half second: forum.coordinator.keeping; its reservation is acked).
   The handler calls ``await job.verify()`` right before irreversible work;
4. **complete** the claim (a done marker turns copies away), batched with
   other finished jobs, off the slot's critical path
   (:mod:`forum.coordinator.completions`), and only then
5. **ack** the reservations of the completed jobs (the Takes are appended),
   in one call, carried by the next reserve ahead where one is sent soon
   (:mod:`forum.coordinator.reservations`).

At every moment a durable copy exists on a node::

    t0  reserve e1            the node holds e1, reserved
    t1  claim k               the node holds e1; the Lens holds the claim
    t2  handler runs          heartbeats renew both leases
    t3  complete k            done marker; the node still holds e1
    t4  ack e1                the Take is appended: the job is over

A worker killed anywhere in t0..t4 lets e1's reservation run out: e1 comes
back, and its claim key dedups it (``AlreadyDone`` after t3: acked away;
``AlreadyClaimed`` while a live holder still runs it: parked for what is
left of that holder's lease, then offered again). Redis forgetting anywhere
in t1..t3 leaves e1 on the node: the job comes back and runs again (a
re-run, not a loss).

Outcomes other than success:

* ``AlreadyDone`` at the claim: a copy of a finished job, acked away;
  ``AttemptsSpent``, of a buried one, likewise. ``AlreadyClaimed``: a copy
  of a job another holder runs now, parked (see above). All are counted as
  ``double_takes`` and the handler does not run; logged at DEBUG, and in a
  summary at INFO at most once a minute (:mod:`forum.coordinator.doubletakes`).
  ``NotDue``: a copy met after an attempt failed, before the next is due:
  parked until then, as a retry (:mod:`forum.coordinator.offers`).
* The handler raised, gave up or asked for a retry; the job killed its
  worker (one delivered past ``max_attempts`` that way is buried unrun, as
  :data:`LOST_WORKER`); it was cancelled, abandoned or its claim lost or
  forgotten: :mod:`forum.coordinator.settling` says what is done with it.
* The Lens is unavailable at the claim (Redis unreachable, full, read-only,
  a shard without a master, refusing: forum.coordinator.errors, UNAVAILABLE): fail
  closed. No handler runs; the reservations are released, once, so the
  tuples are live again in their places under their own ids, and the worker
  reserves nothing more until a check finds every shard taking writes again,
  checking with a jittered, capped back-off that only a granted claim resets
  (:mod:`forum.coordinator.availability`, which also says what is logged).
* Redis lost the Lens's state (``LensStateLost``: flushed, or restarted
  without persistence): fail closed as above, and more (see
  :meth:`forum.coordinator.keeping.ClaimKeeper.note_state_loss`). One error
  line per loss, counted in ``lens_state_losses``. The handlers still
  running under claims from before the loss are cancelled and their
  reservations released (``rescued``); no job is claimed for
  ``lens_loss_pause`` seconds (default: one lease), so every holder from
  before the loss, on any worker, has stopped before a job can be claimed
  again. Completed jobs whose acks had not landed come back
  and run again: the done markers are gone.
* ``stop()``: stop taking at once (a blocking reserve still waiting is
  abandoned; reservations not yet claimed, and parked ones, are released),
  let running handlers finish for ``drain_timeout`` seconds, then cancel the
  rest and release their claims and reservations.

Every worker also runs a reaper (:mod:`forum.coordinator.reaper`): a Worker
leaves no in-flight records in the Lens, but a claim handed back
(``Claim.hand_back``) or a worker of another version does, and the reaper
writes those back.

A job that comes back more than one way is one claim key, so its effect
still happens once while the Lens remembers (see docs/coordination.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

from forum.coordinator.admitting import Admitting
from forum.coordinator.authority import ClaimAuthority
from forum.coordinator.availability import OUTAGE_BACKOFF, Availability
from forum.coordinator.completions import Completions
from forum.coordinator.deadletter import DEFAULT_DEAD_PREFIX, bury
from forum.coordinator.doubletakes import DoubleTakes
from forum.coordinator.envelope import Envelope
from forum.coordinator.errors import LensError
from forum.coordinator.holding import Slots
from forum.coordinator.job import Backoff, Handler, Job, KeyFunction
from forum.coordinator.keeping import ClaimKeeper
from forum.coordinator.lanes import Lanes
from forum.coordinator.limits import Admission
from forum.coordinator.offers import Answers, Offer
from forum.coordinator.presence import HEAD, Presence
from forum.coordinator.reaper import Reaper
from forum.coordinator.reservations import Reservations
from forum.coordinator.settling import LOST_WORKER, Settling
from forum.coordinator.spaces import TakeOnly, WorkSpace
from forum.coordinator.stats import WorkerStats
from forum.node.core.cancellation import wait_event
from forum.node.core.entries import EntryId, Reserved
from forum.node.core.errors import ForumError
from forum.node.core.space import Pattern, TupleSpace

log = logging.getLogger(__name__)

# LOST_WORKER lives with the settling of jobs; it is the worker's name too
# (forum.tasks knows it from here), so it is exported here.
__all__ = [
    "DEFAULT_CONCURRENCY", "DEFAULT_DRAIN_TIMEOUT", "DEFAULT_LEASE", "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_TAKE_WAIT", "LOST_WORKER", "Worker", "default_owner",
]  # fmt: skip

#: The defaults of :class:`Worker`, which ``forum worker``'s flags and
#: ``App.run_worker`` share.
DEFAULT_CONCURRENCY = 8
DEFAULT_LEASE = 30.0
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_DRAIN_TIMEOUT = 30.0
#: How long one blocking reserve waits on an idle space before the worker
#: asks again. A stop does not wait for it: the outstanding reserve is abandoned.
DEFAULT_TAKE_WAIT = 2.0
#: The longest a reservation made ahead waits for a slot before it is
#: released (see Reservations.reserve): what a busy worker may keep from others.
_AHEAD_HOLD = 0.2


def default_owner() -> str:
    """A worker's name in claims when none is given: ``host-pid-random``
    (also its client id in a cluster, which places its home groups)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """Runs ``handler`` on jobs reserved from ``space`` under claims from ``lens``.

    ``space`` is a :class:`WorkSpace`; a plain take-only ``TupleSpace`` is
    wrapped in :class:`TakeOnly` (a crash then loses the jobs it held).
    ``pattern`` is what it reserves: one pattern, or :class:`Lanes` (several,
    by weight: :mod:`forum.coordinator.lanes`).
    """

    def __init__(
        self,
        space: WorkSpace | TupleSpace,
        lens: ClaimAuthority,
        pattern: Pattern | Lanes,
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
        admission: Admission | None = None,
    ) -> None:
        if concurrency < 1 or max_attempts < 1:
            raise ValueError("concurrency and max_attempts must be at least 1")
        if lease <= 0 or drain_timeout < 0 or take_wait <= 0:
            raise ValueError("lease and take_wait must be positive, drain_timeout not negative")
        if lens_loss_pause is not None and lens_loss_pause < 0:
            raise ValueError("lens_loss_pause must not be negative")
        lanes = Lanes.of(pattern)
        if any(dead_prefix.startswith(prefix) for prefix in lanes.prefixes):
            # The worker would take its own dead letters and run them forever.
            raise ValueError(f"dead prefix {dead_prefix!r} matches the job pattern")
        if not isinstance(space, WorkSpace):
            log.warning("the space cannot reserve: a worker that dies loses the jobs it holds")
            space = TakeOnly(space, key)
        self._space: WorkSpace = space
        self._lens = lens
        self._handler = handler
        self.concurrency = concurrency
        self.lease = lease
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self._key = key
        self.owner = owner or default_owner()
        #: This worker's record in the Lens's Redis, for dashboards (forum.coordinator.presence).
        self._presence = Presence.for_lens(
            lens, self.owner, concurrency, lease, str(getattr(self._space, "url", ""))
        )
        self.dead_prefix = dead_prefix
        self.drain_timeout = drain_timeout
        #: How long no job is claimed after a state loss (ClaimKeeper.note_state_loss).
        self.lens_loss_pause = lease if lens_loss_pause is None else lens_loss_pause
        self._rng = random.Random(seed)
        #: What this worker counts (its state fields are filled in by stats()).
        self._counts = WorkerStats()
        #: The double takes caught since the last summary line.
        self._doubles = DoubleTakes(b" ".join(lanes.prefixes))
        self._stopping = asyncio.Event()
        self._started = False
        self._reservations = Reservations(
            self._space, lanes, lease=lease, concurrency=concurrency, take_wait=take_wait,
            stopping=self._stopping,
        )  # fmt: skip
        self._reaper = Reaper(space, lens, interval=reaper_interval, on_reoffer=self._reoffered)
        self._completions = Completions(
            lens, self._completed, limit=4 * concurrency, ack=self._reservations.ack_later
        )
        self._slots = Slots(concurrency)
        #: Whether the Lens takes claims now, and the back-off while it does not.
        self._availability = Availability(self.owner, self._rng)
        self._keeper = ClaimKeeper(
            lens, self._availability, self._reservations, self._counts, owner=self.owner,
            lease=lease, loss_pause=self.lens_loss_pause,
        )  # fmt: skip
        #: Limits on the jobs (forum.coordinator.limits): none, no calls.
        self._admitting = None if admission is None else Admitting(
            admission, self._reservations, self._slots, self._counts, lease=lease,
            concurrency=concurrency,
        )  # fmt: skip
        self._keeper.admission = admission
        #: What is done with each job once its handler is over (forum.coordinator.settling).
        self._settling = Settling(
            keeper=self._keeper, reservations=self._reservations, completions=self._completions,
            counts=self._counts, max_attempts=max_attempts, backoff=self.backoff,
            dead_prefix=dead_prefix, rng=self._rng, write_back=self._write_back,
            outage_waits=self._outage_waits,
        )  # fmt: skip
        self._jobs: set[asyncio.Task[None]] = set()
        self._drain_expired = False
        self._stop_deadline: float | None = None

    def stats(self) -> WorkerStats:
        """A copy of the counts, with the worker's state now."""
        paused = self._keeper.pause_left() > 0
        lens = self._availability.state()
        return replace(
            self._counts,
            running=len(self._keeper.running),
            lens_reachable=lens.available and not paused,
            lens_unavailable_reason=lens.reason or ("paused" if paused else None),
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
        try:
            await self._announce()  # listed from the start, not a third of a lease on
            await self._work()
        finally:
            if self._presence is not None:
                # Stopped (or failed): no longer listed. Shielded: it must finish.
                await asyncio.shield(self._presence.aclose())

    async def _work(self) -> None:
        reaper_stop = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._reaper.run(reaper_stop), name="reaper")
            completer = tasks.create_task(self._completions.run(), name="completions")
            heartbeat_stop = asyncio.Event()
            tasks.create_task(
                self._keeper.heartbeat(heartbeat_stop, self._announce), name="heartbeat"
            )
            tasks.create_task(self._keeper.watch(heartbeat_stop), name="cancel watch")
            tasks.create_task(self._reservations.release_when_due(), name="parked")
            acker = tasks.create_task(self._reservations.send_overdue_acks(), name="acks")
            await self._fetch(tasks)
            self._reservations.stop_parking()  # nothing parks after the fetcher
            await self._drain()
            heartbeat_stop.set()
            self._completions.close()
            await completer
            self._reservations.close_acks()
            await acker
            # One last pass, so in-flight records that fell due are in the space
            # before this worker is gone (any other reaper would do it too).
            try:
                await self._reaper.run_once()
            except (LensError, ForumError, OSError) as exc:
                log.warning("drain: final reaper pass failed (%s); other reapers will do it", exc)
            reaper_stop.set()

    # -- reserving and claiming ---------------------------------------------------------

    async def _fetch(self, tasks: asyncio.TaskGroup) -> None:
        """Reserve and claim jobs for free slots until the worker stops."""
        while free := await self._free_slots():
            self._keeper.note_state_loss()
            if paused := self._keeper.pause_left():
                self._slots.release(free)
                await self._reservations.drop_ahead()
                await self._pause(paused)
                continue
            if self._admitting is not None and (full := self._admitting.full_for()):
                self._slots.release(free)
                await self._reservations.drop_ahead()
                await self._pause(full)
                continue
            if not self._availability.may_try():
                self._slots.release(free)
                await self._reservations.drop_ahead()
                await self._availability.wait_until_checked(self._lens.ping, self._stopping)
                continue
            try:
                items = await self._reservations.reserve(free, tasks)
            except (ForumError, OSError) as exc:
                self._slots.release(free)
                log.warning("reserve failed (%s); retrying", exc)
                await self._pause(OUTAGE_BACKOFF.cap)
                continue
            self._slots.release(free - len(items))
            if items:
                self._counts.taken += len(items)
                await self._claim(items, tasks)
            else:
                self._availability.idle()
        await self._reservations.drop_ahead()

    async def _free_slots(self) -> int:
        """Every free slot, once one is (0 once stopped). Reservations made
        ahead are released if no slot frees within :data:`_AHEAD_HOLD`."""
        if self._reservations.holding_ahead() and not await self._slots.wait_free(_AHEAD_HOLD):
            await self._reservations.drop_ahead()
        return await self._slots.acquire_all()

    async def _claim(self, items: list[Reserved], tasks: asyncio.TaskGroup) -> None:
        """Claim the reserved ``items`` in one round trip and start a job for
        each one granted; settle the rest (see the module docstring)."""
        offers = await self._offers(items)
        offers = await self._defer_not_due(offers)
        if not offers:
            return
        if self._keeper.note_state_loss():
            # A loss another call found while these were reserved: pause first.
            await self._put_back(offers)
            return
        generation = self._keeper.generation
        try:
            if self._admitting is not None:
                offers = await self._admitting.admitted(offers)
                if not offers:
                    return
            outcomes = await self._lens.claim_many(
                [(offer.key, None) for offer in offers],
                self.owner,
                self.lease,
                [offer.envelope.attempt for offer in offers],
                [offer.envelope.revived for offer in offers],
            )
        except LensError as exc:
            # Fail closed, lose nothing: no handler without a claim; the jobs go
            # back into the space, each under its own id (and so its key),
            # once: nothing is reserved again until a check passes.
            self._counts.lens_unavailable += len(offers)
            self._availability.failed(exc, put_back=len(offers))
            self._keeper.note_state_loss()
            await self._put_back(offers)
            if self._admitting is not None:
                await self._admitting.release([offer.key for offer in offers])
            return
        answers = Answers.sort(offers, outcomes, self.lease)
        if self._admitting is not None and len(answers.granted) < len(offers):
            # Admitted, not claimed: the slots are free for others at once.
            granted = {offer.key for offer, _ in answers.granted}
            await self._admitting.release([o.key for o in offers if o.key not in granted])
        if answers.granted:
            # A claim granted is a write Redis took. (A full Redis still
            # answers AlreadyDone: that script writes nothing.)
            self._availability.granted()
        # What to do with each copy not granted: forum.coordinator.offers.
        await self._reservations.ack(answers.gone)
        await self._reservations.park(answers.held)
        await self._defer(answers.not_due)
        for offer, why in answers.doubles:
            self._counts.double_takes += 1
            self._doubles.caught(offer.item.id, why)
            self._slots.release()
        for offer, claim in answers.granted:
            envelope = offer.envelope.at_attempt(claim.attempt)  # the Lens's count
            job = Job(envelope.payload, offer.item.id, offer.key, envelope.attempt, claim)
            # Past max_attempts only by deliveries whose workers died: not run again.
            died = offer.item.deliveries > 1 or claim.lapsed
            run = self._run_job(
                job, envelope, generation, lost=died and job.attempt > self.max_attempts
            )
            task = tasks.create_task(run, name=f"job {job.key}")
            self._jobs.add(task)
            task.add_done_callback(self._jobs.discard)

    async def _offers(self, items: list[Reserved]) -> list[Offer]:
        """Each tuple with its claim key and its attempt; one whose key
        function failed is parked as a dead letter (there is no claim without
        a key, so no worker could ever run it), and its reservation acked."""
        offers: list[Offer] = []
        unkeyable: list[EntryId] = []
        for item in items:
            opened = Envelope.open(item.payload)
            try:
                envelope = opened.keyed(self._key, str(item.id), item.props.key)
            except Exception:
                log.exception("the key function failed on %s: parking it as a dead letter", item.id)
                self._slots.release()
                if await self._write_back(bury(opened, self.dead_prefix)):
                    self._counts.dead += 1
                    unkeyable.append(item.id)
                continue
            attempt = envelope.attempt + item.deliveries - 1
            offers.append(Offer(item, str(envelope.key), envelope.at_attempt(attempt)))
        await self._reservations.ack(unkeyable)
        return offers

    async def _defer_not_due(self, offers: list[Offer]) -> list[Offer]:
        """The offers that may run now. A retry reserved before its backoff is
        over (``not_before`` in its trailer) is parked until it is due: it
        waits in the space, durably, without being polled or claimed."""
        now = time.time()
        await self._defer([(o, o.envelope.due_in(now)) for o in offers if o.envelope.due_in(now)])
        return [offer for offer in offers if not offer.envelope.due_in(now)]

    async def _defer(self, later: list[tuple[Offer, float]]) -> None:
        """Park each offer for its wait (seconds), named in the presence
        record as retrying: a retry not due by its trailer, or a copy of a job
        whose next attempt the Lens says is not due (``NotDue``). Parked, not
        released: it would come straight back; nor claimed again until due."""
        if later:
            self._reservations.retrying |= {o.item.id: o.envelope.payload[:HEAD] for o, _ in later}
            self._counts.deferred += len(later)
            self._slots.release(len(later))
            await self._reservations.park([(o.item.id, wait) for o, wait in later])

    async def _put_back(self, offers: list[Offer]) -> None:
        """Release unclaimed jobs' reservations: live again in their places."""
        await self._reservations.release([offer.item.id for offer in offers])
        self._slots.release(len(offers))

    # -- running a claimed job ----------------------------------------------------------

    async def _run_job(self, job: Job, envelope: Envelope, generation: int, *, lost: bool) -> None:
        try:
            if lost:
                await self._settling.lost_worker(job, envelope)
                return
            interrupted, error = await self._keeper.run_handler(self._handler, job, generation)
            self._keeper.note_state_loss()
            await self._settling.settle(
                job, envelope, interrupted, error, generation < self._keeper.generation
            )
        finally:
            if self._admitting is not None:
                await self._admitting.release([job.key])
            self._slots.release()

    async def _announce(self, within: float | None = None) -> None:
        """Write this worker's presence record (one command; none without a
        Lens), giving up after ``within`` s: a slow write must not delay the
        next beat, whose extensions keep the claims. A summary of the double
        takes caught is logged here when one is due."""
        self._doubles.summarize()
        if self._presence is not None:
            running = list(self._keeper.running.values())
            await self._presence.beat(
                self.stats(),
                [state.claim.key for state in running],
                within or self.lease / 3,
                heads=[state.head for state in running],
                retrying=list(self._reservations.retrying.values()),
            )

    async def _drain(self) -> None:
        """Let running jobs finish for ``drain_timeout``; then cancel their handlers."""
        if not self._jobs:
            return
        _, late = await asyncio.wait(set(self._jobs), timeout=self.drain_timeout)
        if late:
            self._drain_expired = True
            log.warning("drain: cancelling %d handlers past the drain timeout", len(late))
            self._keeper.abandon_all()
            await asyncio.wait(late)

    # -- outages ------------------------------------------------------------------------

    def _outage_waits(self) -> Iterator[float]:
        """The waits between tries of one call while Redis or the space is
        down (a claim's release, a job's write back): the worker's one
        outage policy, :data:`forum.coordinator.availability.OUTAGE_BACKOFF`."""
        return OUTAGE_BACKOFF.delays(self._rng)

    async def _write_back(self, data: bytes) -> bool:
        """Write a job into the space, retrying while the space is unreachable
        (until the drain is over); ``False`` if it could not be written."""
        waits = self._outage_waits()
        while True:
            try:
                await self._space.write(data)
            except (ForumError, OSError) as exc:
                if self._drain_expired or self._past_stop_deadline():
                    log.error("could not write a job back (%s): %r", exc, data)
                    return False
                log.warning("could not write a job back (%s); retrying", exc)
                await self._pause(next(waits))
            else:
                return True

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake at once when the worker is told to stop."""
        await wait_event(self._stopping, seconds)

    # -- counting what others report ----------------------------------------------------

    def _completed(self, outcome: str) -> None:
        """:class:`Completions` reports each claim: ``"done"`` or ``"claims_lost"``."""
        if outcome == "done":
            self._counts.done += 1
        else:
            self._counts.claims_lost += 1

    def _reoffered(self) -> None:
        self._counts.reoffered += 1
