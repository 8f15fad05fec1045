"""The turns of remote tuples in the Forum: ``set_ranking``, ``rerank``, the hold."""

from __future__ import annotations

import asyncio

from forum.node.core.entries import EntryId, Take, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import eventually

W1 = Write(EntryId("peer-a", 1), b"job/1")
W2 = Write(EntryId("peer-a", 2), b"job/2")
W3 = Write(EntryId("peer-a", 3), b"job/3")
T1 = Take(EntryId("peer-b", 1), W1.id)  # taken on another node
JOBS = Pattern(b"job/")
#: Long enough that a tuple waiting for a turn is never live within a test.
FOREVER = 3600.0


async def test_a_tuple_ranked_0_is_live_on_arrival(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg), remote_delay=FOREVER) as forum:
        forum.set_ranking(lambda entry_id: 0)
        await forum.apply([W1])
        assert await forum.count(JOBS) == 1


async def test_a_tuple_whose_turn_moves_up_surfaces_then(cfg: StrandConfig) -> None:
    """t0: W1 arrives, ranked 2 (it would wait two hours); t1: the members
    before us are gone, it ranks 0: rerank makes it live at once."""
    ranks = {W1.id: 2}
    async with Forum(await Strand.open(cfg), remote_delay=FOREVER) as forum:
        forum.set_ranking(ranks.__getitem__)
        taker = asyncio.create_task(forum.take(JOBS, timeout=30))
        await forum.apply([W1])
        assert await forum.count(JOBS) == 0 and not taker.done()
        ranks[W1.id] = 0
        forum.rerank()
        assert await taker == b"job/1"


async def test_a_later_turn_never_holds_back_a_tuple_on_its_way(cfg: StrandConfig) -> None:
    """A member that comes back pushes our turn back, but what was already
    waiting keeps its time (0.05 s here, not the 500 s of its new rank,
    which the take would not wait for)."""
    ranks = {W1.id: 1}
    async with Forum(await Strand.open(cfg), remote_delay=0.05) as forum:
        forum.set_ranking(ranks.__getitem__)
        taker = asyncio.create_task(forum.take(JOBS, timeout=30))
        await forum.apply([W1])
        ranks[W1.id] = 10_000
        forum.rerank()
        assert await taker == b"job/1"


async def test_without_a_ranking_a_remote_tuple_waits_for_its_slot(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg), remote_delay=FOREVER) as forum:
        forum.set_ranking(lambda entry_id: 0)
        forum.set_ranking(None)  # back to the slots of a node alone: 1 to 4 delays
        await forum.apply([W1])
        assert await forum.count(JOBS) == 0


async def test_a_turn_no_taker_wanted_is_held_and_taken_after_what_is_live(
    cfg: StrandConfig,
) -> None:
    """t0: W1 arrives, ranked 1; t0+d: its turn, no taker here: held (not
    live); t1: a local write; takes get the live one first, then W1."""
    async with Forum(await Strand.open(cfg), remote_delay=0.01, remote_hold=FOREVER) as forum:
        forum.set_ranking(lambda entry_id: 1)
        await forum.apply([W1])
        await eventually(lambda: _held(forum, 1), what="W1's turn")
        assert await forum.read_entry(JOBS) is None and await forum.count(JOBS) == 0  # not live
        await forum.write(b"job/local")
        assert await forum.take(JOBS) == b"job/local"
        assert await forum.take(JOBS) == b"job/1"  # nothing live matches: the held one
        assert await forum.read_entry(JOBS) is None


async def test_a_held_tuple_taken_elsewhere_is_gone_and_one_ranked_0_is_live(
    cfg: StrandConfig,
) -> None:
    ranks = {W1.id: 1, W2.id: 1, W3.id: 1}
    async with Forum(await Strand.open(cfg), remote_delay=0.01, remote_hold=FOREVER) as forum:
        forum.set_ranking(ranks.__getitem__)
        await forum.apply([W1, W2])
        await eventually(lambda: _held(forum, 2), what="both turns")
        await forum.apply([T1])  # W1 taken on another node
        assert [t.payload for t in await forum.take_many(JOBS, 10)] == [b"job/2"]
        assert forum.stats().double_takes == 0

        await forum.apply([W3])
        await eventually(lambda: _held(forum, 1), what="W3's turn")
        ranks[W3.id] = 0  # the writer went down: nobody before us
        forum.rerank()
        assert [t.payload for t in forum.list(JOBS).tuples] == [b"job/3"]  # live


def _held(forum: Forum, n: int) -> bool:
    """Whether ``n`` remote tuples are held (their turn came; not live). The
    one look at the Forum's insides here: a held tuple shows in nothing public
    until it is taken or live."""
    return len(forum._pool) == n


async def test_of_held_tuples_a_take_gets_the_one_this_node_ranks_best(cfg: StrandConfig) -> None:
    """W1 (rank 2) is held first, W2 (rank 1) after it: a take gets W2, so
    nodes left with only held tuples reach for different ones."""
    ranks = {W1.id: 2, W2.id: 1}
    async with Forum(await Strand.open(cfg), remote_delay=0.01, remote_hold=FOREVER) as forum:
        forum.set_ranking(ranks.__getitem__)
        await forum.apply([W1])
        await eventually(lambda: _held(forum, 1), what="W1's turn")
        await forum.apply([W2])
        await eventually(lambda: _held(forum, 2), what="W2's turn")
        assert await forum.take(JOBS) == b"job/2"
        assert await forum.take(JOBS) == b"job/1"


async def test_of_held_tuples_ranked_alike_a_take_gets_the_newest(cfg: StrandConfig) -> None:
    """The writer drains its tuples oldest first, so a node that takes from
    its backlog starts at the other end: W1 and W2 (both rank 1) are held, a
    take gets W2."""
    async with Forum(await Strand.open(cfg), remote_delay=0.01, remote_hold=FOREVER) as forum:
        forum.set_ranking(lambda entry_id: 1)
        await forum.apply([W1, W2])
        await eventually(lambda: _held(forum, 2), what="both turns")
        assert [t.payload for t in await forum.take_many(JOBS, 10)] == [b"job/2", b"job/1"]


async def test_an_aired_tuple_is_live_but_taken_in_the_order_this_node_ranks(
    cfg: StrandConfig,
) -> None:
    """t0: W1, W2 (rank 1) and W3 (rank 2) arrive; t0+d: their turns, no
    taker: held; t0+d+h: the holds end, all three are live (read, counted)
    and stay in this node's order for takes, not the oldest first: a Take
    from elsewhere removes W3 from it, and takes get W2 (rank 1, newest
    first), then W1."""
    ranks = {W1.id: 1, W2.id: 1, W3.id: 2}
    async with Forum(await Strand.open(cfg), remote_delay=0.01, remote_hold=0.05) as forum:
        forum.set_ranking(ranks.__getitem__)
        await forum.apply([W1, W2, W3])

        async def aired() -> bool:
            return await forum.count(JOBS) == 3

        await eventually(aired, what="the holds' end")
        assert await forum.read(JOBS) == b"job/1"  # reads see the oldest live, as ever
        await forum.apply([Take(EntryId("peer-b", 1), W3.id)])  # W3 taken on another node
        assert [t.payload for t in await forum.take_many(JOBS, 10)] == [b"job/2", b"job/1"]
        assert forum.stats().double_takes == 0 and await forum.count(JOBS) == 0


async def test_a_rerank_leaves_aired_tuples_live_and_taken(cfg: StrandConfig) -> None:
    """W1 and W2 aired here (rank 1); W2's writer goes down (rank 0 now): both
    stay live, and takes get them and a local write, nothing twice."""
    ranks = {W1.id: 1, W2.id: 1}
    async with Forum(await Strand.open(cfg), remote_delay=0.01, remote_hold=0.05) as forum:
        forum.set_ranking(ranks.__getitem__)
        await forum.apply([W1, W2])

        async def aired() -> bool:
            return await forum.count(JOBS) == 2

        await eventually(aired, what="the holds' end")
        ranks[W2.id] = 0
        forum.rerank()
        assert await forum.count(JOBS) == 2
        await forum.write(b"job/local")
        taken = [t.payload for t in await forum.take_many(JOBS, 10)]
        assert sorted(taken) == [b"job/1", b"job/2", b"job/local"]
        assert await forum.count(JOBS) == 0


async def test_a_writer_keeping_pace_is_left_its_tuples_until_it_stalls(cfg: StrandConfig) -> None:
    """t0: the writer took one of its tuples (W3), and one more (W1) is
    pooled here: it keeps pace, so a take here leaves W1 to it (a copy
    reserved there would be a double take); t0+h: it took nothing since,
    and a take waiting here gets W1."""
    w3_taken = Take(EntryId("peer-a", 4), W3.id)
    async with Forum(await Strand.open(cfg), remote_delay=0.01, remote_hold=0.2) as forum:
        forum.set_ranking(lambda entry_id: 1)
        await forum.apply([W1, W3, w3_taken])
        await eventually(lambda: _held(forum, 1), what="W1's turn")
        assert await forum.take(JOBS) is None
        assert await forum.take(JOBS, timeout=10) == b"job/1"
