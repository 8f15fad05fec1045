"""``max_attempts`` for raw handlers counted per job across real nodes: two
peered ``forum serve`` processes, a ``forum worker --handler`` on each,
jobs written on the first, a handler that always fails. Each job runs
exactly ``max_attempts`` times in all, attempts 1, 2, 3 once each, and
ends as one dead letter (a copy of a failed tuple on the other node waits
for the retry's backoff, and a copy of a buried one is taken away: the
Lens's count, tests/coordinator/test_lens_attempts.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from redis.asyncio import Redis

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.coordinator.harness import WorkerProcess, eventually, peered, worker_processes
from tests.coordinator.test_worker_process import worker_args
from tests.fixtures.nodes import ForumNodes


@pytest.mark.slow
async def test_a_raw_handler_runs_max_attempts_times_in_all(
    tmp_path: Path, forum_nodes: ForumNodes, redis_url: str
) -> None:
    a, b = await peered(forum_nodes, "ab")
    env = {"FORUM_EXAMPLE_REDIS_URL": redis_url}
    async with ForumClient(a.url) as space, worker_processes(tmp_path) as started:
        for node in (a, b):
            args = worker_args(node, redis_url, "always_fail", "--max-attempts", "3",
                               "--backoff", "0.05")  # fmt: skip
            started.append(WorkerProcess(f"w-{node.name}", tmp_path / node.name, args, env))
            await started[-1].start()
        ids = [str(await space.write(f"job/{n}".encode())) for n in range(40)]

        async def settled() -> bool:
            dead = await space.count(Pattern(b"dead/job/"))
            return dead >= len(ids) and await space.count(Pattern(b"job/")) == 0

        await eventually(settled, 60, "every job dead")
        async with ForumClient(b.url) as other:
            await eventually(lambda: _none_left(other), 30, "b has no job left")
        for process in started:
            assert await process.signal(signal.SIGTERM) == 0, process.log_text()
        assert await space.count(Pattern(b"dead/job/")) == len(ids)
    async with Redis.from_url(redis_url) as client:
        runs = {key: [int(n) for n in await client.lrange(f"runs:{key}", 0, -1)] for key in ids}
    assert runs == {key: [1, 2, 3] for key in ids}


async def _none_left(space: ForumClient) -> bool:
    return await space.count(Pattern(b"job/")) == 0
