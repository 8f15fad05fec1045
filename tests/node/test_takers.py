"""Concurrent and blocking takes within one process."""

from __future__ import annotations

import asyncio

from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.fixtures.nodes import eventually


async def test_1000_concurrent_takers_over_200_tuples(forum: Forum) -> None:
    await forum.write_many([b"job/%d" % i for i in range(200)])
    results = await asyncio.gather(*(forum.take(Pattern(b"job/")) for _ in range(1000)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 200
    assert len(set(winners)) == 200
    assert await forum.count(Pattern(b"")) == 0


async def test_blocking_take_wakes_on_write(forum: Forum) -> None:
    taker = asyncio.create_task(forum.take(Pattern(b"w/"), timeout=30))
    await eventually(lambda: forum.stats().waiting_takers == 1)
    await forum.write(b"other")  # does not match: the taker keeps waiting
    assert not taker.done()
    await forum.write(b"w/1")
    assert await taker == b"w/1"
    assert await forum.count(Pattern(b"")) == 1  # only "other" is left


async def test_waiters_are_served_first_come_first_served(forum: Forum) -> None:
    takers = []
    for i in range(5):
        takers.append(asyncio.create_task(forum.take(Pattern(b"f/"), timeout=30)))
        await eventually(lambda n=i + 1: forum.stats().waiting_takers == n)
    for i in range(5):
        await forum.write(b"f/%d" % i)
    assert [await t for t in takers] == [b"f/%d" % i for i in range(5)]


async def test_one_write_wakes_exactly_one_taker(forum: Forum) -> None:
    takers = [asyncio.create_task(forum.take(Pattern(b"o/"), timeout=30)) for _ in range(3)]
    await eventually(lambda: forum.stats().waiting_takers == 3)
    await forum.write(b"o/1")
    await eventually(lambda: sum(t.done() for t in takers) == 1)
    assert forum.stats().waiting_takers == 2
    for t in takers:
        t.cancel()
    await asyncio.gather(*takers, return_exceptions=True)


async def test_waiter_with_other_pattern_is_skipped(forum: Forum) -> None:
    a = asyncio.create_task(forum.take(Pattern(b"a/"), timeout=30))
    await eventually(lambda: forum.stats().waiting_takers == 1)
    b = asyncio.create_task(forum.take(Pattern(b"b/"), timeout=30))
    await eventually(lambda: forum.stats().waiting_takers == 2)
    await forum.write(b"b/1")
    assert await b == b"b/1"
    assert not a.done()
    await forum.write(b"a/1")
    assert await a == b"a/1"


async def test_timeout_returns_none_and_leaves_nothing_behind(forum: Forum) -> None:
    assert await forum.take(Pattern(b"t/"), timeout=0.05) is None
    assert forum.stats().waiting_takers == 0
    await forum.write(b"t/1")
    assert await forum.count(Pattern(b"t/")) == 1  # nobody stale took it


async def test_zero_and_none_timeouts_do_not_wait(forum: Forum) -> None:
    assert await forum.take(Pattern(b"z/"), timeout=0) is None
    assert await forum.take(Pattern(b"z/"), timeout=None) is None
    assert forum.stats().waiting_takers == 0


async def test_cancelled_wait_leaves_nothing_behind(forum: Forum) -> None:
    taker = asyncio.create_task(forum.take(Pattern(b"c/"), timeout=30))
    await eventually(lambda: forum.stats().waiting_takers == 1)
    taker.cancel()
    await asyncio.gather(taker, return_exceptions=True)
    assert taker.cancelled()
    assert forum.stats().waiting_takers == 0
    await forum.write(b"c/1")
    assert await forum.take(Pattern(b"c/")) == b"c/1"


async def test_cancel_just_after_hand_over_puts_the_tuple_back(forum: Forum) -> None:
    """t0: the write hands the tuple to the waiter; t1: the waiter is cancelled
    before it runs again. The tuple must go back, not vanish."""
    taker = asyncio.create_task(forum.take(Pattern(b"h/"), timeout=30))
    await eventually(lambda: forum.stats().waiting_takers == 1)
    # Listeners run right after the hand-over, before the waiter resumes.
    forum.add_listener(lambda entries, provenance: taker.cancel())
    await forum.write(b"h/1")
    await asyncio.gather(taker, return_exceptions=True)
    assert taker.cancelled()
    assert await forum.take(Pattern(b"h/")) == b"h/1"


async def test_close_wakes_waiters_with_none(forum: Forum) -> None:
    taker = asyncio.create_task(forum.take(Pattern(b"x/"), timeout=30))
    await eventually(lambda: forum.stats().waiting_takers == 1)
    await forum.close()
    assert await taker is None
