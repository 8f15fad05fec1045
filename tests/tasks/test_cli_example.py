"""The thumbnails example (examples/thumbnails/) as the README's quick start
runs it: a real node and Redis, ``forum worker --app`` as a process, the
producer as a process; and its effect's guard against a stale holder."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from examples.thumbnails.app import source_image, store
from forum.coordinator import ClaimLost, HeldClaim, Lens
from forum.tasks import Context, JsonSerializer
from tests.coordinator.harness import REPO, WorkerProcess, worker_processes
from tests.fixtures.nodes import NodeProcess


def rows(database: Path, query: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(database)) as db:
        return list(db.execute(query))


async def produce(env: dict[str, str], *args: str) -> tuple[int, str]:
    """``python -m examples.thumbnails.produce ARGS``: its exit code and stdout."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.thumbnails.produce", *args,
        cwd=REPO, env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    async with asyncio.timeout(90):
        out, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode()


@pytest.mark.slow
async def test_the_quick_start_makes_each_thumbnail_once(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    database = tmp_path / "thumbnails.db"
    env = {"FORUM_NODE": forum_node.url, "FORUM_REDIS_URL": redis_url,
           "THUMBNAILS_DB": str(database)}  # fmt: skip
    async with worker_processes(tmp_path) as started:
        # The app's node and Redis from the environment, as the README runs it.
        worker = WorkerProcess("w1", tmp_path / "w1", ["--app", "examples.thumbnails.app:app"], env)
        started.append(worker)
        await worker.start()
        code, out = await produce(env, "--images", "6")
        assert code == 0, out
        assert out.splitlines()[-1] == "6 thumbnails: 6 done, 0 failed"
        # Run again: the same keys are the same jobs, done once: nothing runs again.
        code, again = await produce(env, "--images", "6")
        assert code == 0, again
        assert again.splitlines()[-1] == "6 thumbnails: 6 done, 0 failed"
        # A size no retry can mend: dead at once (give_up_on=ValueError).
        code, bad = await produce(env, "--images", "1", "--size", "0")
        assert code == 1
        assert "thumb:0:0: dead: ValueError: size is 1 to 64, not 0" in bad
        assert await worker.signal(15) == 0
    stored = rows(database, "SELECT key, size, length(pixels) FROM thumbnails ORDER BY key")
    assert stored == [(f"thumb:{i}:16", 16, 256) for i in range(6)]
    applied = rows(database, "SELECT key FROM applied ORDER BY key")
    assert applied == [(f"thumb:{i}:16",) for i in range(6)]  # one effect per job


async def test_a_holder_whose_claim_is_gone_stores_nothing(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """t0 A claims k; t1 A's claim ends (released: as if its lease ran out)
    and B claims k with a higher token and stores its thumbnail; t2 A, late,
    stores: refused (``ClaimLost``), B's row and token stay."""
    database = tmp_path / "thumbnails.db"
    monkeypatch.setenv("THUMBNAILS_DB", str(database))
    pixels = bytes(source_image(1)[0][:16])
    async with Lens.from_url(redis_url) as lens:

        def context(claim: HeldClaim) -> Context:
            return Context(
                job_id="e:1", key="thumb:1:4", task="thumbnail", attempt=1, claim=claim,
                lens=lens, serializer=JsonSerializer(), record_ttl=60,
            )  # fmt: skip

        a = await lens.claim("thumb:1:4", "worker-a", lease=30)
        late = context(a)
        await a.release()
        b = await lens.claim("thumb:1:4", "worker-b", lease=30)
        await asyncio.to_thread(store, context(b), 1, 4, pixels)
        with pytest.raises(ClaimLost):
            await asyncio.to_thread(store, late, 1, 4, b"late" * 4)
        await b.complete()
    assert rows(database, "SELECT token, pixels FROM thumbnails") == [(b.token, pixels)]
    assert rows(database, "SELECT key, token FROM applied") == [("thumb:1:4", b.token)]
