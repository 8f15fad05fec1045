"""A cancelled job that has not run is gone from the space, not only turned
away: a delayed one stops counting as delayed and a queued one as live, on
every node (``POST /v1/withdraw`` after the Lens's cancel: docs/tasks.md,
"Cancelling"). Two real peered nodes, a real redis-server, no worker."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from forum.tasks import App, JobState
from tests.coordinator.harness import peered
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually

cancel_app = App(prefix=b"cancelling/")


@cancel_app.task
async def later(ctx: Any, n: int) -> int:
    return n


async def _counts(node: NodeProcess) -> dict[str, int]:
    """The node's live and delayed tuples of the app's prefix (``/v1/prefixes``)."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{node.url}/v1/prefixes?separator=/") as answer,
    ):
        rows = (await answer.json())["prefixes"]
    row = next((row for row in rows if row["prefix"] == "cancelling/"), {})
    return {"live": row.get("live", 0), "delayed": row.get("delayed", 0)}


async def _settled(nodes: list[NodeProcess], live: int, delayed: int, what: str) -> None:
    async def each_counts() -> bool:
        return [await _counts(n) for n in nodes] == [{"live": live, "delayed": delayed}] * 2

    await eventually(each_counts, 20, what)


@pytest.mark.slow
async def test_a_cancelled_delayed_or_queued_job_leaves_every_nodes_counts(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    nodes = await peered(forum_nodes, "ab")
    app = cancel_app.using(nodes=nodes[0].url, redis=redis_url)
    async with app:
        delayed = await later.enqueue(1, _key="in-a-minute", _delay=60)
        queued = await later.enqueue(2, _key="now")
        kept = await later.enqueue(3, _key="kept", _delay=60)
        await _settled(nodes, 1, 2, "both nodes hold the three jobs")

        assert (await delayed.cancel()).state == "cancelled"
        assert (await delayed.status()).state is JobState.CANCELLED
        await _settled(nodes, 1, 1, "the cancelled delayed job counted nowhere")

        assert (await queued.cancel()).state == "cancelled"
        assert (await queued.status()).state is JobState.CANCELLED
        await _settled(nodes, 0, 1, "the cancelled queued job counted nowhere")
        assert (await kept.status()).state is JobState.DELAYED
