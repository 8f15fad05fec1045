"""forum.node.core.cancellation: waits and calls that a cancellation always ends.

The failure they guard against is CPython 3.11's ``asyncio.wait_for``
returning normally when its task is cancelled in the turn its inner awaitable
finishes (gh-86296). Each test puts a cancellation in that turn.
"""

from __future__ import annotations

import asyncio

import pytest

from forum.node.core.cancellation import gather_all, keep_cancellation, wait_event


async def test_wait_event_says_whether_the_event_was_set() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5) is True
    assert await wait_event(event, None) is True


async def test_wait_event_is_cancelled_when_the_event_is_set_in_the_same_turn() -> None:
    """Set the event and cancel the waiter together: ``wait_for(event.wait())``
    would return True here on 3.11, and the cancellation would be gone."""
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_event(event, 5))
    await asyncio.sleep(0)  # the waiter is waiting
    event.set()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_keep_cancellation_raises_a_cancellation_the_call_swallowed() -> None:
    """A call that catches the cancellation and returns (as wait_for can on
    3.11, inside redis-py) still ends its task cancelled."""
    started = asyncio.Event()

    async def swallowing() -> str:
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "swallowed"
        return "slept"

    task = asyncio.create_task(keep_cancellation(swallowing()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_keep_cancellation_returns_what_an_uncancelled_call_returns() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert await keep_cancellation(answer()) == 42

    # A timeout the call handles itself (a cancellation it asked for and took
    # back with uncancel()) is not the caller's cancellation.
    async def times_out() -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(10)
        except TimeoutError:
            return "timed out"
        return "slept"

    assert await keep_cancellation(times_out()) == "timed out"


async def test_gather_all_raises_the_first_error_only_once_every_call_has_ended() -> None:
    """A plain gather raised at the first error and left the others running
    behind a caller that then closed their client: one's session reached the
    garbage collector unclosed (CI). gather_all waits for them all."""
    ended: list[str] = []

    async def fails() -> int:
        raise ConnectionError("node down")

    async def slow() -> int:
        await asyncio.sleep(0.05)
        ended.append("slow")
        return 2

    with pytest.raises(ConnectionError, match="node down"):
        await gather_all(fails(), slow())
    assert ended == ["slow"]  # over before the error was raised
    assert await gather_all(slow(), slow()) == [2, 2]
