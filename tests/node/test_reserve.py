"""reserve / ack / release: a take that cannot be lost in flight."""

from __future__ import annotations

import asyncio

import pytest

from forum.node.core.entries import EntryId, Take
from forum.node.core.space import Pattern
from forum.node.space import applying
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import eventually


async def test_ack_takes_the_reserved_tuple_for_good(forum: Forum) -> None:
    wid = await forum.write(b"job/1")
    got = await forum.reserve(Pattern(b"job/"), lease=30)
    assert got is not None and got.id == wid
    assert await forum.count(Pattern(b"job/")) == 0  # out of reach while reserved
    assert await forum.take(Pattern(b"job/")) is None
    assert await forum.ack(wid) is True
    assert await forum.ack(wid) is False  # nothing left to take
    log = await forum.strand.read_range(forum.strand.origin, 0, 10)
    assert [type(e) for e in log] == [type(log[0]), Take] and log[1].target == wid  # type: ignore[union-attr]


async def test_release_and_expiry_put_the_tuple_back_in_its_place(forum: Forum) -> None:
    await forum.write_many([b"job/1", b"job/2"])
    first = await forum.reserve(Pattern(b"job/"), lease=30)
    assert first is not None and await forum.release(first.id)
    assert not await forum.release(first.id)
    assert await forum.read(Pattern(b"job/")) == b"job/1"  # back in front
    again = await forum.reserve(Pattern(b"job/"), lease=0.05)
    assert again == first
    await eventually(lambda: not forum.stats().reserved, what="the lease ran out")
    assert await forum.take(Pattern(b"job/")) == b"job/1"


async def test_ack_after_expiry_takes_it_if_still_live(forum: Forum) -> None:
    wid = await forum.write(b"job/1")
    assert await forum.reserve(Pattern(b"job/"), lease=0.01) is not None
    await eventually(lambda: not forum.stats().reserved, what="the lease ran out")
    assert await forum.ack(wid) is True
    assert await forum.count(Pattern(b"")) == 0


async def test_an_expired_reservation_wakes_a_waiting_taker(forum: Forum) -> None:
    await forum.write(b"job/1")
    assert await forum.reserve(Pattern(b"job/"), lease=0.05) is not None
    assert await forum.take(Pattern(b"job/"), timeout=10) == b"job/1"


async def test_reserve_waits_like_take(forum: Forum) -> None:
    waiting = asyncio.create_task(forum.reserve(Pattern(b"w/"), lease=30, timeout=10))
    await eventually(lambda: forum.stats().waiting_takers, what="the reserve waiting")
    await forum.write(b"w/1")
    got = await waiting
    assert got is not None and got.payload == b"w/1"
    assert forum.stats().reserved == 1


async def test_reservations_do_not_survive_a_restart(cfg: StrandConfig) -> None:
    """A node that dies with tuples reserved comes back with them live."""
    async with Forum(await Strand.open(cfg)) as forum:
        await forum.write(b"job/1")
        assert await forum.reserve(Pattern(b"job/"), lease=30) is not None
    async with Forum(await Strand.open(cfg)) as forum:
        assert await forum.take(Pattern(b"job/")) == b"job/1"


async def test_taken_elsewhere_while_reserved_is_a_double_take(forum: Forum) -> None:
    wid = await forum.write(b"job/1")
    assert await forum.reserve(Pattern(b"job/"), lease=30) is not None
    await forum.apply([Take(EntryId("peer-b", 1), wid)])
    assert forum.stats().double_takes == 1
    assert forum.stats().double_takes_by_prefix == {"job/": 1}
    assert forum.stats().reserved == 0
    assert await forum.ack(wid) is False


async def test_double_takes_are_counted_in_at_most_so_many_prefixes(
    forum: Forum, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grouped at the first ``/`` (a payload without one on its own), the
    first prefixes met, none too long; a double take of another is in the
    total only."""
    monkeypatch.setattr(applying, "MOST_PREFIXES", 2)
    payloads = [b"job/1", b"x" * 300 + b"/1", b"job/2", b"mail/1", b"plain", b"other/1"]
    ids = await forum.write_many(payloads)
    for seq, wid in enumerate(ids, start=1):
        assert await forum.reserve(Pattern(b""), lease=30) is not None
        await forum.apply([Take(EntryId("peer-b", seq), wid)])
    stats = forum.stats()
    assert stats.double_takes == 6
    assert stats.double_takes_by_prefix == {"job/": 2, "mail/": 1}
    assert forum.double_takes_by_prefix() == {b"job/": 2, b"mail/": 1}


async def test_lease_must_be_positive(forum: Forum) -> None:
    with pytest.raises(ValueError):
        await forum.reserve(Pattern(b""), lease=0)


async def _settled(forum: Forum) -> None:
    # The cancelled call's append is still being settled.
    await eventually(lambda: not forum._taker.settling, what="settled")


async def test_a_cancelled_ack_still_takes_and_writes_no_copy(forum: Forum) -> None:
    """The acker already holds the tuple (and its claim): a copy under a new
    id would be a new job, run twice."""
    wid = await forum.write(b"job/1")
    assert await forum.reserve(Pattern(b"job/"), lease=30) is not None
    ack = asyncio.create_task(forum.ack(wid))
    await asyncio.sleep(0)  # the ack's append is under way
    ack.cancel()
    await asyncio.gather(ack, return_exceptions=True)
    await _settled(forum)
    assert await forum.count(Pattern(b"")) == 0
    assert forum.stats().entries == 2  # the Write and its Take, nothing else


async def test_a_take_cancelled_mid_append_writes_the_tuple_back(forum: Forum) -> None:
    """Its caller never got the tuple: rather than lose it, it is written back."""
    await forum.write(b"job/1")
    take = asyncio.create_task(forum.take(Pattern(b"job/")))
    await asyncio.sleep(0)
    take.cancel()
    await asyncio.gather(take, return_exceptions=True)
    await _settled(forum)
    assert await forum.take(Pattern(b"job/")) == b"job/1"


async def test_reserve_many_and_ack_many(forum: Forum) -> None:
    ids = await forum.write_many([b"b/%d" % i for i in range(5)])
    got = await forum.reserve_many(Pattern(b"b/"), lease=30, limit=3)
    assert [t.id for t in got] == ids[:3]
    unknown = EntryId("nobody", 1)
    assert await forum.ack_many([ids[0], unknown, ids[1], ids[4]]) == [True, False, True, True]
    assert forum.stats().reserved == 1  # ids[2] is still reserved
    assert [t.payload for t in forum.list(Pattern(b"")).tuples] == [b"b/3"]
    log = await forum.strand.read_range(forum.strand.origin, 5, 10)
    assert len(log) == 3  # the three Takes, appended together
