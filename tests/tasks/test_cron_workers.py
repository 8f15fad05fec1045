"""A periodic task across three ``forum worker --app`` processes, a real node
and a real Redis: each slot runs exactly once, and none is missing while the
workers ran (arq#196: two workers' crons both ran a slot).

Every worker enqueues every slot of ``tick`` (every second) with the slot's
key; the node deduplicates the writes and the Lens's claim lets one worker
run it. ``tick`` writes one row per run into SQLite (``$CRON_TEST_DB``),
which the test counts by slot key.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from forum.tasks import App, Context
from forum.tasks.cron import Interval, slot_key
from tests.coordinator.harness import WorkerProcess, worker_processes
from tests.fixtures.nodes import NodeProcess, eventually

#: Short, but not so short that a loaded machine misses a slot's TTL (one interval).
EVERY = 1.0

cron_app = App(prefix=b"cron-test/")


@cron_app.cron(every=EVERY)
def tick(ctx: Context) -> None:
    """Record this run of the slot (the key) and who ran it."""
    with contextlib.closing(
        sqlite3.connect(os.environ["CRON_TEST_DB"], timeout=30, isolation_level=None)
    ) as db:
        db.execute("CREATE TABLE IF NOT EXISTS runs (key TEXT NOT NULL, pid INTEGER NOT NULL)")
        db.execute("INSERT INTO runs (key, pid) VALUES (?, ?)", (ctx.key, os.getpid()))


def runs(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
        try:
            return [(str(k), int(p)) for k, p in db.execute("SELECT key, pid FROM runs")]
        except sqlite3.OperationalError:  # the table is not made yet
            return []


def says(worker: WorkerProcess, text: str) -> Callable[[], bool]:
    return lambda: text in worker.log_text()


@pytest.mark.slow
async def test_each_slot_runs_once_across_three_worker_processes(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    database = tmp_path / "runs.db"
    async with worker_processes(tmp_path) as started:
        for name in ("c1", "c2", "c3"):
            worker = WorkerProcess(
                name, tmp_path / name,
                ["--app", "tests.tasks.test_cron_workers:cron_app", "--node", forum_node.url,
                 "--redis-url", redis_url, "--take-wait", "0.2", "--lease", "5"],
                {"CRON_TEST_DB": str(database)},
            )  # fmt: skip
            started.append(worker)
            await worker.start()
        for worker in started:
            await eventually(says(worker, "running tests.tasks.test_cron_workers"), 30)
        # From here every worker's loop runs: every slot from the next on is due once.
        first = Interval(EVERY).next_after(time.time())
        last = first + 6 * EVERY
        await eventually(
            lambda: slot_key("tick", last) in {key for key, _ in runs(database)},
            30,
            "seven slots run",
        )
        for worker in started:
            assert await worker.signal(signal.SIGTERM) == 0, worker.log_text()
    ran = runs(database)
    keys = [key for key, _ in ran]
    twice = {key for key in keys if keys.count(key) > 1}
    assert not twice, f"slots run more than once: {sorted(twice)}"
    expected = {slot_key("tick", first + i * EVERY) for i in range(7)}
    assert expected <= set(keys), f"slots missing: {sorted(expected - set(keys))}"
