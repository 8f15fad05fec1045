"""Workers in a cluster of groups: home groups, the directory in Redis,
stealing, the keepers' leases, and the task app routing by key. Real
``forum serve`` groups, a real Redis, real workers."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from redis.asyncio import Redis

from forum import Pattern
from forum.coordinator import Job, Lens, Worker
from forum.coordinator.directory import DirectoryKeeper, RedisDirectory, lease_key
from forum.coordinator.keys import DEFAULT_NAMESPACE, KeySchema
from forum.coordinator.presence import list_workers
from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import ClusterMap, load_map
from forum.node.cluster.slots import slot_of
from forum.tasks import App, JobHandle, JobState
from tests.cluster.conftest import start_groups
from tests.coordinator.harness import WorkerProcess, eventually, running, worker_processes
from tests.coordinator.process_handlers import STARTED
from tests.fixtures.nodes import ForumNodes

pytestmark = pytest.mark.slow

JOBS = Pattern(b"job/")


def homed(cluster: ClusterMap, gid: str, name: str) -> str:
    """A client id whose home group is ``gid``."""
    n = 0
    while ClusterClient(cluster, client_id=f"{name}{n}").home != (gid,):
        n += 1
    return f"{name}{n}"


def owned_by(cluster: ClusterMap, keys: list[str], gid: str) -> list[str]:
    return [k for k in keys if cluster.owner(slot_of(k)).id == gid]


@asynccontextmanager
async def in_process_worker(
    cluster: ClusterMap, redis: Redis, lens: Lens, owner: str, ran: list[str]
) -> AsyncIterator[DirectoryKeeper]:
    """A Worker on a ClusterClient homed by ``owner``, reading the directory,
    and its keeper beside it, for the body; each job's key added to ``ran``."""

    async def handle(job: Job) -> None:
        ran.append(job.key)

    directory = RedisDirectory(redis, DEFAULT_NAMESPACE)
    async with ClusterClient(cluster, client_id=owner, directory=directory) as space:
        worker = Worker(space, lens, JOBS, handle, owner=owner, take_wait=0.2, lease=5)
        keeper = DirectoryKeeper(redis, DEFAULT_NAMESPACE, lambda: space.map, owner)
        async with keeper, running(worker):
            yield keeper


async def test_a_group_no_worker_calls_home_is_published_and_drained_by_stealing(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    cluster, groups = await start_groups(forum_nodes, [1, 1])
    keys = owned_by(cluster, [f"k{n}" for n in range(120)], "g2")[:30]
    async with (
        ForumClient(groups["g2"][0].url) as g2,
        Redis.from_url(redis_url) as redis,
        Lens.from_url(redis_url) as lens,
    ):
        for key in keys:
            await g2.write(f"job/{key}".encode(), key=key)
        assert (await g2.backlogs())[b"job/"].live == len(keys)
        reader = RedisDirectory(redis, DEFAULT_NAMESPACE, cache_for=0)

        # A keeper alone (a worker of another queue, say) publishes g2's backlog.
        async with DirectoryKeeper(redis, DEFAULT_NAMESPACE, lambda: cluster, "other"):
            await eventually(
                lambda: _live_in(reader, b"job/", "g2", len(keys)), what="g2 published"
            )
            whole = await reader.depths(b"")
            assert whole["g2"].live == len(keys) and "g1" in whole

            # A worker at home in g1 finds g2 in the directory and drains it.
            ran: list[str] = []
            async with in_process_worker(cluster, redis, lens, homed(cluster, "g1", "w"), ran):
                await eventually(lambda: len(ran) == len(keys), timeout=30, what="g2 drained")
            assert sorted(ran) == sorted(keys)
            await eventually(lambda: _live_in(reader, b"job/", "g2", 0), what="g2 empty")
        assert await g2.count(JOBS) == 0


async def _live_in(reader: RedisDirectory, queue: bytes, gid: str, live: int) -> bool:
    depth = (await reader.depths(queue)).get(gid)
    return depth is not None and depth.live == live


async def test_two_worker_processes_at_home_in_two_groups_run_every_job_once(
    forum_nodes: ForumNodes, redis_url: str, tmp_path: Path
) -> None:
    """200 keyed jobs in two groups; two ``forum worker`` processes, each at
    home in one group, discovering the map from g1's node: every job runs
    once (done in the Lens, started once). Then one stops: the other keeper
    publishes both groups."""
    cluster, groups = await start_groups(forum_nodes, [1, 1])
    keys = [f"k{n}" for n in range(200)]
    owners = [homed(cluster, "g1", "a"), homed(cluster, "g2", "b")]
    env = {"FORUM_EXAMPLE_REDIS_URL": redis_url}
    async with ClusterClient(cluster) as producer, worker_processes(tmp_path) as workers:
        for key in keys:
            await producer.write(f"job/{key}".encode(), key=key)
        assert producer.misplaced == 0
        for owner in owners:
            args = [
                "--node", groups["g1"][0].url, "--redis-url", redis_url, "--prefix", "job/",
                "--handler", "tests.coordinator.process_handlers:slow_fenced",
                "--take-wait", "0.5", "--owner", owner,
            ]  # fmt: skip
            workers.append(WorkerProcess(owner, tmp_path, args, env))
            await workers[-1].start()
        await eventually(lambda: _count_is(producer, 0), timeout=60, what="every job taken")
        async with Lens.from_url(redis_url) as lens:
            await eventually(lambda: _all_done(lens, keys), what="every job done")
            # Each names its home group's node in its presence (ClusterClient.url).
            present = {p.owner: p.node for p in await list_workers(lens)}
            assert present == {owners[0]: groups["g1"][0].url, owners[1]: groups["g2"][0].url}
        started = [row.split()[0] for row in await _started(redis_url)]
        assert sorted(started) == sorted(keys)  # each job run once
        assert "home group g1" in workers[0].log_text() and "home group g2" in workers[1].log_text()

        schema = KeySchema(DEFAULT_NAMESPACE)
        async with Redis.from_url(redis_url) as redis:
            leases = [lease_key(schema, gid) for gid in groups]
            await eventually(lambda: _held(redis, leases, set(owners)), what="leases held")
            assert await workers[0].signal(signal.SIGTERM) == 0, workers[0].log_text()
            await eventually(lambda: _held(redis, leases, {owners[1]}), what="leases passed")


async def _count_is(space: ClusterClient, n: int) -> bool:
    return await space.count(JOBS) == n


async def _all_done(lens: Lens, keys: list[str]) -> bool:
    return all([await lens.done_token(key) is not None for key in keys])


async def _started(redis_url: str) -> list[str]:
    async with Redis.from_url(redis_url) as client:
        return [row.decode() for row in await client.lrange(STARTED, 0, -1)]


async def _held(redis: Redis, leases: list[str], by: set[str]) -> bool:
    """Every group leased, by keepers in ``by`` only."""
    holders = await redis.mget(leases)
    return all(h is not None for h in holders) and {h.decode() for h in holders} <= by


async def test_an_app_enqueues_to_the_keys_group_and_its_worker_runs_the_jobs(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    cluster, groups = await start_groups(forum_nodes, [1, 1])
    app = App(nodes=[groups["g1"][0].url], redis=redis_url)

    @app.task
    async def double(ctx: object, n: int) -> int:
        return 2 * n

    keys = [f"d{n}" for n in range(20)]
    async with app:
        handles = [await app.enqueue("double", n, _key=key) for n, key in enumerate(keys)]
        for gid, nodes in groups.items():
            async with ForumClient(nodes[0].url) as member:
                assert await member.count(Pattern(app.prefix)) == len(owned_by(cluster, keys, gid))
        assert app.space.misplaced == 0
        stop = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(app.run_worker(stop=stop, take_wait=0.2))
            try:
                results = [await h.result(timeout=30) for h in handles]
            finally:
                stop.set()
        assert results == [2 * n for n in range(len(keys))]


async def test_an_apps_dead_jobs_are_listed_retried_and_purged_across_groups(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    cluster, groups = await start_groups(forum_nodes, [1, 1])
    app = App(nodes=[groups["g2"][0].url], redis=redis_url)
    candidates = [f"f{n}" for n in range(40)]
    failing = set(owned_by(cluster, candidates, "g1")[:2] + owned_by(cluster, candidates, "g2")[:2])

    @app.task(retries=0)
    async def flaky(ctx: object, key: str) -> str:
        if key in failing:
            raise RuntimeError(f"{key} is told to fail")
        return f"{key} ok"

    keys = sorted(failing)
    stop = asyncio.Event()
    async with app, asyncio.TaskGroup() as tasks:
        tasks.create_task(app.run_worker(stop=stop, take_wait=0.2))
        try:
            handles = [await app.enqueue("flaky", k, _key=k) for k in keys]
            for handle in handles:
                await eventually(lambda h=handle: _state_is(h, JobState.DEAD), timeout=30)
            assert sorted([s.key async for s in app.jobs(JobState.DEAD)]) == keys
            failing.discard(keys[0])
            await app.retry(keys[0])
            assert await handles[0].result(timeout=30) == f"{keys[0]} ok"
            assert await app.purge() == len(keys) - 1
            assert [s.key async for s in app.jobs(JobState.DEAD)] == []
        finally:
            stop.set()


async def _state_is(handle: JobHandle, state: JobState) -> bool:
    return (await handle.status()).state is state


async def test_an_app_on_a_node_without_a_map_takes_one_when_the_node_gets_it(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    """t0: the app enqueues through a node that serves no map (its nodes, as
    before). t1: the node restarts in group g1 of a map with g2. t2: an
    answer names the map's epoch; from the next call on, keys go by slot."""
    a = await forum_nodes.start("a")
    b = forum_nodes.make("b")
    app = App(nodes=[a.url], redis=redis_url)

    @app.task
    async def noop(ctx: object) -> None:
        return None

    async with app:
        await app.enqueue("noop", _key="before")
        path = forum_nodes.root / "map.toml"
        path.write_text(
            f'epoch = 1\n[[groups]]\nid = "g1"\nmembers = ["{a.url}"]\n'
            f'[[groups]]\nid = "g2"\nmembers = ["{b.url}"]\n'
        )
        await a.stop()
        for node in (a, b):
            node.args += ["--cluster-map", str(path)]
        await forum_nodes.start_all()
        cluster = load_map(path)
        keys = owned_by(cluster, [f"k{n}" for n in range(5000)], "g2")
        async with ForumClient(b.url) as g2:

            async def enqueued_in_g2() -> bool:
                await app.enqueue("noop", _key=keys.pop())
                return await g2.count(Pattern(app.prefix)) > 0

            # Within one look of the map (MAP_REFRESH): a key of g2's goes there.
            await eventually(enqueued_in_g2, timeout=30, what="a key of g2's in g2")
        assert app.space.map.epoch == 1
