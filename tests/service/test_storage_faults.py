"""Storage faults against real ``forum serve`` processes (issue 9, items 1, 5 and 6).

A full disk at the roll must not hang the node; a second node on a held data
directory must not start; bad storage flags are one-line errors.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from forum.node.client.remote import ForumClient
from forum.node.core.entries import EntryId
from forum.node.core.errors import NodeRejected
from forum.node.core.space import Pattern
from tests.fixtures.nodes import ForumNodes, eventually, free_port
from tests.fixtures.tmpfs import fill

#: Every request answers within this, whatever the disk does.
ANSWER = 5.0
SEGMENT = 64 * 1024


async def _outcome(call: Awaitable[Any]) -> Any:
    """The call's result, or the HTTP status it was refused with; a hang fails."""
    try:
        async with asyncio.timeout(ANSWER):
            return await call
    except NodeRejected as exc:
        return exc.status


async def _probe(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with asyncio.timeout(ANSWER), http.get(url) as response:
        return response.status, json.loads(await response.read())


async def test_a_disk_full_at_the_roll_answers_at_once_and_recovers(
    tmpfs: Callable[..., Path], forum_nodes: ForumNodes, http: aiohttp.ClientSession
) -> None:
    """The original: the first write got 503, then every write, take and ack
    hung, even after space was freed; /readyz said 200; SIGTERM was ignored."""
    # tmpfs is the first fixture, so it is unmounted after the node has stopped.
    point = tmpfs("1m")
    node = forum_nodes.make("full", "--segment-bytes", str(SEGMENT), "--max-payload", "8KiB")
    node.data_dir = point / "data"
    await node.start()
    live: dict[EntryId, bytes] = {}
    async with ForumClient(node.url) as client:

        async def write(payload: bytes) -> Any:
            result = await _outcome(client.write(payload))
            if isinstance(result, EntryId):
                live[result] = payload
            return result

        async def take() -> Any:
            result = await _outcome(client.take_entry(Pattern(b"job/")))
            if result not in (None, 503):
                del live[result.id]
            return result

        await write(b"job/reserved")
        reserved = await client.reserve(Pattern(b"job/"), lease=600)
        assert reserved is not None
        while (await client.status()).strand_bytes < SEGMENT:
            assert isinstance(await write(b"job/%d/" % len(live) + b"." * 1000), EntryId)

        filler = fill(point)
        for _ in range(3):
            assert await write(b"job/full") == 503
            assert await take() == 503
            assert await _outcome(client.ack(reserved.id)) == 503
        status, body = await _probe(http, node.url + "/readyz")
        assert status == 503 and "No space left" in body["message"], body
        assert (await _probe(http, node.url + "/healthz"))[0] == 200

        filler.unlink()
        await eventually(client.ready, timeout=ANSWER, what="ready again once there is room")
        assert isinstance(await write(b"job/freed"), EntryId)
        assert await _outcome(client.ack(reserved.id)) is True
        del live[reserved.id]
        assert (await take()) is not None

        # Full again; then SIGTERM must still stop the node at once.
        filler = fill(point)
        results = [await write(b"job/again/%d" % i + b"." * 1000) for i in range(20)]
        assert results[-1] == 503
    started = time.monotonic()
    assert await node.stop() == 0
    assert time.monotonic() - started < ANSWER

    filler.unlink()
    await node.start()
    async with ForumClient(node.url) as client:
        found = (await client.list(Pattern(b""), limit=1000)).tuples
    assert {t.id: t.payload for t in found} == live


async def test_a_second_node_on_a_held_data_directory_exits_2_and_the_first_loses_nothing(
    forum_nodes: ForumNodes,
) -> None:
    first = await forum_nodes.start("first")
    async with ForumClient(first.url) as client:
        written = [await client.write(b"before/%d" % i) for i in range(3)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("FORUM_")}
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "forum", "serve",
            "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(first.data_dir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        try:
            async with asyncio.timeout(30):
                _, err = await second.communicate()
        finally:
            if second.returncode is None:
                second.kill()
                await second.wait()
        lines = err.decode().strip().splitlines()
        assert second.returncode == 2
        assert len(lines) == 1 and str(first.data_dir) in lines[0] and "in use" in lines[0]
        assert "Traceback" not in err.decode()
        # The first still serves, and hands out the next ids.
        written.append(await client.write(b"after"))
        assert [i.seq for i in written] == [1, 2, 3, 4]
    await first.restart()
    async with ForumClient(first.url) as client:
        found = (await client.list(Pattern(b""), limit=100)).tuples
    assert [t.id for t in found] == written


async def test_serve_refuses_a_bad_fsync_interval_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORUM_")}
    for value in ("0", "-2", "soon"):
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "forum", "serve", "--fsync", "interval",
            "--fsync-interval", value, "--data-dir", str(tmp_path / "data"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        async with asyncio.timeout(30):
            _, err = await process.communicate()
        assert process.returncode == 2
        assert len(err.decode().strip().splitlines()) == 1 and "fsync_interval" in err.decode()
    assert not (tmp_path / "data").exists()  # changed nothing
