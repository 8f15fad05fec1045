"""The worker under limits (forum.coordinator.limits) on an in-process
Forum and the in-memory authority (held to the Lens's contract by
test_authority_contract.py): a job over a limit is parked without a claim,
an admission not claimed is ended at once, and one lost while its job runs
stops the handler, as a lost claim does."""

from __future__ import annotations

import asyncio
import random

from forum.coordinator import Backoff, Job, Worker
from forum.coordinator.limits import Admitter, Ask, Limit
from forum.coordinator.memory import MemoryAuthority
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.coordinator.harness import eventually, running

JOBS = Pattern(b"job/")
FAST = {"take_wait": 0.1, "reaper_interval": 0.05, "backoff": Backoff(base=0.01, cap=0.02)}
ONE = (Limit("task:one", running=1),)


def one_at_a_time(authority: MemoryAuthority) -> Admitter:
    """Every job under one limit of one running."""
    return Admitter(authority, lambda key, payload: Ask(key, "one", ONE))


async def test_jobs_over_a_limit_wait_unclaimed_and_run_one_at_a_time(
    forum: Forum, authority: MemoryAuthority
) -> None:
    running_now: list[bytes] = []
    most = 0
    attempts: list[int] = []

    async def handler(job: Job) -> None:
        nonlocal most
        running_now.append(job.payload)
        most = max(most, len(running_now))
        await asyncio.sleep(0.02)
        attempts.append(job.attempt)
        running_now.remove(job.payload)

    await forum.write_many([b"job/%d" % n for n in range(4)])
    work = Worker(forum, authority, JOBS, handler, concurrency=4, lease=1.0,
                  admission=one_at_a_time(authority), **FAST)  # type: ignore[arg-type]  # fmt: skip
    async with running(work):
        await eventually(lambda: work.stats().done == 4, what="the 4 done")
    assert most == 1 and attempts == [1, 1, 1, 1]
    assert work.stats().over_limit > 0 and work.stats().double_takes == 0


async def test_an_admission_whose_claim_is_refused_is_ended_at_once(
    forum: Forum, authority: MemoryAuthority
) -> None:
    """The job's key is held by another holder: admitted, then refused at
    the claim; its slot is free again for any other job at once."""
    await authority.claim("k", owner="elsewhere", lease=30)
    await forum.write(b"job/copy", key="k")
    work = Worker(forum, authority, JOBS, lambda job: asyncio.sleep(0), lease=1.0,
                  admission=one_at_a_time(authority), **FAST)  # type: ignore[arg-type]  # fmt: skip
    async with running(work):
        await eventually(lambda: work.stats().double_takes >= 1, what="the copy turned away")
        assert await authority.admit_many([Ask("other", "one", ONE)], 1.0) == [(0.0, False)]


async def test_an_admission_lost_while_the_job_runs_stops_its_handler(
    forum: Forum, authority: MemoryAuthority
) -> None:
    """Its slot gone from the limit (expired, say), the job no longer counts
    under it: the heartbeat cancels the handler, as for a lost claim; the
    job comes back and runs to the end."""
    runs: list[str] = []
    ended: list[bool] = []  # per run: whether it was the first (stopped early)

    async def handler(job: Job) -> None:
        runs.append(job.key)
        first = len(runs) == 1
        try:
            await asyncio.sleep(3600 if first else 0)
        finally:
            ended.append(first)

    await forum.write(b"job/long")
    work = Worker(forum, authority, JOBS, handler, lease=0.3,
                  admission=one_at_a_time(authority), **FAST)  # type: ignore[arg-type]  # fmt: skip
    async with running(work):
        await eventually(lambda: runs, what="the job running")
        await authority.release_admitted([Ask(runs[0], "one", ONE)])
        await eventually(lambda: work.stats().done == 1, what="the job run again, to the end")
    assert ended == [True, False] and work.stats().claims_lost == 1


class NoPoll(random.Random):
    """Jitter that stretches the poll past the slot's expiry, so a job parked
    over a concurrency limit waits as long as the holder's lease says."""

    def uniform(self, a: float, b: float) -> float:
        return 1e6


async def test_a_job_parked_over_a_limit_runs_once_its_holder_ends_here(
    forum: Forum, authority: MemoryAuthority
) -> None:
    """Two jobs, at most one running, a lease of a minute, no poll: the one
    refused is parked until the other's slot would expire, and woken when
    the other ends on this worker: it starts after the other's end, asked
    twice (refused once), not a minute on."""
    events: list[tuple[str, str]] = []
    go = asyncio.Event()

    async def handler(job: Job) -> None:
        events.append(("start", job.key))
        await go.wait()
        events.append(("end", job.key))

    await forum.write_many([b"job/1", b"job/2"])
    admission = Admitter(authority, lambda key, payload: Ask(key, "one", ONE), NoPoll())
    work = Worker(forum, authority, JOBS, handler, concurrency=2, lease=60.0,
                  admission=admission, **FAST)  # type: ignore[arg-type]  # fmt: skip
    async with running(work):
        await eventually(lambda: work.stats().over_limit == 1, what="one job parked")
        assert [event for event, _ in events] == ["start"]
        go.set()
        await eventually(lambda: work.stats().done == 2, what="the parked job run")
    (_, first), (_, ended), (_, second), (_, last) = events
    assert [event for event, _ in events] == ["start", "end", "start", "end"]
    assert first == ended != second == last and work.stats().over_limit == 1


async def test_keys_take_turns_at_a_limit_they_share(authority: MemoryAuthority) -> None:
    """The task's limit of 2, met by a batch of key a's 3 jobs before key
    b's one: the keys take turns, so b's job is one of the 2 admitted."""
    task = Limit("task:t", running=2)

    def ask(key: str, payload: bytes) -> Ask:
        return Ask(key, "t", (task, Limit(f"key:t:{payload.decode()}", running=5)))

    jobs = [("a1", b"a"), ("a2", b"a"), ("a3", b"a"), ("b1", b"b")]
    waits = await Admitter(authority, ask).admit(jobs, 5)
    admitted = {key for (key, _), wait in zip(jobs, waits, strict=True) if wait.seconds == 0}
    assert len(admitted) == 2 and "b1" in admitted
