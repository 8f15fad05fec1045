"""``forum worker`` keeps a completed job's done marker for the nodes'
``forget_after`` (their ``$FORUM_FORGET_AFTER``, or ``--forget-after``) plus
the margin, and its history for ``--history-ttl``: a real worker process
against a real node and Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from redis.asyncio import Redis

from forum.coordinator import Lens
from forum.coordinator.keys import DONE_MARGIN
from forum.node.client.remote import ForumClient
from tests.coordinator.harness import WorkerProcess, eventually, worker_processes
from tests.coordinator.test_worker_process import JOBS, worker_args
from tests.fixtures.nodes import NodeProcess

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("env", "flags", "forget_after"),
    [({"FORUM_FORGET_AFTER": "7200"}, [], 7200.0), ({}, ["--forget-after", "600"], 600.0)],
)
async def test_the_worker_keeps_done_markers_for_forget_after_and_no_history(
    forum_node: NodeProcess,
    redis_url: str,
    tmp_path: Path,
    env: dict[str, str],
    flags: list[str],
    forget_after: float,
) -> None:
    env = {**env, "FORUM_EXAMPLE_REDIS_URL": redis_url}
    args = worker_args(forum_node, redis_url, "slow_fenced", "--history-ttl", "0", *flags)
    async with ForumClient(forum_node.url) as space, worker_processes(tmp_path) as workers:
        ids = [str(i) for i in await space.write_many([b"job/1", b"job/2", b"job/3"])]
        worker = WorkerProcess("w", tmp_path, args, env)
        workers.append(worker)
        await worker.start()
        async with Lens.from_url(redis_url) as lens, Redis.from_url(redis_url) as redis:

            async def all_done() -> bool:
                return None not in [await lens.done_token(key) for key in ids]

            await eventually(all_done, timeout=30, what="the three jobs done")
            for key in ids:
                pttl = await redis.pttl(lens.keys.done(key)) / 1000
                assert forget_after + DONE_MARGIN - 60 < pttl <= forget_after + DONE_MARGIN
                assert not await redis.exists(lens.keys.history(key))
        assert await space.count(JOBS) == 0


@pytest.mark.parametrize(
    ("env", "flags", "said"),
    [
        ({}, ["--forget-after", "600", "--done-ttl", "60"],
         "done_ttl (60 s) must not be shorter than forget_after (600 s)"),
        ({"FORUM_FORGET_AFTER": "soon"}, [], "$FORUM_FORGET_AFTER: 'soon' is not a number"),
    ],
)  # fmt: skip
def test_a_retention_shorter_than_forget_after_is_one_line(
    env: dict[str, str], flags: list[str], said: str
) -> None:
    command = [sys.executable, "-m", "forum", "worker", "--prefix", "job/",
               "--handler", "forum.deploy.demo:open_handler", *flags]  # fmt: skip
    done = subprocess.run(
        command, env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith("forum worker: ") and said in line
