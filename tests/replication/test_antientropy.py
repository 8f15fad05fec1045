"""Anti-entropy and membership between running replicators in one process.

Over :class:`MemoryTransport` these run in milliseconds; the membership test
runs over real loopback HTTP too (real routes, real sockets; the transports
answer alike: see ``test_transport_contract.py``). It was a slow test of
``forum serve`` processes in ``test_cluster.py``, whose other tests still
check the processes' wiring (``--peer``, the extension, status, metrics).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.replication.config import ReplicationConfig
from forum.replication.membership import PeerState
from tests.fixtures.nodes import eventually
from tests.replication.peers import Node, Nodes

#: Rounds every 50 ms, a failing peer dead after 0.3 s.
FAST = ReplicationConfig(
    anti_entropy_interval=0.05,
    settle_delay=0.01,
    dead_after=0.3,
    attempts=1,
    backoff_base=0.01,
    backoff_max=0.05,
    connect_timeout=0.5,
    request_timeout=2,
)
JOBS = Pattern(b"job-")


@pytest.fixture(params=["memory", "http"])
async def nodes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Nodes]:
    async with AsyncExitStack() as stack:
        yield Nodes(request.param, tmp_path, stack, FAST)


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[Nodes]:
    async with AsyncExitStack() as stack:
        yield Nodes("memory", tmp_path, stack, FAST)


async def mesh(nodes: Nodes, names: str) -> list[Node]:
    return [await nodes.node(n, seeds=[s for s in names if s != n]) for n in names]


def live(forum: Forum) -> set[tuple[str, bytes]]:
    page = forum.list(Pattern(b""), limit=10_000)
    assert page.next_cursor is None
    return {(str(t.id), t.payload) for t in page.tuples}


async def converged(replicas: list[Node], what: str) -> set[tuple[str, bytes]]:
    def same() -> bool:
        sets = [live(r.forum) for r in replicas]
        vectors = [r.forum.strand.vector() for r in replicas]
        return all(s == sets[0] for s in sets) and all(v == vectors[0] for v in vectors)

    await eventually(same, 5, what)
    return live(replicas[0].forum)


def state_of(watcher: Node, peer: Node) -> PeerState | None:
    found = watcher.replicator.membership.by_origin(peer.me.origin)
    return None if found is None else found.state


async def test_a_cut_off_node_misses_the_pushes_and_pulls_them_once_healed(
    memory: Nodes,
) -> None:
    """t0 a, b, c hold the same 20 jobs; t1 c is cut off, a and b find it dead;
    t2 a writes 50 and b takes 10 (their pushes to c are dropped); t3 c is
    back: anti-entropy brings it everything, and a's and b's rounds see it alive."""
    a, b, c = await mesh(memory, "abc")
    await a.forum.write_many([b"job-before-%d" % i for i in range(20)])
    await converged([a, b, c], "20 jobs everywhere")

    memory.network.cut(c.url)
    for watcher in (a, b):
        await eventually(lambda w=watcher: state_of(w, c) is PeerState.DEAD, 5, "c dead")
    await a.forum.write_many([b"job-while-cut-%d" % i for i in range(50)])
    await eventually(lambda: b.forum.strand.vector() == a.forum.strand.vector(), 5, "b has a's")
    assert len(await b.forum.take_many(JOBS, limit=10)) == 10
    assert len(live(c.forum)) == 20  # nothing reached it meanwhile

    memory.network.heal(c.url)
    expected = await converged([a, b, c], "c caught up")
    assert len(expected) == 60
    for watcher in (a, b):
        await eventually(lambda w=watcher: state_of(w, c) is PeerState.ALIVE, 5, "c alive")


async def test_a_new_node_with_one_seed_learns_the_others_and_catches_up(nodes: Nodes) -> None:
    a, b, c = await mesh(nodes, "abc")
    await a.forum.write_many([b"job-a-%d" % i for i in range(30)])
    await converged([a, b, c], "a's writes everywhere")
    assert len(await b.forum.take_many(JOBS, limit=3)) == 3
    await converged([a, b, c], "b's takes everywhere")

    d = await nodes.node("d", seeds=["a"])
    everyone = [a, b, c, d]
    for watcher in everyone:
        others = [n for n in everyone if n is not watcher]
        await eventually(
            lambda w=watcher, o=others: all(state_of(w, n) is PeerState.ALIVE for n in o),
            5,
            f"{watcher.me.origin} knows every other node",
        )
    await d.forum.write(b"job-from-d")
    assert len(await converged(everyone, "d's write everywhere")) == 28
