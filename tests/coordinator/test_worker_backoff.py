"""Workers back off while the Lens cannot take their claims, and resume by
themselves: a full Redis under a real ``forum worker`` and ``forum serve``,
and a Redis Cluster with a master down under a real worker.

What is asserted is counted over a window of the outage: the requests the
node answered (its status's ``streams_requests``), the worker's warnings and
the jobs it put back; never how long anything took. Before the back-off, a
worker re-reserved and released its jobs in a loop (some 9,000 requests and
500 warnings a second on a full Redis; ~140 loops a second on a cluster).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import redis

from forum.coordinator import Job, Lens, Worker
from forum.deploy.demo import SINK_URL_ENV, WORK_MS_ENV
from forum.deploy.sink import EffectSink
from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.coordinator.full_redis import fill, make_room
from tests.coordinator.harness import WorkerProcess, eventually, running, worker_processes
from tests.fixtures.nodes import NodeProcess
from tests.fixtures.redis_server import RedisClusterServers, RedisServer

pytestmark = pytest.mark.slow

JOBS = Pattern(b"job/")
#: The measuring window: long enough for today's loop to show thousands.
WINDOW = 3.0
#: The most node requests a backing-off worker may make in the window
#: (its checks go to Redis, not to the node).
MOST_REQUESTS = 10


async def _requests(space: ForumClient) -> int:
    """Requests the node answered on its streams (the worker's reserves and
    releases go there); read over plain HTTP, so it is not one of them."""
    return (await space.status()).streams_requests


async def _metrics(port: int) -> str:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as response,
        ):
            return await response.text()
    except aiohttp.ClientError:
        return ""


async def _put_back(port: int) -> bool:
    """Whether the worker put jobs back for want of the Lens (its metrics)."""
    for line in (await _metrics(port)).splitlines():
        if line.startswith('forum_worker_jobs_total{outcome="lens_unavailable"}'):
            return float(line.split()[-1]) > 0
    return False


def _warnings(log: str) -> int:
    return sum(" WARNING " in line for line in log.splitlines())


async def test_a_full_redis_makes_a_worker_process_back_off_then_resume(
    forum_node: NodeProcess,
    private_redis: RedisServer,
    redis_url: str,
    tmp_path: Path,
) -> None:
    """t0: the worker runs 20 jobs. t1: the Lens's Redis is full (maxmemory,
    noeviction); 40 more jobs are written. t2: the worker's first claim is
    refused: one warning, the batch released, then only checks of Redis.
    t2..t2+WINDOW: next to no node requests, no more warnings; all 40 jobs
    live on the node. t3: maxmemory is raised: every job runs, each effect
    once, and the worker says the Lens is available again."""
    # The demo's handler, its fenced effects in another Redis than the full one.
    env = {SINK_URL_ENV: redis_url, WORK_MS_ENV: "1"}
    args = [
        "--node", forum_node.url, "--redis-url", private_redis.url, "--prefix", "job/",
        "--handler", "forum.deploy.demo:open_handler", "--take-wait", "0.5", "--concurrency", "8",
    ]  # fmt: skip
    async with (
        ForumClient(forum_node.url) as space,
        EffectSink.from_url(redis_url) as sink,
        worker_processes(tmp_path) as workers,
    ):
        worker = WorkerProcess("w", tmp_path, args, env)
        workers.append(worker)
        await worker.start()
        await space.write_many([f"job/a{i}".encode() for i in range(20)])
        await eventually(lambda: _count_applied(sink, 20), timeout=30, what="the first jobs")

        fill(private_redis.port)
        await space.write_many([f"job/b{i}".encode() for i in range(40)])
        await eventually(
            lambda: _put_back(worker.port), timeout=30, what="the worker to meet the full Redis"
        )
        requests, lines = await _requests(space), _warnings(worker.log_path.read_text())
        await asyncio.sleep(WINDOW)  # the window the counts are taken over
        requests = await _requests(space) - requests
        lines = _warnings(worker.log_path.read_text()) - lines
        assert requests <= MOST_REQUESTS, (requests, worker.log_text())
        assert lines == 0, worker.log_text()
        assert "the Lens is unavailable (full)" in worker.log_path.read_text()
        metrics = await _metrics(worker.port)
        assert "forum_lens_available 0.0" in metrics, metrics
        assert 'forum_lens_unavailable{reason="full"} 1.0' in metrics, metrics
        assert await space.count(JOBS) == 40  # every job released, none lost

        make_room(private_redis.port)
        await eventually(lambda: _count_applied(sink, 60), timeout=30, what="every job")
        assert set((await sink.effects()).values()) == {1}  # each effect once
        await eventually(lambda: _count_is(space, 0), what="every job acked")
        assert "the Lens is available again" in worker.log_path.read_text()
        metrics = await _metrics(worker.port)
        assert "forum_lens_available 1.0" in metrics, metrics
        assert await worker.signal(15) == 0, worker.log_text()


async def _count_applied(sink: EffectSink, n: int) -> bool:
    return len(await sink.effects()) >= n


async def _count_is(space: ForumClient, n: int) -> bool:
    return await space.count(JOBS) == n


def _short_failover(cluster: RedisClusterServers) -> None:
    """A replica takes over from a dead master after about a second, not the
    default fifteen: the outage the test counts over is the failover's."""
    for server in cluster.servers:
        server.extra = (*server.extra, "--cluster-node-timeout", "1000")


@pytest.fixture
def failover_cluster(tmp_path: Path) -> Iterator[RedisClusterServers]:
    cluster = RedisClusterServers(tmp_path / "cluster", replicas=1)
    _short_failover(cluster)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill()


async def test_a_cluster_master_down_makes_the_worker_back_off_until_failover(
    forum_node: NodeProcess,
    failover_cluster: RedisClusterServers,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """t0: jobs run on a three-master cluster. t1: one master is killed; its
    replica takes over a second or so later. t1..: any live master answers
    PING, so a check by PING would let the worker loop; the check asks the
    shard that failed, so the worker backs off: few jobs put back, few
    warnings. t2: after the failover every job runs, each once."""
    cluster = failover_cluster
    effects: collections.Counter[bytes] = collections.Counter()

    async def handler(job: Job) -> None:
        await job.verify()
        effects[job.payload] += 1

    async with (
        ForumClient(forum_node.url) as space,
        Lens.from_url(cluster.url, timeout=0.5, connect_timeout=0.5) as lens,
    ):
        worker = Worker(space, lens, JOBS, handler, concurrency=8, lease=5, take_wait=0.2, seed=1)
        with caplog.at_level(logging.WARNING, logger="coordinator"):
            async with running(worker):
                await space.write_many([f"job/a{i}".encode() for i in range(40)])
                await eventually(lambda: len(effects) == 40, timeout=30, what="the first jobs")
                victim = cluster.masters[0]
                victim.kill()
                await space.write_many([f"job/b{i}".encode() for i in range(40)])
                await eventually(
                    lambda: not worker.stats().lens_reachable, timeout=30, what="the outage"
                )
                put_back = worker.stats().lens_unavailable
                await eventually(lambda: len(effects) == 80, timeout=60, what="every job")
                put_back = worker.stats().lens_unavailable - put_back
        assert set(effects.values()) == {1}
        # One batch put back, and a few more if a check passed before the
        # claims could be granted; a loop put back thousands.
        assert put_back <= 3 * 2 * worker.concurrency, put_back
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) <= 10, [r.getMessage() for r in warnings]
        assert await space.count(JOBS) == 0


async def test_a_redis_refusing_writes_for_want_of_replicas_makes_a_worker_back_off(
    forum_node: NodeProcess, private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The same with another refusal PING does not see: ``min-replicas-to-write
    1`` and no replica, so every write is refused (``NOREPLICAS``). t0: jobs
    run. t1: Redis refuses writes; 40 jobs are written. t1..t1+WINDOW: the
    worker put back one batch at most, and made next to no node requests.
    t2: the setting is undone: every job runs, each once."""
    effects: collections.Counter[bytes] = collections.Counter()

    async def handler(job: Job) -> None:
        await job.verify()
        effects[job.payload] += 1

    async with ForumClient(forum_node.url) as space, Lens.from_url(private_redis.url) as lens:
        worker = Worker(space, lens, JOBS, handler, concurrency=8, lease=5, take_wait=0.2, seed=2)
        with (
            caplog.at_level(logging.WARNING, logger="coordinator"),
            redis.Redis(port=private_redis.port) as control,
        ):
            async with running(worker):
                await space.write_many([f"job/a{i}".encode() for i in range(20)])
                await eventually(lambda: len(effects) == 20, timeout=30, what="the first jobs")
                control.config_set("min-replicas-to-write", 1)
                await space.write_many([f"job/b{i}".encode() for i in range(40)])
                await eventually(
                    lambda: worker.stats().lens_unavailable > 0,
                    timeout=30,
                    what="the worker to meet the refusal",
                )
                requests, put_back = await _requests(space), worker.stats().lens_unavailable
                await asyncio.sleep(WINDOW)  # the window the counts are taken over
                requests = await _requests(space) - requests
                put_back = worker.stats().lens_unavailable - put_back
                assert requests <= MOST_REQUESTS, requests
                assert put_back == 0, put_back
                assert worker.stats().lens_unavailable_reason == "replicas behind"
                assert await space.count(JOBS) == 40
                control.config_set("min-replicas-to-write", 0)
                await eventually(lambda: len(effects) == 60, timeout=30, what="every job")
        assert set(effects.values()) == {1}
        refusals = [r for r in caplog.records if "unavailable (replicas behind)" in r.getMessage()]
        assert len(refusals) == 1
