"""Worker presence records (forum.coordinator.presence) on a real Redis: a running
worker is listed with its slots, running keys and counters, the heads of
the jobs it runs and of the retries it holds parked, and is gone after a
clean stop."""

from __future__ import annotations

import asyncio
import dataclasses

from forum.coordinator import Backoff, Job, Lens, Worker
from forum.coordinator.memory import MemoryAuthority
from forum.coordinator.presence import HEAD, WorkerPresence, list_workers
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.coordinator.harness import eventually, running


async def test_a_running_worker_is_listed_with_its_jobs_and_counts(
    forum: Forum, lens: Lens
) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        if job.payload == b"job/hold":
            started.set()
            await release.wait()
        if job.payload.startswith(b"job/flaky"):
            raise RuntimeError("fails: retried after a minute")

    await forum.write(b"job/quick")
    one = Worker(forum, lens, Pattern(b"job/"), handler, concurrency=3, lease=0.6,
                 owner="w-one", take_wait=0.2, backoff=Backoff(60.0, 60.0, 0.0))  # fmt: skip
    async with running(one):
        await eventually(lambda: one.stats().done == 1, what="the quick job done")
        hold = await forum.write(b"job/hold")
        await forum.write(b"job/flaky/" + b"x" * 100)
        await started.wait()

        async def listed() -> WorkerPresence | None:
            found = {w.owner: w for w in await list_workers(lens)}
            shown = found.get("w-one")
            return shown if shown is not None and shown.running == 1 and shown.retrying else None

        shown = await _until(listed)
        assert (shown.slots, shown.keys, shown.done, shown.lease) == (3, (str(hold),), 1, 0.6)
        # What it runs and what waits out its backoff, by their payloads'
        # first bytes (the retry is reserved again and parked, not run).
        assert shown.heads == (b"job/hold",)
        assert shown.retrying == ((b"job/flaky/" + b"x" * 100)[:HEAD],)
        assert one.stats().deferred >= 1
        assert shown.lens_reachable and shown.alive(shown.last_beat + 0.39)  # beats each 0.2 s
        assert not shown.alive(shown.last_beat + 0.41)  # dead: no beat for over two intervals
        release.set()
    assert [w.owner for w in await list_workers(lens)] == []  # a clean stop deletes it


async def test_a_worker_of_another_authority_writes_nothing(
    forum: Forum, lens: Lens, authority: MemoryAuthority
) -> None:
    async def handler(job: Job) -> None:
        return None

    await forum.write(b"job/x")
    one = Worker(forum, authority, Pattern(b"job/"), handler, lease=0.6, take_wait=0.2)
    async with running(one):
        await eventually(lambda: one.stats().done == 1, what="done")
        assert await list_workers(lens) == []


async def _until(probe, deadline: float = 10.0):  # type: ignore[no-untyped-def]
    async with asyncio.timeout(deadline):
        while (found := await probe()) is None:
            await asyncio.sleep(0.05)  # a poll with a deadline
        return found


def test_a_torn_or_foreign_record_is_skipped_not_an_error() -> None:
    good = WorkerPresence("w", 2, 0, (), 1.0, 2.0, 3.0, "http://n", True, done=4,
                          heads=(b"job/\xff\n1", b"x"), retrying=(b"r/1",))  # fmt: skip
    fields = {k.encode(): v.encode() for k, v in good.fields().items()}
    assert WorkerPresence.parse(fields) == good
    assert WorkerPresence.parse({**fields, b"slots": b"many"}) is None
    assert WorkerPresence.parse({b"owner": b"w"}) is None
    assert WorkerPresence.parse({**fields, b"heads": b"not base64!"}) is None
    # A record from before the heads were kept has none.
    older = {k: v for k, v in fields.items() if k not in (b"heads", b"retrying")}
    assert WorkerPresence.parse(older) == dataclasses.replace(good, heads=(), retrying=())
