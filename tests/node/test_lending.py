"""The node's side of lending, with a lender at the seam (the real one,
over peers, is tests/replication/test_lending.py): a tuple whose writer is
alive is not handed out here; it is once the writer is not."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from forum.node.core.entries import EntryId, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.space.lending import Lent
from forum.node.space.listeners import Provenance
from tests.fixtures.nodes import eventually

JOBS = Pattern(b"job-")
WRITER = "peer-a"


class Writers:
    """A lender whose writers are alive while ``alive`` says so, and lend nothing."""

    def __init__(self) -> None:
        self.alive = True
        self.asked: list[tuple[str, bytes]] = []

    def owns(self, origin: str) -> bool:
        return self.alive and origin == WRITER

    async def borrow(
        self, origin: str, prefix: bytes, limit: int, lease: float
    ) -> Sequence[Lent] | None:
        self.asked.append((origin, prefix))
        return []

    def returned(self, origin: str, entry_ids: Sequence[EntryId]) -> None:
        pass

    def extended(self, origin: str, entry_ids: Sequence[EntryId], lease: float) -> None:
        pass


async def test_a_live_writers_tuple_is_asked_for_not_taken(forum: Forum) -> None:
    writers = Writers()
    forum.set_lender(writers)
    await forum.apply([Write(EntryId(WRITER, 1), b"job-1")], Provenance(frozenset({WRITER})))
    await asyncio.sleep(2 * forum.remote_delay + 0.05)  # past its turns here
    assert await forum.take(JOBS) is None
    assert await forum.reserve_many(JOBS, lease=30, limit=5) == []
    assert writers.asked and writers.asked[0] == (WRITER, b"job-")
    own = await forum.write(b"job-own")
    assert await forum.take(JOBS) == b"job-own"  # its own, handed out as ever
    assert own.origin != WRITER


async def test_a_waiting_taker_gets_the_tuple_the_moment_its_writer_is_down(
    forum: Forum,
) -> None:
    """Replication reranks when a member goes down: the takers waiting here
    look again then, not at their next look."""
    writers = Writers()
    forum.set_lender(writers)
    await forum.apply([Write(EntryId(WRITER, 1), b"job-1")], Provenance(frozenset({WRITER})))
    await asyncio.sleep(2 * forum.remote_delay + 0.05)
    waiting = asyncio.create_task(forum.take_entry(JOBS, timeout=30))
    await eventually(lambda: forum.stats().waiting_takers == 1, what="the taker waiting")
    assert not waiting.done()
    assert await forum.count(JOBS) == 1  # live here (read, counted), not handed out
    writers.alive = False
    forum.rerank()
    assert await forum.count(JOBS) == 0  # handed to the waiter by the rerank itself
    taken = await asyncio.wait_for(waiting, timeout=5)
    assert taken is not None and taken.id == EntryId(WRITER, 1)
