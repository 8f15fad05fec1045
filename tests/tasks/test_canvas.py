"""Chains and groups (forum.tasks.canvas) on real nodes, Redis and workers.

Each task counts its effect in Redis (an ``INCR`` of its job's counter, its
last act), so a step that ran twice shows 2. The chain across two nodes
has its middle step's first attempt killed with its worker (SIGKILL, before
its effect): the other worker runs it again once its claim lapses, and
every step's effect lands once.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from redis import Redis

from forum.tasks import App, Context, InvalidJob, JobFailed, JobState, chain, group
from tests.coordinator.harness import peered, start_app_worker, worker_processes
from tests.fixtures.nodes import ForumNodes, eventually
from tests.tasks.conftest import AppFactory, working

#: The Redis the tasks count their effects in (set per test).
EFFECTS_REDIS = "CANVAS_EFFECTS_REDIS"

canvas_app = App(prefix=b"canvas-test/")


def _redis() -> Redis:
    return Redis.from_url(os.environ[EFFECTS_REDIS])


def _effect(ctx: Context) -> None:
    with _redis() as client:
        client.incr(f"effect:{ctx.key}")


@canvas_app.task
def add(ctx: Context, x: int, y: int) -> int:
    _effect(ctx)
    return x + y


@canvas_app.task
def slow_double(ctx: Context, x: int) -> int:
    """Its first attempt says where it runs, then waits to be killed."""
    if ctx.attempt == 1:
        with _redis() as client:
            client.rpush("started", os.environ["CANVAS_WORKER"])
        time.sleep(30)
    _effect(ctx)
    return 2 * x


@canvas_app.task
def square(ctx: Context, x: int) -> int:
    _effect(ctx)
    return x * x


@canvas_app.task
def total(ctx: Context, results: list[int], offset: int) -> int:
    _effect(ctx)
    return sum(results) + offset


@canvas_app.task(retries=0)
def broken(ctx: Context, x: int) -> int:
    raise RuntimeError("broken")


def _effects(redis_url: str) -> dict[str, int]:
    with Redis.from_url(redis_url) as client:
        keys = [key.decode() for key in client.scan_iter("effect:*")]
        return {key[len("effect:") :]: int(client.get(key) or 0) for key in keys}


@pytest.mark.slow
async def test_a_chain_of_3_across_2_nodes_runs_each_step_once_though_a_worker_dies(
    tmp_path: Path, forum_nodes: ForumNodes, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = await peered(forum_nodes, "ab")
    app = canvas_app.using(nodes=nodes[0].url, redis=redis_url)
    monkeypatch.setenv(EFFECTS_REDIS, redis_url)
    async with app, worker_processes(tmp_path) as started:
        for node in nodes:
            env = {EFFECTS_REDIS: redis_url, "CANVAS_WORKER": node.name}
            await start_app_worker(started, tmp_path, node, f"{__name__}:canvas_app", redis_url,
                                   env, lease=2)  # fmt: skip
        flow = await chain(add.s(1, 2), slow_double.s(), add.s(10), key="c1").enqueue(app)
        with Redis.from_url(redis_url) as client:
            await eventually(lambda: client.llen("started") > 0, 30, "the middle step started")
            where = client.lindex("started", 0)
        assert where is not None
        victim = next(p for p in started if p.name == f"w-{where.decode()}")
        await victim.signal(signal.SIGKILL)  # mid-chain: step 1 running, its effect not made
        assert await flow.result(timeout=60) == (1 + 2) * 2 + 10
        status = await flow.status()
    assert status.state is JobState.DONE
    assert [job.key for job in status.jobs if job is not None] == ["c1/0", "c1/1", "c1/2"]
    assert _effects(redis_url) == {"c1/0": 1, "c1/1": 1, "c1/2": 1}


@pytest.fixture
def app(make_app: AppFactory, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> App:
    """The canvas app against the test's node and Redis, its effects counted there."""
    monkeypatch.setenv(EFFECTS_REDIS, redis_url)
    return canvas_app.using(nodes=make_app().nodes, redis=redis_url)


async def test_a_group_of_5_runs_then_once_with_every_result(app: App, redis_url: str) -> None:
    async with app:
        flow = await group([square.s(n) for n in range(5)], then=total.s(100)).enqueue(app)
        # Enqueued again: the same content, the same key, nothing more runs.
        again = await group([square.s(n) for n in range(5)], then=total.s(100)).enqueue(app)
        assert again.key == flow.key
        async with working(app, count=3, concurrency=4):
            assert await flow.result(timeout=30) == 0 + 1 + 4 + 9 + 16 + 100
    effects = _effects(redis_url)
    assert effects == {**{f"{flow.key}/{n}": 1 for n in range(5)}, f"{flow.key}/then": 1}


async def test_a_dead_step_stops_its_chain_and_says_so(app: App, redis_url: str) -> None:
    async with app:
        with pytest.raises(InvalidJob, match="at most 500 bytes"):  # K/then would be too long
            await chain(add.s(1, 1), key="k" * 496).enqueue(app)
        bad = add.s(1, 1).__class__("nope")
        with pytest.raises(InvalidJob, match="chain step 2: no task named 'nope'"):
            await chain(add.s(1, 1), add.s(2), bad).enqueue(app)
        with pytest.raises(InvalidJob, match="group step 1: args cannot be encoded"):
            await group([add.s(1, 1), add.s(object(), 1)]).enqueue(app)
        with pytest.raises(InvalidJob, match="group's then step 0: args cannot be encoded"):
            await group([add.s(1, 1)], then=total.s(object())).enqueue(app)
        flow = await chain(add.s(1, 1), broken.s(), add.s(5)).enqueue(app)
        async with working(app):
            with pytest.raises(JobFailed, match="broken"):
                await flow.result(timeout=30)
        status = await flow.status()
    assert status.state is JobState.DEAD
    assert status.jobs[2] is None  # never enqueued
    assert set(_effects(redis_url)) == {f"{flow.key}/0"}


def test_workflows_refuse_what_is_not_a_call() -> None:
    with pytest.raises(InvalidJob, match="at least one"):
        chain()
    with pytest.raises(InvalidJob, match=r"chain step 1: a call is task\.s"):
        chain(add.s(1, 2), add)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match="no _key"):
        group([add.s(1, 2, _key="mine")])
