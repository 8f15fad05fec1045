"""``Forum.extend``/``extend_many``: renewing reservations (a worker's heartbeat)."""

from __future__ import annotations

import asyncio

import pytest

from forum.node.core.entries import EntryId
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum

P = Pattern(b"x/")


async def test_extend_renews_the_lease_from_now(forum: Forum) -> None:
    await forum.write(b"x/1")
    item = await forum.reserve(P, lease=0.3)
    assert item is not None
    for _ in range(3):  # 0.6 s: past the first lease, never past one renewal
        await asyncio.sleep(0.2)
        assert await forum.extend(item.id, 0.3)
    assert await forum.count(P) == 0 and forum.stats().reserved == 1
    await asyncio.sleep(0.5)  # no more renewals: it runs out and is live again
    assert await forum.count(P) == 1 and forum.stats().reserved == 0


async def test_extend_many_flags_each_id_and_changes_no_other(forum: Forum) -> None:
    await forum.write_many([b"x/1", b"x/2"])
    one = await forum.reserve(P, lease=30)
    assert one is not None
    [two] = [t for t in forum.list(P).tuples]
    unknown = EntryId("elsewhere", 1)
    assert await forum.extend_many([unknown, one.id, two.id], 30) == [False, True, False]
    assert await forum.count(P) == 1  # the live one is not reserved by an extend
    assert await forum.ack(one.id)
    assert await forum.extend(one.id, 30) is False  # acked: nothing to extend


@pytest.mark.parametrize("lease", [0, -1, float("nan")])
async def test_a_lease_that_is_not_positive_is_refused(forum: Forum, lease: float) -> None:
    with pytest.raises(ValueError, match="lease"):
        await forum.extend_many([], lease)
