"""Order-free, idempotent apply, checked against a model (hypothesis, in-process).

A random history of Writes and Takes (double takes included) made by a few
origins is delivered to several nodes, each in its own shuffled, duplicated,
re-batched (and partly concurrent) order, through the push path a peer's
push takes (message encoding, forged-entry checks, ``Forum.apply``). Every
node must end with the model's live set and double-take count, also after a
restart. A second property drives anti-entropy pages between two nodes that
hold different parts of a history, with tiny pages: they converge, and no
page ever leaves the asker with a new gap.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from forum.node.core.entries import Entry, EntryId, Take, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from forum.replication.antientropy import fill_page
from forum.replication.auth import ClusterAuth
from forum.replication.config import ReplicationConfig
from forum.replication.memory import MemoryNetwork, MemoryTransport
from forum.replication.messages import Member, Push, decode_push, encode
from forum.replication.metrics import ReplicationMetrics
from forum.replication.replicator import Replicator
from forum.replication.vector import VersionVector

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def histories(draw: st.DrawFn) -> list[Entry]:
    """Entries of up to three origins; Takes target earlier Writes, some twice."""
    origins = [f"n{i}" for i in range(draw(st.integers(1, 3)))]
    seqs = dict.fromkeys(origins, 0)
    writes: list[EntryId] = []
    entries: list[Entry] = []
    for _ in range(draw(st.integers(1, 30))):
        origin = draw(st.sampled_from(origins))
        seqs[origin] += 1
        entry_id = EntryId(origin, seqs[origin])
        if writes and draw(st.booleans()):
            entries.append(Take(entry_id, draw(st.sampled_from(writes))))
        else:
            entries.append(Write(entry_id, b"job-" + draw(st.binary(max_size=4))))
            writes.append(entry_id)
    return entries


def model(entries: Sequence[Entry]) -> tuple[set[tuple[EntryId, bytes]], int]:
    """The live set and the double-take count every node must reach."""
    takes = Counter(e.target for e in entries if isinstance(e, Take))
    live = {(e.id, e.payload) for e in entries if isinstance(e, Write) and not takes[e.id]}
    return live, sum(n - 1 for n in takes.values() if n > 1)


@asynccontextmanager
async def node(directory: Path, name: str) -> AsyncIterator[Replicator]:
    """A Forum and the replicator that receives pushes for it (no peers, no tasks:
    its transport, onto an empty network, is never called)."""
    cfg = StrandConfig().with_storage(directory / name).with_node_name(name).with_fsync("never")
    async with Forum(await Strand.open(cfg), remote_delay=0) as forum:
        yield Replicator(
            forum=forum,
            me=Member(forum.strand.origin, None),
            seeds=(),
            transport=MemoryTransport(MemoryNetwork(), ClusterAuth(None), ReplicationConfig()),
            metrics=ReplicationMetrics(CollectorRegistry()),
            config=ReplicationConfig(),
        )


async def live_set(forum: Forum) -> set[tuple[EntryId, bytes]]:
    page = forum.list(Pattern(b""), limit=1000)
    assert page.next_cursor is None
    return {(t.id, t.payload) for t in page.tuples}


@st.composite
def deliveries(draw: st.DrawFn, entries: list[Entry]) -> list[list[Entry]]:
    """All of ``entries`` plus some duplicates, shuffled, cut into batches."""
    extra = draw(st.lists(st.sampled_from(entries), max_size=8))
    order = draw(st.permutations(entries + extra))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(order) - 1)), max_size=6)))
    bounds = [0, *cuts, len(order)]
    return [order[a:b] for a, b in itertools.pairwise(bounds) if order[a:b]]


@given(data=st.data(), entries=histories(), receivers=st.integers(2, 3))
@PROPERTY
def test_any_delivery_order_reaches_the_model(
    data: st.DataObject, entries: list[Entry], receivers: int
) -> None:
    plans = [data.draw(deliveries(entries)) for _ in range(receivers)]
    concurrent = data.draw(st.booleans())
    expected_live, expected_double = model(entries)

    async def scenario(root: Path) -> None:
        sender = Member("n0", None)
        for i, plan in enumerate(plans):
            async with node(root, f"r{i}") as replicator:

                async def push(batch: list[Entry], replicator: Replicator = replicator) -> None:
                    body = encode(Push(sender, frozenset(), tuple(batch)))
                    await replicator.receive_push(decode_push(body), len(body))

                if concurrent:
                    await asyncio.gather(*(push(batch) for batch in plan))
                else:
                    for batch in plan:
                        await push(batch)
                forum = replicator.forum
                assert await live_set(forum) == expected_live
                assert forum.stats().double_takes == expected_double
            async with node(root, f"r{i}") as replicator:  # the same, after a restart
                assert await live_set(replicator.forum) == expected_live
                assert replicator.forum.stats().double_takes == expected_double

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(scenario(Path(root)))


@given(
    data=st.data(),
    entries=histories(),
    page=st.integers(1, 4),
)
@PROPERTY
def test_anti_entropy_pages_converge_without_gaps(
    data: st.DataObject, entries: list[Entry], page: int
) -> None:
    # Each entry starts on A, on B, or on both.
    homes = [data.draw(st.sampled_from(["a", "b", "ab"])) for _ in entries]
    expected_live, _ = model(entries)

    async def pull(asker: Forum, answerer: Forum) -> int:
        """Pull every page the answerer has for the asker; how many entries came."""
        pulled = 0
        more = True
        while more:
            more, got = await pull_page(asker, answerer)
            pulled += got
        return pulled

    async def pull_page(asker: Forum, answerer: Forum) -> tuple[bool, int]:
        before = VersionVector.of(asker.strand)
        filled = await fill_page(answerer.strand, before, frozenset(), page, 1 << 20)
        got, more = filled.entries, filled.more
        assert len(got) <= page and not filled.dead
        await asker.apply(got)
        after = VersionVector.of(asker.strand)
        for entry in got:
            assert not before.holds(entry.id)  # only what was lacking
            assert entry.id.seq <= after.contiguous[entry.id.origin]  # and no new gap
        return more, len(got)

    async def scenario(root: Path) -> None:
        async with node(root, "a") as a, node(root, "b") as b:
            await a.forum.apply([e for e, home in zip(entries, homes, strict=True) if "a" in home])
            await b.forum.apply([e for e, home in zip(entries, homes, strict=True) if "b" in home])
            # Gaps on both sides can take a few exchanges each way to close.
            for _ in range(len(entries) + 1):
                if not await pull(a.forum, b.forum) + await pull(b.forum, a.forum):
                    break
            for replica in (a, b):
                assert await live_set(replica.forum) == expected_live
            assert a.forum.strand.vector() == b.forum.strand.vector()

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(scenario(Path(root)))
