"""A launched service whose port another process took between the launcher's
pick and its bind (``free_port`` only says a port was free a moment ago: the
chaos suite lost a run to it with other processes on the machine)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from forum.deploy.demo import SINK_URL_ENV
from forum.deploy.processes import WorkerService
from tests.fixtures.nodes import NodeProcess


@pytest.mark.slow
async def test_a_worker_whose_metrics_port_was_taken_starts_on_another(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    worker = WorkerService(
        "w",
        tmp_path,
        ["--node", forum_node.url, "--redis-url", redis_url, "--no-progress",
         "--handler", "forum.deploy.demo:open_handler", "--prefix", "job/"],
    )  # fmt: skip
    worker.env[SINK_URL_ENV] = redis_url.rsplit("/", 1)[0] + "/1"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", worker.port))
        taken.listen()
        before = worker.port
        try:
            await worker.start()
            assert worker.port != before
            assert worker.starts == 2
        finally:
            await worker.stop()
