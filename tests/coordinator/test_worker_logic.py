"""Worker logic on an in-process Forum and the in-memory claim authority
(``forum.coordinator.memory``, held to the Lens's contract by
test_authority_contract.py): outages, state losses and the take-only
adapter, each in well under a second."""

from __future__ import annotations

import asyncio

from forum.coordinator import Backoff, Job, Worker
from forum.coordinator.envelope import Envelope
from forum.coordinator.holding import Acks, Parked
from forum.coordinator.memory import MemoryAuthority
from forum.coordinator.spaces import TakeOnly
from forum.node.core.entries import EntryId
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.coordinator.harness import eventually, running
from tests.coordinator.test_worker import PlainSpace

JOBS = Pattern(b"job/")
FAST = {"take_wait": 0.1, "reaper_interval": 0.05, "backoff": Backoff(base=0.01, cap=0.02)}


async def test_a_state_loss_mid_run_cancels_the_handlers_and_loses_no_job(
    forum: Forum, authority: MemoryAuthority
) -> None:
    """t0: 3 handlers run. t1: the authority forgets. t2: the heartbeat meets
    the loss: the 3 are cancelled, their reservations released (rescued);
    nothing is claimed for the pause. t3: the 3 run again, to the end."""
    release = asyncio.Event()
    starts: list[bytes] = []
    effects: list[bytes] = []

    async def handler(job: Job) -> None:
        starts.append(job.payload)
        await release.wait()
        await job.verify()
        effects.append(job.payload)

    await forum.write_many([b"job/a", b"job/b", b"job/c"])
    work = Worker(forum, authority, JOBS, handler, concurrency=3, lease=0.3,
                  lens_loss_pause=0.2, **FAST)  # type: ignore[arg-type]  # fmt: skip
    async with running(work):
        await eventually(lambda: work.stats().running == 3, what="3 handlers running")
        authority.forget()
        await eventually(lambda: work.stats().rescued == 3, what="the 3 put back")
        assert effects == [] and work.stats().lens_state_losses == 1
        release.set()
        await eventually(lambda: work.stats().done == 3, what="the 3 done")
    assert sorted(effects) == [b"job/a", b"job/b", b"job/c"]
    assert sorted(starts) == sorted([b"job/a", b"job/b", b"job/c"] * 2)
    assert await forum.count(JOBS) == 0 and forum.stats().reserved == 0


async def test_a_handler_that_cannot_be_extended_is_cancelled_before_its_lease_ends(
    forum: Forum, authority: MemoryAuthority
) -> None:
    """The authority goes down while a handler runs: the heartbeat cannot show
    the claim outlasts the next beat, so the handler is cancelled (in its own
    task: the job's task carries on and settles it: it leaves the
    reservation, which runs out). Once the authority is back, the job runs
    again, to the end, as attempt 2: a lease that ran out counts as an
    attempt (Reserved.deliveries)."""
    cancelled = asyncio.Event()
    runs: list[int] = []

    async def handler(job: Job) -> None:
        runs.append(job.attempt)
        if len(runs) > 1:
            return
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await forum.write(b"job/long")
    work = Worker(forum, authority, JOBS, handler, lease=0.3, **FAST)  # type: ignore[arg-type]
    async with running(work):
        await eventually(lambda: work.stats().running == 1, what="the handler running")
        authority.available = False
        await asyncio.wait_for(cancelled.wait(), 2)
        assert work.stats().claims_lost == 1 and not work.stats().lens_reachable
        authority.available = True
        await eventually(lambda: work.stats().done == 1, what="the job run again")
    assert runs == [1, 2]
    assert await forum.count(JOBS) == 0 and forum.stats().reserved == 0


async def test_a_handler_that_lets_a_cancellation_out_has_failed(
    forum: Forum, authority: MemoryAuthority
) -> None:
    attempts: list[int] = []

    async def handler(job: Job) -> None:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise asyncio.CancelledError  # not the worker's: the handler's own

    await forum.write(b"job/x")
    work = Worker(forum, authority, JOBS, handler, lease=2.0, **FAST)  # type: ignore[arg-type]
    async with running(work):
        await eventually(lambda: work.stats().done == 1, what="attempt 2 done")
    assert attempts == [1, 2] and work.stats().retried == 1


async def test_a_take_only_space_puts_a_job_back_under_its_first_key(
    forum: Forum, authority: MemoryAuthority
) -> None:
    """On a space that can only take (wrapped in TakeOnly), a job that cannot
    be claimed is written back, under a new entry id but carrying the claim
    key of its first delivery: it runs once, under that key."""
    ran: list[Job] = []

    async def handler(job: Job) -> None:
        ran.append(job)

    first = await forum.write(b"job/a")
    authority.available = False
    work = Worker(PlainSpace(forum), authority, JOBS, handler, **FAST)  # type: ignore[arg-type]
    assert isinstance(work._space, TakeOnly)
    async with running(work):
        await eventually(lambda: work.stats().lens_unavailable >= 1, what="a claim refused")
        await eventually(lambda: _live(forum), what="the job written back")
        back = await forum.read_entry(JOBS)
        assert back is not None and back.id != first
        assert Envelope.open(back.payload) == Envelope(b"job/a", key=str(first))
        authority.available = True
        await eventually(lambda: work.stats().done == 1, what="done")
    [job] = ran
    assert (job.key, job.payload, job.attempt) == (str(first), b"job/a", 1)
    assert await forum.count(JOBS) == 0


async def _live(forum: Forum) -> bool:
    return await forum.count(JOBS) == 1


async def test_acks_wait_for_a_reserve_to_carry_them_then_go_alone() -> None:
    """Acks taken by a reserve are not handed out again; those left past the
    delay are handed out all at once, the delay counted from the first; once
    closed, what is left goes at once, then nothing."""
    acks = Acks(delay=0.05)
    acks.add([EntryId("a", 1), EntryId("a", 2)])
    assert acks.take() == [EntryId("a", 1), EntryId("a", 2)] and len(acks) == 0
    acks.add([EntryId("a", 3)])
    acks.add([EntryId("a", 4)])
    assert await asyncio.wait_for(acks.overdue(), 5) == [EntryId("a", 3), EntryId("a", 4)]
    acks.add([EntryId("a", 5)])
    acks.close()
    assert await asyncio.wait_for(acks.overdue(), 5) == [EntryId("a", 5)]
    assert await asyncio.wait_for(acks.overdue(), 5) == []


class _StopsDuringReserve:
    """A Forum whose ``reserve_many`` finds nothing and stops the worker while
    it answers: the stop lands between the batch reserve and the blocking one."""

    def __init__(self, forum: Forum) -> None:
        self._forum = forum
        self.worker: Worker | None = None
        self.blocking_reserves = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._forum, name)

    async def reserve_many(self, pattern: Pattern, lease: float, limit: int) -> list[object]:
        assert self.worker is not None
        self.worker.stop()
        return []

    async def reserve(self, pattern: Pattern, lease: float, timeout: float | None = None) -> None:
        self.blocking_reserves += 1


async def test_a_parked_reservation_woken_is_released_at_once_and_once() -> None:
    """Woken (a slot of its limit freed), a parked id is handed out at once,
    not at its time; its old heap entry is then skipped, as is the first
    time of one parked again: each id is released once."""
    a, b, c = EntryId("n", 1), EntryId("n", 2), EntryId("n", 3)
    parked = Parked()
    for entry_id in (a, b, c):
        parked.add(entry_id, 3600)
    parked.wake([b, a])
    assert await parked.due() == [b, a] and len(parked) == 1
    parked.wake([a])  # released already: let be
    parked.add(c, 0)  # parked again: its new time stands
    assert await parked.due() == [c] and len(parked) == 0
    parked.add(a, 3600)
    parked.wake([a])
    parked.add(a, 3600)  # parked again after a wake not yet handed out
    parked.close()
    assert await parked.due() == [a]
    assert await parked.due() == []


async def test_a_stop_during_the_batch_reserve_makes_no_blocking_reserve(
    forum: Forum, authority: MemoryAuthority
) -> None:
    """The blocking reserve is not even made (a coroutine made and never
    awaited is a RuntimeWarning: an error under the suite's filterwarnings)."""

    async def handler(job: Job) -> None:
        raise AssertionError("no job was written")

    space = _StopsDuringReserve(forum)
    work = Worker(space, authority, JOBS, handler, **FAST)  # type: ignore[arg-type]
    space.worker = work
    await asyncio.wait_for(work.run(), 5)
    assert space.blocking_reserves == 0
