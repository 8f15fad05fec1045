"""Retries counted per job across real nodes: 2 and 3 peered ``forum serve``
processes, a ``forum worker --app`` on each, jobs enqueued on the first;
and a job whose worker died counted too.

Each run of a task pushes its attempt number to a Redis list of its job
(the side effect counted). Before the Lens counted attempts, a copy of a
failed job still on another node (its Take not yet there) was claimed as
attempt 1 there, so a task with ``retries=2`` ran 4 to 9 times, and a
30 %-failing one restarted its count::

    t0  node a's worker: attempt 1 fails; the Lens records "next 2, due in
        the backoff"; the retry is written, the failed tuple taken on a
    t1  node b's worker reserves its copy of the failed tuple (the Take is
        on its way) and claims it -> NotDue: parked until the backoff ends
    t2  a copy is claimed -> attempt 2 (its trailer may say 1)
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from pathlib import Path

import pytest
from redis import Redis

from forum.coordinator import Backoff
from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from forum.tasks import App, Context, JobFailed
from tests.coordinator.harness import peered, start_app_worker, worker_processes
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually
from tests.tasks.conftest import AppFactory, working

#: The Redis the tasks push their runs to (set per test).
RUNS_REDIS = "TASKS_RUNS_REDIS"

retry_app = App(prefix=b"retry-test/")


def _ran(ctx: Context) -> None:
    """The side effect counted: this run's attempt, pushed to the job's list."""
    with Redis.from_url(os.environ[RUNS_REDIS]) as client:
        client.rpush(f"runs:{ctx.key}", ctx.attempt)


@retry_app.task(retries=2, backoff=Backoff(base=0.05, cap=0.1, jitter=0.0))
def always_fails(ctx: Context) -> None:
    _ran(ctx)
    raise RuntimeError("always")


@retry_app.task(retries=4, backoff=Backoff(base=0.05, cap=0.2, jitter=0.5))
def flaky(ctx: Context) -> str:
    """Fails 30 % of its attempts (decided by key and attempt, so a run
    of the same attempt decides the same)."""
    _ran(ctx)
    if random.Random(f"{ctx.key}:{ctx.attempt}").random() < 0.3:
        raise RuntimeError("flaky")
    return "ok"


@pytest.mark.slow
@pytest.mark.parametrize("count", [2, 3])
async def test_every_job_is_counted_once_across_nodes(
    count: int, tmp_path: Path, forum_nodes: ForumNodes, redis_url: str
) -> None:
    """Always-failing jobs run exactly retries + 1 times, each attempt once;
    a 30 %-failing job's runs are attempts 1, 2, ... in order, never a
    count started again."""
    nodes = await peered(forum_nodes, "abc"[:count])
    app = retry_app.using(nodes=nodes[0].url, redis=redis_url)
    async with app, worker_processes(tmp_path) as started:
        for node in nodes:
            await start_app_worker(started, tmp_path, node, f"{__name__}:retry_app", redis_url,
                                   {RUNS_REDIS: redis_url})  # fmt: skip
        failing = [await app.enqueue("always_fails", _key=f"fail-{n}") for n in range(40)]
        flaky_ones = [await app.enqueue("flaky", _key=f"flaky-{n}") for n in range(60)]
        for handle in failing:
            with pytest.raises(JobFailed):
                await handle.result(timeout=60)
        for handle in flaky_ones:
            # Five failures in a row make one dead: its runs are counted all the same.
            with contextlib.suppress(JobFailed):
                await handle.result(timeout=60)
        # Nothing left to run on any node: every copy was run, parked out or taken away.
        for node in nodes:
            await eventually(lambda node=node: _idle(node), 30, f"{node.name} has no job left")
        for process in started:
            assert await process.signal(signal.SIGTERM) == 0, process.log_text()
    runs = _runs(redis_url)
    assert {key: runs.get(key) for key in (h.key for h in failing)} == {
        handle.key: [1, 2, 3] for handle in failing
    }
    for handle in flaky_ones:
        made = runs[handle.key]
        assert made == list(range(1, len(made) + 1)), (handle.key, made)


async def _idle(node: NodeProcess) -> bool:
    async with ForumClient(node.url) as client:
        return await client.count(Pattern(retry_app.prefix)) == 0


def _runs(redis_url: str) -> dict[str, list[int]]:
    with Redis.from_url(redis_url) as client:
        keys = [key.decode() for key in client.scan_iter("runs:*")]
        return {key[len("runs:") :]: [int(n) for n in client.lrange(key, 0, -1)] for key in keys}


async def test_a_task_whose_workers_died_past_its_retries_is_dead_without_running(
    make_app: AppFactory,
) -> None:
    """t0: a worker claims job k (retries=0, attempt 1) and dies: its claim
    lapses. t1: a worker claims k: the Lens counts attempt 2 (the lapse was
    attempt 1), past retries + 1: k is dead, its task not run again, though
    the worker's max_attempts (another task's 3 retries + 1) allows more."""
    app = make_app()
    ran: list[int] = []

    @app.task(retries=0)
    async def once(ctx: Context) -> None:
        ran.append(ctx.attempt)

    @app.task(retries=3)
    async def patient(ctx: Context) -> None: ...

    async with app:
        handle = await once.enqueue(_key="k")
        await app.lens.claim("k", owner="died", lease=0.2)
        async with working(app):
            with pytest.raises(JobFailed, match="attempt 2 of 1: the worker was lost"):
                await handle.result(timeout=15)
    assert ran == []
