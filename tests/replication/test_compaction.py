"""Compaction across a cluster, in memory: the horizon, forgetting, dead ranges.

Three real Forums (each its Strand in a temporary directory) replicate over
the in-memory transport; ``network.cut`` partitions a node off. Compaction
runs as the node's Compactor runs it: ``Forum.compact(replicator.horizon(),
seal=True)``.
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import msgpack
import pytest

from forum.node.api.status import PeerStatus
from forum.node.core.entries import EntryId
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.replication.config import ReplicationConfig
from forum.replication.errors import BadMessage
from forum.replication.messages import (
    PULL_PATH,
    Member,
    PullPage,
    PullRequest,
    Push,
    decode_page,
    decode_push,
    encode,
)
from forum.replication.vector import VersionVector
from tests.fixtures.nodes import eventually
from tests.replication.peers import Node, Nodes

FAST = ReplicationConfig(
    anti_entropy_interval=0.05,
    dead_after=0.2,
    attempts=1,
    backoff_base=0.01,
    backoff_max=0.05,
    request_timeout=2,
    settle_delay=0.01,
)
JOBS = Pattern(b"job-")


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as stack:
        yield stack


async def trio(
    tmp_path: Path, stack: AsyncExitStack, forget_after: float = 3600.0
) -> tuple[Nodes, list[Node]]:
    nodes = Nodes("memory", tmp_path, stack, FAST, forget_after=forget_after)
    names = "abc"
    made = [
        await nodes.node(name, seeds=[other for other in names if other != name]) for name in names
    ]
    return nodes, made


def live(forum: Forum) -> set[tuple[EntryId, bytes]]:
    page = forum.list(JOBS, limit=100_000)
    return {(t.id, t.payload) for t in page.tuples}


async def converged(nodes: list[Node], expected: set[tuple[EntryId, bytes]] | None = None) -> None:
    async def same() -> bool:
        sets = [live(n.forum) for n in nodes]
        target = sets[0] if expected is None else expected
        return all(s == target for s in sets)

    await eventually(same, 10, "the same live set on every node")


async def horizons_caught_up(nodes: list[Node]) -> None:
    """Every node knows every other holds all it holds (vectors travelled)."""

    async def caught_up() -> bool:
        return all(n.replicator.horizon() == n.forum.strand.vector() for n in nodes)

    await eventually(caught_up, 10, "every horizon at its node's vector")


async def compact(node: Node) -> int:
    report = await node.forum.compact(node.replicator.horizon(), seal=True)
    return report.entries_dropped


def row(node: Node, other: Node) -> PeerStatus:
    (found,) = [p for p in node.replicator.status() if p.url == other.url]
    return found


async def test_a_cut_node_holds_compaction_back_until_it_has_caught_up(
    tmp_path: Path, stack: AsyncExitStack
) -> None:
    network, (a, b, c) = await trio(tmp_path, stack)
    await a.forum.write_many([b"job-%d" % i for i in range(50)])
    await converged([a, b, c])
    await horizons_caught_up([a, b, c])

    network.network.cut(c.url)
    taken = await b.forum.take_many(JOBS, limit=30)
    assert len(taken) == 30
    await converged([a, b])
    # c lacks the 30 Takes: neither a nor b may drop them, nor their Writes.
    for node in (a, b):
        assert await compact(node) == 0
        held_back = row(node, c)
        assert held_back.holds_back >= 30 and not held_back.forgotten
    assert len(live(c.forum)) == 50

    network.network.heal(c.url)
    await converged([a, b, c])
    assert len(live(c.forum)) == 20
    await horizons_caught_up([a, b, c])
    for node in (a, b, c):
        assert await compact(node) == 60  # 30 Writes and their 30 Takes
        assert node.forum.strand.stats().entries == 20
        assert all(p.holds_back == 0 for p in node.replicator.status())
    await converged([a, b, c])


async def test_a_forgotten_member_comes_back_and_resurrects_nothing(
    tmp_path: Path, stack: AsyncExitStack
) -> None:
    """t0: a writes 40, everyone holds them. t1: c is cut off and writes 5 of
    its own. t2: b takes 30 of a's. t3: c is forgotten; a and b compact the
    30 Writes and their Takes. t4: c comes back with those 30 live."""
    network, (a, b, c) = await trio(tmp_path, stack, forget_after=0.5)
    written = await a.forum.write_many([b"job-a-%d" % i for i in range(40)])
    await converged([a, b, c])

    network.network.cut(c.url)
    own = await c.forum.write_many([b"job-c-%d" % i for i in range(5)])
    taken = {t.id for t in await b.forum.take_many(JOBS, limit=30)}
    await converged([a, b])

    async def c_forgotten() -> bool:
        return all(row(n, c).forgotten for n in (a, b))

    await eventually(c_forgotten, 5, "c forgotten by a and b")
    assert row(a, c).holds_back == 0
    for node in (a, b):
        assert await compact(node) == 60
        assert node.forum.strand.stats().entries == 10
    stale = [e for e in await c.forum.strand.read_range(a.forum.strand.origin, 0, 100)]
    assert {e.id for e in stale} >= taken  # c holds the taken ones live still
    assert len(live(c.forum)) == 45

    # Its stale Writes pushed to a are refused: held as dead there.
    push = encode(Push(c.me, frozenset(), tuple(e for e in stale if e.id in taken)))
    ack = await a.replicator.receive_push(decode_push(push), len(push))
    assert ack.applied == 0

    network.network.heal(c.url)
    survivors = {(i, b"job-a-%d" % n) for n, i in enumerate(written) if i not in taken}
    expected = survivors | {(i, b"job-c-%d" % n) for n, i in enumerate(own)}
    await converged([a, b, c], expected)
    for node in (a, b):  # nothing stale reached them: the taken ones are still dropped
        assert all(node.forum.strand.position(i) is None for i in taken)


async def test_a_new_node_joins_a_compacted_cluster_from_pages(
    tmp_path: Path, stack: AsyncExitStack
) -> None:
    nodes = Nodes("memory", tmp_path, stack, FAST)
    a = await nodes.node("a", seeds=["b"])
    b = await nodes.node("b", seeds=["a"])
    await a.forum.write_many([b"job-%d" % i for i in range(50)])
    await converged([a, b])
    await b.forum.take_many(JOBS, limit=40)
    await converged([a, b])
    await horizons_caught_up([a, b])
    for node in (a, b):
        assert await compact(node) == 80

    d = await nodes.node("d", seeds=["a"])
    await converged([a, b, d])
    assert len(live(d.forum)) == 10
    # The dead ranges of b's origin may still be on their way after the live set is.
    await eventually(
        lambda: d.forum.strand.vector() == a.forum.strand.vector(), 10, "d's vector at a's"
    )
    assert d.forum.strand.stats().entries == 10  # the survivors only: no history to replay
    await horizons_caught_up([a, b, d])


async def test_a_page_carries_the_dead_ranges_and_floors_of_what_it_covers(
    tmp_path: Path, stack: AsyncExitStack
) -> None:
    nodes = Nodes("memory", tmp_path, stack, FAST)
    a = await nodes.node("a")  # alone: its horizon is its own vector
    ids = await a.forum.write_many([b"job-%d" % i for i in range(6)])  # a:1..6
    assert await a.forum.ack_many([ids[1], ids[2], ids[4]]) == [True] * 3  # Takes a:7..9
    assert await compact(a) == 6
    origin = a.forum.strand.origin

    transport = await nodes.transport(caller="http://x.memory:1")
    asker = Member("x-1", "http://x.memory:1")
    body = encode(PullRequest(asker, VersionVector(), frozenset(), (), 100, 1 << 20))
    page = decode_page(await transport.call(a.url, "POST", PULL_PATH, body))
    assert [e.id.seq for e in page.entries] == [1, 4, 6]
    assert page.dead == {origin: ((2, 3), (5, 5), (7, 9))}
    assert page.floors == {origin: 9}
    assert msgpack.unpackb(encode(page))["v"] == 2

    # A recheck asks again for seqs the asker holds: the same, from seq 4 on.
    recheck = PullRequest(
        asker, VersionVector({origin: 9}), frozenset(), (), 100, 1 << 20, (origin, 4, 9)
    )
    body = encode(recheck)
    page = decode_page(await transport.call(a.url, "POST", PULL_PATH, body))
    assert [e.id.seq for e in page.entries] == [4, 6]
    assert page.dead == {origin: ((5, 5), (7, 9))}

    # Nothing dropped among what is served: a version 1 page, as before compaction.
    body = encode(PullRequest(asker, VersionVector({origin: 9}), frozenset(), (), 100, 1 << 20))
    assert msgpack.unpackb(await transport.call(a.url, "POST", PULL_PATH, body))["v"] == 1


async def test_a_new_node_passes_a_dead_range_longer_than_the_seq_gap_it_allows(
    tmp_path: Path, stack: AsyncExitStack
) -> None:
    """A long history compacted away is one dead range, however many seqs it
    spans: not refused as "too far past the highest seq held", which only
    bounds how far past a gap a range may start."""
    config = dataclasses.replace(FAST, max_seq_gap=50)
    nodes = Nodes("memory", tmp_path, stack, config)
    a = await nodes.node("a")
    ids = await a.forum.write_many([b"job-%d" % i for i in range(200)])
    await a.forum.ack_many(ids[:199])
    assert await compact(a) == 398  # a:1..199 and their Takes a:201..399: one dead range each
    d = await nodes.node("d", seeds=["a"])
    await converged([a, d])
    await eventually(
        lambda: d.forum.strand.vector() == a.forum.strand.vector(), 10, "d's vector at a's"
    )
    assert d.forum.strand.stats().entries == 1


async def test_a_dead_range_of_millions_of_seqs_costs_no_memory(
    tmp_path: Path, stack: AsyncExitStack
) -> None:
    nodes = Nodes("memory", tmp_path, stack, FAST)
    d = await nodes.node("d")
    tracemalloc.start()
    try:
        await d.forum.apply_dead("a-1", [(1, 5_000_000)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert d.forum.strand.vector()["a-1"] == 5_000_000


async def test_forged_dead_ranges_are_refused_and_change_nothing(
    tmp_path: Path, stack: AsyncExitStack
) -> None:
    config = dataclasses.replace(FAST, max_seq_gap=50)
    nodes = Nodes("memory", tmp_path, stack, config)
    d = await nodes.node("d")
    mine = d.forum.strand.origin
    await d.forum.write_many([b"job-1", b"job-2"])
    peer = Member("p-1", "http://p.memory:1")
    forged = [
        {mine: ((1, 3),)},  # our own seqs past what we wrote: would kill our tuples
        {"p-1": ((10, 70),)},  # past a gap, further than max_seq_gap
    ]
    for dead in forged:
        page = PullPage(peer, VersionVector(), (), False, (), dead=dead, floors={})
        with pytest.raises(BadMessage):
            await d.replicator._apply_page(page)
    assert len(live(d.forum)) == 2
    assert d.forum.strand.vector() == {mine: 2}
