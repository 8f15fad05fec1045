"""forum.node.core.eager.start: a coroutine's first step at once, the rest only if it waits."""

from __future__ import annotations

import asyncio

import pytest

from forum.node.core.eager import Suspended, start


async def test_a_coroutine_that_does_not_wait_ends_in_its_first_step() -> None:
    async def answer() -> int:
        return 42

    tasks = len(asyncio.all_tasks())
    assert start(answer()) == 42
    assert len(asyncio.all_tasks()) == tasks  # no task was made for it


async def test_its_exception_is_raised_by_start() -> None:
    async def refuse() -> int:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        start(refuse())


async def test_a_coroutine_that_waits_goes_on_where_it_stopped() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    steps = []

    async def twice() -> int:
        steps.append("first")
        got = await gate
        steps.append("second")
        await asyncio.sleep(0)  # a bare yield on the way is passed through too
        return got + 1

    outcome = start(twice())
    assert isinstance(outcome, Suspended) and steps == ["first"]
    task = asyncio.get_running_loop().create_task(outcome.finish())
    await asyncio.sleep(0)
    assert not task.done()
    gate.set_result(1)
    assert await task == 2 and steps == ["first", "second"]


async def test_cancelling_the_rest_cancels_what_it_waits_on_and_runs_its_cleanup() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    cleaned = []

    async def waits() -> None:
        try:
            await gate
        finally:
            cleaned.append(True)

    outcome = start(waits())
    assert isinstance(outcome, Suspended)
    task = asyncio.get_running_loop().create_task(outcome.finish())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gate.cancelled() and cleaned == [True]
