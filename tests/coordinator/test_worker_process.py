"""``forum worker`` and ``forum jobs --raw`` as real processes against a real node and Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from examples.handlers.fenced_redis import FencedRedisStore
from forum.coordinator import Lens
from forum.coordinator.deadletter import bury
from forum.coordinator.envelope import Envelope
from forum.node.client.remote import ForumClient
from forum.node.core.entries import Tuple
from forum.node.core.space import Pattern
from tests.coordinator.harness import REPO, WorkerProcess, eventually, worker_processes
from tests.coordinator.process_handlers import STARTED
from tests.fixtures.nodes import NodeProcess, free_port
from tests.fixtures.redis_server import RedisServer

pytestmark = pytest.mark.slow

JOBS = Pattern(b"job/")


def worker_args(node: NodeProcess, redis_url: str, handler: str, *more: str) -> list[str]:
    return [
        "--node", node.url, "--redis-url", redis_url, "--prefix", "job/",
        "--handler", f"tests.coordinator.process_handlers:{handler}",
        "--take-wait", "0.5", *more,
    ]  # fmt: skip


async def started(redis_url: str) -> list[str]:
    async with Redis.from_url(redis_url) as client:
        rows = await client.lrange(STARTED, 0, -1)
    return [row.decode() for row in rows]


async def test_sigkilled_worker_job_completes_elsewhere_exactly_once(
    forum_node: NodeProcess, redis_url: str, fenced: FencedRedisStore, tmp_path: Path
) -> None:
    """t0: worker A claims job k (lease 1 s) and hangs. t1: A is SIGKILLed.
    t2: A's reservation runs out on the node: k is live again. t3: B runs k, once."""
    env = {"FORUM_EXAMPLE_REDIS_URL": redis_url}
    async with ForumClient(forum_node.url) as space, worker_processes(tmp_path) as workers:
        job_id = await space.write(b"job/resize cat.jpg")
        args = worker_args(forum_node, redis_url, "hang_after_start", "--lease", "1")
        a = WorkerProcess("a", tmp_path, args, env)
        workers.append(a)
        await a.start()
        await eventually(lambda: _started_count(redis_url, 1), what="A's handler started")
        assert await a.signal(signal.SIGKILL) == -signal.SIGKILL

        b = WorkerProcess("b", tmp_path, worker_args(forum_node, redis_url, "slow_fenced"), env)
        workers.append(b)
        await b.start()
        await eventually(lambda: _has_result(fenced, str(job_id)), timeout=20, what="B's result")
        assert await b.signal(signal.SIGTERM) == 0, b.log_text()

        result = await fenced.get(str(job_id))
        assert result is not None
        assert await fenced.applied() == [(str(job_id), result[0])]
        [a_start, b_start] = await started(redis_url)
        a_token, b_token = int(a_start.split()[1]), int(b_start.split()[1])
        assert a_start.split()[0] == b_start.split()[0] == str(job_id)
        assert b_token > a_token
        async with Lens.from_url(redis_url) as lens:
            assert await lens.done_token(str(job_id)) == b_token
        assert await space.count(JOBS) == 0


async def _started_count(redis_url: str, n: int) -> bool:
    return len(await started(redis_url)) >= n


async def _has_result(store: FencedRedisStore, key: str) -> bool:
    return await store.get(key) is not None


async def test_sigterm_drains_and_metrics_count(
    forum_node: NodeProcess, redis_url: str, fenced: FencedRedisStore, tmp_path: Path
) -> None:
    env = {"FORUM_EXAMPLE_REDIS_URL": redis_url, "FORUM_TEST_DELAY": "0.3"}
    port = free_port()
    async with ForumClient(forum_node.url) as space, worker_processes(tmp_path) as workers:
        ids = await space.write_many([f"job/{i}".encode() for i in range(20)])
        args = worker_args(
            forum_node, redis_url, "slow_fenced", "--concurrency", "4", "--metrics-port", str(port)
        )
        w = WorkerProcess("w", tmp_path, args, env)
        workers.append(w)
        await w.start()
        await eventually(lambda: _started_count(redis_url, 6), what="some handlers started")
        assert await w.signal(signal.SIGTERM) == 0, w.log_text()
        # Every job a handler started was finished by the drain; the rest stayed put.
        begun = {row.split()[0] for row in await started(redis_url)}
        applied = {key for key, _ in await fenced.applied()}
        assert begun == applied
        assert await space.count(JOBS) == 20 - len(applied)
        assert applied <= {str(i) for i in ids}

        # The metrics port serves the counters while the worker runs.
        args = worker_args(forum_node, redis_url, "slow_fenced", "--metrics-port", str(port))
        again = WorkerProcess("again", tmp_path, args, env)
        workers.append(again)
        await again.start()
        url = f"http://127.0.0.1:{port}/metrics"
        done = 'forum_worker_jobs_total{outcome="done"}'
        await eventually(lambda: _metric_at_least(url, done, 1), timeout=20, what="done metric")
        assert await again.signal(signal.SIGTERM) == 0


async def _metric_at_least(url: str, name: str, value: float) -> bool:
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            text = await response.text()
    except aiohttp.ClientError:
        return False
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1]) >= value
    return False


async def test_failing_jobs_are_dead_lettered_then_listed_and_requeued(
    forum_node: NodeProcess, redis_url: str, tmp_path: Path
) -> None:
    async with ForumClient(forum_node.url) as space, worker_processes(tmp_path) as workers:
        job_id = await space.write(b"job/poison")
        args = worker_args(
            forum_node, redis_url, "fail", "--max-attempts", "2", "--backoff", "0.05"
        )
        w = WorkerProcess("w", tmp_path, args, {})
        workers.append(w)
        await w.start()
        await eventually(lambda: _count(space, Pattern(b"dead/"), 1), timeout=20, what="dead")
        assert await w.signal(signal.SIGTERM) == 0

        # `forum jobs --raw` (once `forum dead`): every letter, a raw worker's too.
        code, out, _ = await forum_cli("jobs", "list", "--raw", "--json", "--node", forum_node.url)
        assert code == 0 and f'"key": "{job_id}"' in out and '"attempts": 2' in out
        assert "RuntimeError: cannot do b'job/poison'" in out

        # A second letter, parked by hand, to requeue by id.
        other = await space.write(bury(Envelope(b"job/other", key="k-other", attempt=5)))
        code, out, _ = await forum_cli(
            "jobs", "retry", "--raw", str(other), "--node", forum_node.url
        )
        assert (code, out.strip()) == (0, "requeued 1")
        code, out, _ = await forum_cli("jobs", "retry", "--raw", "--all", "--node", forum_node.url)
        assert (code, out.strip()) == (0, "requeued 1")
        assert await space.count(Pattern(b"dead/")) == 0
        page = await space.list(JOBS)
        back = sorted((Envelope.open(t.payload) for t in page.tuples), key=lambda e: e.payload)
        # Attempt 1 again, each naming the letter it came from (the Lens counts afresh).
        assert back[0] == Envelope(b"job/other", key="k-other", revived=str(other))
        assert back[1] == Envelope(b"job/poison", key=str(job_id), revived=back[1].revived)
        assert back[1].revived is not None
        code, _, err = await forum_cli("jobs", "retry", "--raw", "nope:1", "--node", forum_node.url)
        assert code == 1 and "no dead letter nope:1" in err


async def test_bad_handler_is_a_usage_error(forum_node: NodeProcess, redis_url: str) -> None:
    code, _, err = await forum_cli(
        "worker", "--node", forum_node.url, "--redis-url", redis_url,
        "--prefix", "job/", "--handler", "tests.coordinator.no_such_module:h",
    )  # fmt: skip
    assert code == 2 and "no_such_module" in err


async def _count(space: ForumClient, pattern: Pattern, n: int) -> bool:
    return await space.count(pattern) == n


async def forum_cli(*args: str) -> tuple[int, str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FORUM_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "forum", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=environment, cwd=REPO,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_worker_killed_between_reserve_and_claim_loses_nothing(
    forum_node: NodeProcess, private_redis: RedisServer, tmp_path: Path
) -> None:
    """t0: worker A reserves job k; its claim hangs (Redis is paused).
    t1: A is SIGKILLed, before any claim exists. t2: A's reservation runs out
    on the node: k is live again, same entry id. t3: B claims and runs k, once."""
    url = private_redis.url
    env = {"FORUM_EXAMPLE_REDIS_URL": url}
    async with ForumClient(forum_node.url) as space, worker_processes(tmp_path) as workers:
        job_id = await space.write(b"job/resize cat.jpg")
        private_redis.pause()
        a_args = worker_args(forum_node, url, "slow_fenced", "--lease", "1")
        a = WorkerProcess("a", tmp_path, a_args, env)
        workers.append(a)
        try:
            await a.start()
            await eventually(lambda: _count_is(space, 0), what="A's reservation")
            assert await a.signal(signal.SIGKILL) == -signal.SIGKILL
        finally:
            private_redis.resume()
        await eventually(lambda: _count_is(space, 1), timeout=20, what="k live again")
        assert await space.read_entry(JOBS) == Tuple(job_id, b"job/resize cat.jpg")

        b = WorkerProcess("b", tmp_path, worker_args(forum_node, url, "slow_fenced"), env)
        workers.append(b)
        await b.start()
        async with FencedRedisStore.from_url(url) as fenced:
            await eventually(lambda: _has_result(fenced, str(job_id)), timeout=20, what="B ran k")
            assert [key for key, _ in await fenced.applied()] == [str(job_id)]
        assert await b.signal(signal.SIGTERM) == 0, b.log_text()
        assert await space.count(JOBS) == 0


async def _count_is(space: ForumClient, n: int) -> bool:
    return await space.count(JOBS) == n
