"""Entries from other nodes: idempotent, order-free, double takes counted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from forum.node.core.entries import Entry, EntryId, Take, Tuple, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.space.listeners import LOCAL, Provenance
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import eventually

W1 = Write(EntryId("peer-a", 1), b"job/1")
W2 = Write(EntryId("peer-a", 2), b"job/2")
T1 = Take(EntryId("peer-b", 1), W1.id)
T1_AGAIN = Take(EntryId("peer-c", 1), W1.id)


async def test_apply_is_idempotent(forum: Forum) -> None:
    assert await forum.apply([W1, W2]) == [W1, W2]
    assert await forum.apply([W1, W2, W1]) == []
    assert await forum.count(Pattern(b"job/")) == 2
    assert forum.stats().entries == 2


async def test_take_before_its_write_kills_the_write(forum: Forum) -> None:
    await forum.apply([T1])
    await forum.apply([W2, W1])
    assert [t.payload for t in forum.list(Pattern(b"")).tuples] == [b"job/2"]


async def test_take_before_write_in_one_batch_and_after_restart(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg), remote_delay=0) as forum:
        await forum.apply([T1, W1, W2])
        assert await forum.count(Pattern(b"")) == 1
    async with Forum(await Strand.open(cfg), remote_delay=0) as forum:
        assert [t.payload for t in forum.list(Pattern(b"")).tuples] == [b"job/2"]
        assert forum.stats().double_takes == 0


async def test_two_takes_of_one_write_converge_and_are_counted(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg), remote_delay=0) as forum:
        await forum.apply([W1, T1, T1_AGAIN])
        assert await forum.count(Pattern(b"")) == 0
        assert forum.stats().double_takes == 1
    async with Forum(await Strand.open(cfg), remote_delay=0) as forum:
        assert forum.stats().double_takes == 1  # replay sees the same history


async def test_remote_take_of_a_tuple_being_taken_here_is_a_double_take(forum: Forum) -> None:
    await forum.apply([W1])
    local = asyncio.create_task(forum.take(Pattern(b"job/")))
    await asyncio.sleep(0)  # the local take has the tuple out of the index
    await forum.apply([T1])
    assert await local == b"job/1"
    assert forum.stats().double_takes == 1
    assert await forum.count(Pattern(b"")) == 0


async def test_remote_write_wakes_a_blocking_taker(forum: Forum) -> None:
    taker = asyncio.create_task(forum.take_entry(Pattern(b"job/"), timeout=30))
    await eventually(lambda: forum.stats().waiting_takers, what="the take waiting")
    await forum.apply([W2])
    assert await taker == Tuple(W2.id, W2.payload)


async def test_listeners_get_every_durable_entry_once_with_its_provenance(forum: Forum) -> None:
    seen: list[tuple[Entry, Provenance]] = []

    def listener(entries: Sequence[Entry], provenance: Provenance) -> None:
        seen.extend((entry, provenance) for entry in entries)

    forum.add_listener(listener)
    wid = await forum.write(b"local")
    await forum.take(Pattern(b"local"))
    from_peer = Provenance(held_by=frozenset({"peer-a"}))
    await forum.apply([W1, W1], from_peer)
    await forum.apply([W1])
    await forum.apply([W2])
    assert [(type(e).__name__, p) for e, p in seen] == [
        ("Write", LOCAL),
        ("Take", LOCAL),
        ("Write", from_peer),
        ("Write", LOCAL),
    ]
    assert seen[0][0].id == wid and seen[2][0] == W1 and seen[3][0] == W2
    forum.remove_listener(listener)


async def test_concurrent_applies_of_the_same_entry_store_it_once(forum: Forum) -> None:
    results = await asyncio.gather(*(forum.apply([W1]) for _ in range(10)))
    assert sum(len(r) for r in results) == 1
    assert forum.stats().entries == 1


async def test_an_apply_that_finds_the_entries_being_stored_returns_once_they_are(
    forum: Forum,
) -> None:
    """t0 a peer's round stores W1 and W2; t1 a repair pass pulls the same
    page: nothing is new to it, but it returns only once they are held (it
    used to return at once, and the repair reported them missing)."""
    first = asyncio.create_task(forum.apply([W1, W2]))
    await asyncio.sleep(0)  # the first call is storing them now
    assert not first.done()
    assert await forum.apply([W1, W2]) == []
    assert W1.id in forum.strand and W2.id in forum.strand
    assert first.done() and first.result() == [W1, W2]


async def test_remote_writes_become_live_after_the_remote_delay(cfg: StrandConfig) -> None:
    """t0: a peer's write arrives; until t0 + delay it is stored but not live,
    so a Take from its origin that arrives in time means it is never taken here."""
    async with Forum(await Strand.open(cfg), remote_delay=0.05) as forum:
        taker = asyncio.create_task(forum.take(Pattern(b"job/"), timeout=30))
        await forum.apply([W1, W2])
        assert await forum.count(Pattern(b"job/")) == 0  # stored, not yet live
        assert W1.id in forum.strand
        await forum.apply([T1])  # taken at its origin before it surfaced here
        assert await taker == b"job/2"  # W2 surfaced after the delay
        assert forum.stats().double_takes == 0
        assert await forum.count(Pattern(b"job/")) == 0
    async with Forum(await Strand.open(cfg)) as forum:
        assert await forum.count(Pattern(b"")) == 0  # the log agrees after a restart


async def test_an_apply_cancelled_mid_append_still_applies(forum: Forum) -> None:
    """t0: a peer's push is being stored; t1: its request is cancelled (the
    peer hung up). The entries are in the Strand, so they must be live too:
    they will never be sent again."""
    push = asyncio.create_task(forum.apply([W1, W2]))
    await asyncio.sleep(0)  # the append is under way
    push.cancel()
    await asyncio.gather(push, return_exceptions=True)
    await eventually(lambda: _count_is(forum, 2), what="the entries live")
    assert await forum.apply([W1, W2]) == []  # held, and not being stored


async def _count_is(forum: Forum, n: int) -> bool:
    return await forum.count(Pattern(b"job/")) == n
