"""The worker on issue 14's tuples: delayed jobs, keyed jobs, paused prefixes
(in-process Forums, a real Redis; effects checked through the fenced store)."""

from __future__ import annotations

import time

from examples.handlers.fenced_redis import FencedRedisStore, fenced_handler
from forum.coordinator import Lens, Worker
from forum.node.core.entries import Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.coordinator.conftest import ForumFactory
from tests.coordinator.harness import eventually, running
from tests.coordinator.test_worker import FAST, assert_each_applied_once

JOBS = Pattern(b"job/")


async def test_a_delayed_job_runs_once_after_it_is_due_however_short_the_lease(
    forum: Forum, lens: Lens, fenced: FencedRedisStore
) -> None:
    """celery#2599: an ETA task longer than the visibility timeout is handed
    out again and again before it is due. Here the lease starts at the
    claim: a job due in 1.5 s under 0.3 s leases runs once, when due."""
    written = time.time()
    wid = await forum.write(b"job/1", delay=1.5)
    started: list[float] = []
    handler = fenced_handler(fenced)

    async def timed(job):  # type: ignore[no-untyped-def]
        started.append(time.time())
        await handler(job)

    one = Worker(forum, lens, JOBS, timed, **{**FAST, "lease": 0.3, "concurrency": 2})
    two = Worker(forum, lens, JOBS, timed, **{**FAST, "lease": 0.3, "concurrency": 2})
    async with running(one, two):
        await eventually(lambda: one.stats().done + two.stats().done == 1, what="done")
    await assert_each_applied_once(fenced, {str(wid)})
    assert len(started) == 1 and started[0] >= written + 1.5
    assert one.stats().double_takes + two.stats().double_takes == 0


async def test_two_writes_with_one_key_run_the_job_once(
    make_forum: ForumFactory, lens: Lens, fenced: FencedRedisStore
) -> None:
    """A partition: each side accepts a write with key k (dedup is per node),
    so both tuples exist once they meet; the claim key is k, so the effect
    happens once and the second copy is acked away as a double take."""
    node_a, node_b = await make_forum("a"), await make_forum("b")
    on_a = await node_a.write(b"job/charge", key="order-7", dedup_window=60)
    on_b = await node_b.write(b"job/charge", key="order-7", dedup_window=60)
    assert on_a != on_b
    # They heal: each gets the other's write.
    for node, other in ((node_a, node_b), (node_b, node_a)):
        written = await other.strand.read_range(other.strand.origin, 0, 10)
        await node.apply([entry for entry in written if isinstance(entry, Write)])
    workers = [
        Worker(node, lens, JOBS, fenced_handler(fenced), **{**FAST, "lease": 2.0})
        for node in (node_a, node_b)
    ]

    def settled() -> bool:
        return all(not n.stats().live and not n.stats().reserved for n in (node_a, node_b))

    async with running(*workers):
        await eventually(settled, what="every copy taken on both nodes")
    applied = await fenced.applied()
    assert [key for key, _ in applied] == ["order-7"]
    assert sum(w.stats().done for w in workers) == 1
    assert sum(w.stats().double_takes for w in workers) >= 3
