"""A stale holder (its claim lost while its task ran) can never store a
result: the runner writes it fenced, before the worker completes the claim.
A real Lens (redis-server) and the runner itself, with claims the test holds.

::

    t0  holder A claims k (short lease), its task starts
    t1  A's lease runs out (no heartbeat here: as if A were SIGSTOPped)
    t2  holder B claims k (a higher token) and runs the task: result "fresh"
    t3  A's task returns "stale": the fenced record refuses it (ClaimLost)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from forum.coordinator import ClaimLost, Job, Lens
from forum.node.core.entries import EntryId
from forum.tasks import Context, JobState
from forum.tasks.message import Message
from forum.tasks.runner import Runner
from tests.fixtures.nodes import eventually
from tests.tasks.conftest import AppFactory


@pytest.fixture
async def lens(redis_url: str) -> AsyncIterator[Lens]:
    async with Lens.from_url(redis_url) as lens:
        yield lens


async def test_a_stale_holders_result_is_refused(make_app: AppFactory, lens: Lens) -> None:
    app = make_app()
    returns: dict[str, asyncio.Event] = {"A": asyncio.Event(), "B": asyncio.Event()}

    @app.task
    async def effect(ctx: Context, who: str) -> str:
        await returns[who].wait()
        return f"result of {who}"

    key = "fenced-1"
    payload_of = {
        who: Message(key, "effect", (who,)).encode(app.prefix, app.serializer) for who in "AB"
    }
    with ThreadPoolExecutor(1) as pool:
        runner = Runner(app, lens, pool)
        stale = await lens.claim(key, "A", lease=0.3)
        running_a = asyncio.create_task(
            runner(Job(payload_of["A"], EntryId("n", 1), key, 1, stale))
        )
        await eventually(lambda: stale.remaining() < 0, what="A's lease to run out")
        await eventually(lambda: _unclaimed(lens, key), what="Redis to expire A's claim")
        fresh = await lens.claim(key, "B", lease=30)
        assert fresh.token > stale.token
        returns["B"].set()
        await runner(Job(payload_of["B"], EntryId("n", 2), key, 1, fresh))
        returns["A"].set()
        with pytest.raises(ClaimLost):
            await running_a
        await fresh.complete()
    async with app:
        status = await app.job(key).status()
    assert (status.state, status.result, status.token) == (
        JobState.DONE, "result of B", fresh.token,
    )  # fmt: skip


async def _unclaimed(lens: Lens, key: str) -> bool:
    return (await lens.inspect(key)).claim is None
