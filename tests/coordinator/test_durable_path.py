"""The durable path: the node keeps every job reserved until its claim is
completed, so a Redis that forgets (or a worker that dies) costs re-runs,
never a job.

In-process Forums and a real Redis; the SIGKILL test runs real processes.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from examples.handlers.fenced_redis import FencedRedisStore
from forum.coordinator import Backoff, DeadLetter, Job, Lens, Worker
from forum.coordinator.worker import LOST_WORKER
from forum.node.client.remote import ForumClient
from forum.node.core.errors import NodeUnavailable
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.coordinator.harness import WorkerProcess, eventually, running, worker_processes
from tests.coordinator.test_worker_process import started, worker_args
from tests.fixtures.nodes import NodeProcess
from tests.fixtures.redis_server import RedisServer

JOBS = Pattern(b"job/")
_FAST = {"take_wait": 0.2, "reaper_interval": 0.05, "lens_loss_pause": 0.5}


class _Gate:
    """A handler that records each start and each effect; jobs wait until
    the gate opens before their effect."""

    def __init__(self) -> None:
        self.starts: list[tuple[bytes, int, float]] = []
        self.effects: list[bytes] = []
        self.open = asyncio.Event()

    async def handler(self, job: Job) -> None:
        self.starts.append((job.payload, job.attempt, time.monotonic()))
        await self.open.wait()
        await job.verify()
        self.effects.append(job.payload)


async def test_a_running_job_stays_reserved_on_the_node_through_a_flushall(
    forum: Forum, lens: Lens, redis_server: RedisServer
) -> None:
    """t0: the worker claims job/x and runs its handler. t1: FLUSHALL: the
    claim is gone. The node still holds job/x reserved (before this change
    it had been acked at the claim, and its only copy was in Redis).
    t2: the worker sees the loss, releases the reservation; after the
    pause job/x runs again and is done; the space ends empty."""
    gate = _Gate()
    work = Worker(forum, lens, JOBS, gate.handler, lease=1.0, **_FAST)  # type: ignore[arg-type]
    async with running(work):
        await forum.write(b"job/x")
        await eventually(lambda: work.stats().running == 1, what="the handler running")
        assert forum.stats().reserved == 1, "the job must stay reserved on the node"
        redis_server.flushall()
        assert forum.stats().reserved == 1
        await eventually(lambda: work.stats().lens_state_losses == 1, what="the loss seen")
        gate.open.set()
        await eventually(lambda: gate.effects == [b"job/x"], what="job/x done")
        await eventually(lambda: forum.stats().reserved == 0, what="acked after complete")
    assert await forum.count(JOBS) == 0
    assert work.stats().rescued == 1
    assert [payload for payload, _, _ in gate.starts] == [b"job/x", b"job/x"]


async def test_the_heartbeat_keeps_a_long_job_reserved(forum: Forum, lens: Lens) -> None:
    """A handler that runs for 3 leases: its reservation is extended with
    its claim, so a second worker on the same node is never offered the
    job (before, it would reserve it once the reservation ran out and meet
    AlreadyClaimed)."""
    gate = _Gate()
    one = Worker(forum, lens, JOBS, gate.handler, lease=0.6, **_FAST)  # type: ignore[arg-type]
    other = _Gate()
    two = Worker(forum, lens, JOBS, other.handler, lease=0.6, **_FAST)  # type: ignore[arg-type]
    async with running(one):
        await forum.write(b"job/long")
        await eventually(lambda: one.stats().running == 1, what="the handler running")
        async with running(two):
            await asyncio.sleep(3 * 0.6)
            assert forum.stats().reserved == 1
            gate.open.set()
            await eventually(lambda: gate.effects == [b"job/long"], what="done")
            await eventually(lambda: forum.stats().reserved == 0, what="acked")
    assert two.stats().taken == 0 and two.stats().double_takes == 0
    assert other.starts == []


async def test_a_retry_waits_in_the_space_until_it_is_due(forum: Forum, lens: Lens) -> None:
    """Attempt 1 fails: attempt 2 is written into the space with its
    not_before (the failed reservation acked only then), and is deferred on
    the node, not run, until the backoff is over."""
    starts: list[tuple[int, float]] = []

    async def fail_once(job: Job) -> None:
        starts.append((job.attempt, time.monotonic()))
        if job.attempt == 1:
            raise RuntimeError("first attempt fails")

    backoff = Backoff(base=1.0, cap=1.0, jitter=0.0)
    work = Worker(forum, lens, JOBS, fail_once, lease=2.0, backoff=backoff, **_FAST)  # type: ignore[arg-type]
    async with running(work):
        await forum.write(b"job/r")
        await eventually(lambda: work.stats().retried == 1, what="attempt 1 failed")
        # One copy in the space: attempt 2, live or deferred (reserved), never none.
        assert await forum.count(JOBS) + forum.stats().reserved == 1
        await eventually(lambda: len(starts) == 2, what="attempt 2")
        await eventually(lambda: forum.stats().reserved == 0, what="acked")
    (first, t1), (second, t2) = starts
    assert (first, second) == (1, 2)
    assert t2 - t1 >= 0.9, "attempt 2 ran before its backoff was over"
    assert work.stats().deferred >= 1
    assert await forum.count(JOBS) == 0


async def test_a_copy_of_a_held_job_is_offered_again_when_the_holders_lease_can_end(
    forum: Forum, lens: Lens
) -> None:
    """t0: another holder claims job k's key for 0.8 s (and never extends).
    t1: the worker (lease 30 s) reserves k and meets AlreadyClaimed, with
    0.8 s left on the holder's lease: k is parked that long, then released.
    t2 (~t0 + 0.8 s): k is reserved again, claimed, run, as attempt 2: the
    other holder's lapsed claim is attempt 1, counted by the Lens (its
    worker died, as far as anyone can tell), and the parked copy is
    released, not left to run out (that lapse would count one more
    delivery on the node: attempt 3). Before, k was held for a third of the
    worker's lease (10 s) and then left to run out."""
    ran: list[tuple[int, float]] = []

    async def handler(job: Job) -> None:
        ran.append((job.attempt, time.monotonic()))

    job_id = await forum.write(b"job/k")
    await lens.claim(str(job_id), owner="another", lease=0.8)
    t0 = time.monotonic()
    work = Worker(forum, lens, JOBS, handler, lease=30.0, **_FAST)  # type: ignore[arg-type]
    async with running(work):
        await eventually(lambda: work.stats().done == 1, timeout=4, what="k run")
    [(attempt, started)] = ran
    assert attempt == 2
    assert started - t0 >= 0.7, "k was claimed while another holder's lease lasted"
    assert work.stats().double_takes >= 1
    assert await forum.count(JOBS) == 0 and forum.stats().reserved == 0


@pytest.mark.slow
async def test_a_worker_sigkilled_mid_handler_with_the_lens_flushed_loses_nothing(
    forum_node: NodeProcess,
    redis_url: str,
    redis_server: RedisServer,
    fenced: FencedRedisStore,
    tmp_path: Path,
) -> None:
    """t0: worker A claims job k (lease 1 s) and hangs in its handler.
    t1: A is SIGKILLed. t2: FLUSHALL: A's claim is gone (before this change,
    with it the job's only copy: its Take was appended at the claim). t3: A's
    reservation runs out on the node: k is live again. t4: B runs k."""
    env = {"FORUM_EXAMPLE_REDIS_URL": redis_url}
    async with ForumClient(forum_node.url) as space, worker_processes(tmp_path) as workers:
        job_id = await space.write(b"job/durable")
        a_args = worker_args(forum_node, redis_url, "hang_after_start", "--lease", "1")
        a = WorkerProcess("a", tmp_path, a_args, env)
        workers.append(a)
        await a.start()
        await eventually(lambda: _started(redis_url, 1), what="A's handler started")
        assert await a.signal(signal.SIGKILL) == -signal.SIGKILL
        redis_server.flushall()

        b_args = worker_args(forum_node, redis_url, "slow_fenced", "--lease", "1")
        b = WorkerProcess("b", tmp_path, b_args, env)
        workers.append(b)
        await b.start()
        await eventually(lambda: _result(fenced, str(job_id)), timeout=20, what="B's result")
        assert await b.signal(signal.SIGTERM) == 0, b.log_text()
        assert await space.count(JOBS) == 0
        assert (await space.status()).reserved == 0


async def _started(redis_url: str, n: int) -> bool:
    return len(await started(redis_url)) >= n


async def _result(store: FencedRedisStore, key: str) -> bool:
    return await store.get(key) is not None


@pytest.mark.slow
async def test_a_job_that_kills_its_worker_every_time_ends_as_a_dead_letter(
    forum_node: NodeProcess, redis_url: str, tmp_path: Path
) -> None:
    """A handler that SIGKILLs its own worker process. Each time, the
    worker's lease runs out on the node, which counts the delivery; a new
    worker process is started. Attempts 1..3 run (3 processes die); the 4th
    delivery is past --max-attempts 3 and is buried as a dead letter without
    running (before, it came back at attempt 1 for ever)."""
    env = {"FORUM_EXAMPLE_REDIS_URL": redis_url}
    args = worker_args(
        forum_node, redis_url, "kill_own_worker", "--lease", "1", "--max-attempts", "3"
    )
    async with ForumClient(forum_node.url) as space, worker_processes(tmp_path) as workers:
        job_id = await space.write(b"job/crash")
        worker = WorkerProcess("w", tmp_path, args, env)
        workers.append(worker)

        async def buried_or_restarted() -> bool:
            if await space.count(Pattern(b"dead/")):
                return True
            if not worker.running:
                await worker.start()  # the supervisor's restart
            return False

        await eventually(buried_or_restarted, timeout=60, what="the dead letter")
        assert await worker.signal(signal.SIGTERM) == 0, worker.log_text()
        assert worker.starts == 4
        rows = [row.split() for row in await started(redis_url)]
        assert [(key, attempt) for key, _, attempt in rows] == [
            (str(job_id), "1"), (str(job_id), "2"), (str(job_id), "3")
        ]  # fmt: skip
        [item] = (await space.list(Pattern(b"dead/"))).tuples
        letter = DeadLetter.parse(item)
        assert letter.payload == b"job/crash" and letter.envelope.key == str(job_id)
        assert (letter.envelope.attempt, letter.envelope.error) == (3, LOST_WORKER)
        assert await space.count(JOBS) == 0
        assert (await space.status()).reserved == 0


class _CountingClient(ForumClient):
    """A real client that notes which ids each ack went out with."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.acked_with_reserve: list[str] = []
        self.acked_alone: list[str] = []

    async def ack_reserve(self, entry_ids, pattern, lease, limit, timeout=None):  # type: ignore[no-untyped-def]
        self.acked_with_reserve += [str(i) for i in entry_ids]
        return await super().ack_reserve(entry_ids, pattern, lease, limit, timeout)

    async def ack_many(self, entry_ids):  # type: ignore[no-untyped-def]
        self.acked_alone += [str(i) for i in entry_ids]
        return await super().ack_many(entry_ids)


async def test_a_worker_on_a_node_acks_with_its_next_reserve_and_loses_nothing(
    forum_node: NodeProcess, lens: Lens
) -> None:
    """Through a real ``forum serve``: completed jobs' acks ride in the
    requests that reserve the next batch (ack_reserve), the rest go on
    their own within the ack delay; every job runs once, is acked once,
    and the node ends with nothing live and nothing reserved."""
    ran: list[bytes] = []

    async def handler(job: Job) -> None:
        ran.append(job.payload)

    async with _CountingClient(forum_node.url) as client:
        ids = await client.write_many([f"job/{i}".encode() for i in range(200)])
        work = Worker(client, lens, JOBS, handler, concurrency=4, **_FAST)  # type: ignore[arg-type]
        async with running(work):
            await eventually(lambda: work.stats().done == 200, what="every job done")
        assert sorted(ran) == sorted(f"job/{i}".encode() for i in range(200))
        acks = client.acked_with_reserve + client.acked_alone
        assert sorted(acks) == sorted(str(i) for i in ids), "each job acked exactly once"
        assert client.acked_with_reserve, "no ack rode with a reserve"
        assert await client.count(JOBS) == 0 and (await client.status()).reserved == 0
    assert work.stats().double_takes == 0
    assert all([await lens.done_token(str(i)) for i in ids])


class _DroppingClient(ForumClient):
    """A real client whose first few reserves ahead lose their stream, as
    when the node is killed mid-request."""

    def __init__(self, url: str, drops: int) -> None:
        super().__init__(url)
        self.drops = drops

    async def ack_reserve(self, entry_ids, pattern, lease, limit, timeout=None):  # type: ignore[no-untyped-def]
        if self.drops:
            self.drops -= 1
            raise NodeUnavailable(self.url, "ack_reserve: the stream closed")
        return await super().ack_reserve(entry_ids, pattern, lease, limit, timeout)


async def test_a_reserve_ahead_that_fails_does_not_stop_the_worker(
    forum_node: NodeProcess, lens: Lens
) -> None:
    """A chaos run killed a worker's node while its reserve ahead was in
    flight: the error went to the worker's task group and the worker
    exited. A failed reserve ahead is now the worker's to absorb: the jobs
    it carried come back after their lease, and every job still runs once."""
    ran: list[bytes] = []

    async def handler(job: Job) -> None:
        ran.append(job.payload)

    async with _DroppingClient(forum_node.url, drops=3) as client:
        await client.write_many([f"job/{i}".encode() for i in range(100)])
        work = Worker(client, lens, JOBS, handler, concurrency=4, **{**_FAST, "lease": 1.0})  # type: ignore[arg-type]
        async with running(work):
            await eventually(lambda: work.stats().done == 100, timeout=30, what="every job done")
        assert client.drops == 0, "no reserve ahead was dropped"
        assert sorted(set(ran)) == sorted(f"job/{i}".encode() for i in range(100))
        assert len(ran) == 100
