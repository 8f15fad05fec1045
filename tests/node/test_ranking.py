"""The Forum's seam for the turns of remote tuples: ``set_ranking`` and ``rerank``."""

from __future__ import annotations

import asyncio

from node import EntryId, Forum, Pattern, Strand, StrandConfig, Write

W1 = Write(EntryId("peer-a", 1), b"job/1")
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
