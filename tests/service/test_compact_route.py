"""``POST /v1/compact`` and ``forum compact`` against a real ``forum serve``:
a churned node's Strand shrinks to its backlog, and a restart serves the
same backlog in the same order."""

from __future__ import annotations

import json

import aiohttp

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.fixtures.cli import run_forum
from tests.fixtures.nodes import NodeProcess

JOBS = Pattern(b"job/")


async def test_forum_compact_shrinks_a_churned_node_and_a_restart_keeps_its_backlog(
    forum_node: NodeProcess,
) -> None:
    async with ForumClient(forum_node.url) as client:
        for batch in range(20):
            await client.write_many(
                [b"job/%03d/%03d" % (batch, i) + b"x" * 500 for i in range(100)]
            )
        for batch in range(20):
            taken = await client.take_many(JOBS, 100 if batch % 5 else 95)
            assert taken
        kept = [t.payload for t in (await client.list(JOBS, limit=1000)).tuples]
        assert len(kept) == 20
        before = await client.status()
        code, out, err = await run_forum("compact", "--node", forum_node.url)
        assert code == 0, err
        assert out.startswith(f"dropped {2 * 1980} entries: ")
        after = await client.status()
        assert after.entries == 20 and after.compactions == 1
        assert after.strand_bytes < before.strand_bytes / 20
        assert after.entries_dropped == 2 * 1980
        assert after.bytes_reclaimed == before.strand_bytes + 16 - after.strand_bytes
    await forum_node.restart()
    async with ForumClient(forum_node.url) as client:
        assert [t.payload for t in (await client.list(JOBS, limit=1000)).tuples] == kept
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{forum_node.url}/v1/compact") as response,
        ):
            assert response.status == 200
            report = json.loads(await response.read())
        assert report["entries_dropped"] == 0 and report["bytes_after"] <= report["bytes_before"]
        assert set(report) == {
            "bytes_before", "bytes_after", "entries_dropped", "segments_rewritten",
            "segments_removed", "floors", "seconds",
        }  # fmt: skip
