"""Cancelling a running job: its fencing token is retired in Redis, its
worker hears of it within its watch (forum.coordinator.keeping) and stops
the handler, the job ends ``cancelled`` and its reservation is acked.
A real node, a real redis-server and workers of the app in this process.

The workers' lease is a minute, so their heartbeat (a third of a lease)
would find a lost claim only after 20 s: each job here stops well before
that, so it was the cancel's watch that stopped it::

    t0  the task runs under token T1 (its worker's watch asks every 0.5 s)
    t1  handle.cancel(): T1 retired, a done marker with T2 > T1
    t2  the watch finds it: the handler is cancelled (an async task at its
        await, a sync one's thread at its next ctx call, a process task's
        process killed), the reservation acked; the job is `cancelled`
    t3  the old holder's verify() / record: ClaimLost
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from forum.coordinator import Claim, ClaimLost, Lens
from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from forum.tasks import App, Context, JobCancelled, JobState
from forum.tasks.handle import JobHandle
from tests.fixtures.nodes import NodeProcess, eventually
from tests.tasks.conftest import AppFactory, process_alive, working

#: Well under the heartbeat's 20 s: a stop by then was the cancel's doing.
STOPPED_WITHIN = 10.0

cancel_app = App(prefix=b"cancel-test/")


@cancel_app.task(executor="process")
def spin_in_process(ctx: Any, pid_file: str) -> None:
    """Say its process, then spin without a ctx call: only a kill stops it."""
    Path(pid_file).write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)


async def _running(handle: JobHandle) -> bool:
    return (await handle.status()).state is JobState.RUNNING


async def _settled(node: NodeProcess, app: App, key: str) -> None:
    """The job's tuple was acked (not left to its reservation's minute)."""
    async with ForumClient(node.url) as space:
        pattern = Pattern(app.prefix + key.encode() + b"\n")

        async def gone() -> bool:
            return await space.count(pattern) == 0

        await eventually(gone, STOPPED_WITHIN, "the cancelled job's tuple acked")


async def _cancelled(handle: JobHandle, owner: str) -> None:
    outcome = await handle.cancel()
    assert (outcome.state, outcome.owner) == ("cancelled", owner)
    with pytest.raises(JobCancelled):
        await handle.result(timeout=STOPPED_WITHIN)
    assert (await handle.status()).state is JobState.CANCELLED


async def test_an_async_task_stops_at_its_next_await(
    forum_node: NodeProcess, make_app: AppFactory
) -> None:
    app = make_app()
    seen: dict[str, Context] = {}
    stopped = asyncio.Event()

    @app.task
    async def wait_forever(ctx: Context) -> None:
        seen["ctx"] = ctx
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    async with app, working(app, lease=60.0) as (worker,):
        handle = await app.enqueue("wait_forever", _key="async-1")
        await eventually(lambda: _running(handle), 30, "the task running")
        await _cancelled(handle, worker.owner)
        await asyncio.wait_for(stopped.wait(), STOPPED_WITHIN)
        await _settled(forum_node, app, "async-1")
        with pytest.raises(ClaimLost, match="cancelled"):
            await seen["ctx"].verify()  # the late holder is refused
        # And by Redis itself: the retired token holds nothing, writes nothing.
        lens = app.lens
        assert isinstance(lens, Lens)
        late = Claim(lens, key="async-1", owner=worker.owner, token=seen["ctx"].token,
                     lease=60, deadline=lens.clock() + 60)  # fmt: skip
        with pytest.raises(ClaimLost):
            await lens.record(late, {"state": "done"}, ttl=60)
        assert (await handle.status()).state is JobState.CANCELLED


async def test_a_sync_task_stops_at_its_next_ctx_call(
    forum_node: NodeProcess, make_app: AppFactory
) -> None:
    app = make_app()
    raised: list[BaseException] = []

    @app.task
    def count_forever(ctx: Context) -> None:
        step = 0
        try:
            while True:
                ctx.progress({"step": step})
                step += 1
                time.sleep(0.05)
        except BaseException as exc:
            raised.append(exc)
            raise

    async with app, working(app, lease=60.0) as (worker,):
        handle = await app.enqueue("count_forever", _key="sync-1")
        await eventually(lambda: _running(handle), 30, "the task running")
        await _cancelled(handle, worker.owner)
        await eventually(lambda: raised, STOPPED_WITHIN, "the thread stopped")
        assert isinstance(raised[0], JobCancelled)
        await _settled(forum_node, app, "sync-1")
        assert worker.stats().claims_lost == 0  # stopped as cancelled, not as lost


async def test_a_process_task_is_killed(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    app = cancel_app.using(nodes=forum_node.url, redis=redis_url)
    pid_file = tmp_path / "pid"
    async with app, working(app, lease=60.0) as (worker,):
        handle = await app.enqueue("spin_in_process", str(pid_file), _key="process-1")
        await eventually(pid_file.exists, 60, "the task running in its process")
        await eventually(lambda: _running(handle), 30, "the job running")
        pid = int(pid_file.read_text())
        await _cancelled(handle, worker.owner)
        await eventually(lambda: not process_alive(pid), STOPPED_WITHIN, "its process killed")
        await _settled(forum_node, app, "process-1")
