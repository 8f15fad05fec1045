"""Time and flow across three real ``forum serve`` nodes: every property
travels in the Write, so each node applies it alike without coordination
(docs/scheduling.md). One node: tests/node/test_scheduling.py."""

from __future__ import annotations

import time

import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.fixtures.clusters import FAST, peers_are, proxied_cluster
from tests.fixtures.nodes import ForumNodes, eventually
from tests.fixtures.toxiproxy import Toxiproxy
from tests.replication.conftest import Clients, mesh

pytestmark = pytest.mark.slow

JOBS = Pattern(b"job/")
#: A remote tuple no taker waits for is held this long before it is aired
#: (counted, read): short, so the tests see it soon.
QUICK = {**FAST, "FORUM_REMOTE_HOLD": "0.1"}


async def started(forum_nodes: ForumNodes, clients: Clients) -> list[ForumClient]:
    nodes = mesh(forum_nodes, "abc", env=QUICK)
    await forum_nodes.start_all()
    made = [clients(n) for n in nodes]
    for node in made:
        await eventually(lambda n=node: _peers_alive(n), what=f"{node} reached its peers")
    return made


async def test_delays_expiries_priorities_and_pauses_agree_on_every_node(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    nodes = await started(forum_nodes, clients)
    await _a_delayed_tuple_is_due_on_every_node(nodes)
    await _an_expiring_tuple_is_gone_on_every_node(nodes)
    await _priorities_order_every_node_alike(nodes)
    await _a_pause_reaches_every_node(nodes)


async def _a_delayed_tuple_is_due_on_every_node(nodes: list[ForumClient]) -> None:
    """Replicated at once, invisible everywhere, then due on all."""
    a, _, c = nodes
    due_at = time.time() + 2.0
    await a.write(b"job/later", not_before=due_at)
    for node in nodes:
        await eventually(lambda n=node: _status(n, "delayed", 1), what=f"delayed on {node}")
        assert await node.count(JOBS) == 0 and await node.read(JOBS) is None
    for node in nodes:
        await eventually(lambda n=node: _count(n, 1), what=f"due on {node}")
    assert time.time() >= due_at
    assert await c.take(JOBS) == b"job/later"
    for node in nodes:
        await eventually(lambda n=node: _count(n, 0), what=f"taken, seen on {node}")


async def _an_expiring_tuple_is_gone_on_every_node(nodes: list[ForumClient]) -> None:
    """Live everywhere, then gone everywhere without a Take."""
    await nodes[1].write(b"job/short", ttl=1.5)
    for node in nodes:
        await eventually(lambda n=node: _count(n, 1), what=f"live on {node}")
    for node in nodes:
        await eventually(lambda n=node: _status(n, "expired", 1), what=f"expired on {node}")
        assert await node.count(JOBS) == 0


async def _priorities_order_every_node_alike(nodes: list[ForumClient]) -> None:
    """The highest priority first, whichever node takes. (Within one
    priority the order is each node's own: oldest by when a tuple went live
    there, docs/scheduling.md.)"""
    a, b, c = nodes
    for payload, priority in [(b"job/p0", 0), (b"job/p5", 5), (b"job/n3", -3), (b"job/p2", 2)]:
        await a.write(payload, priority=priority)
    for node in nodes:
        await eventually(lambda n=node: _count(n, 4), what=f"four on {node}")
    for node in nodes:
        got = await node.read_entry(JOBS)
        assert got is not None and got.payload == b"job/p5" and got.props.priority == 5
    order = []
    for left, node in enumerate((b, c, a, b)):  # each take on another node, once the last is seen
        got = await node.take_entry(JOBS, timeout=5)
        assert got is not None
        order.append(got.payload)
        for other in nodes:
            await eventually(lambda n=other, k=3 - left: _count(n, k), what="the take seen")
    assert order == [b"job/p5", b"job/p2", b"job/p0", b"job/n3"]


async def _a_pause_reaches_every_node(nodes: list[ForumClient]) -> None:
    """A pause on a pauses takes everywhere; a resume on b ends it everywhere."""
    a, b, c = nodes
    await a.write(b"job/1")
    await a.pause(b"job/")
    for node in nodes:
        await eventually(lambda n=node: _paused(n, ["job/"]), what=f"paused on {node}")
    await eventually(lambda: _count(c, 1), what="job/1 on c")
    assert await c.take(JOBS) is None and await c.reserve(JOBS, lease=5) is None
    assert await b.resume(b"job/") == 1
    for node in nodes:
        await eventually(lambda n=node: _paused(n, []), what=f"resumed on {node}")
    assert await c.take(JOBS, timeout=5) == b"job/1"


@pytest.mark.chaos
async def test_delays_and_expiries_hold_through_a_partition_and_heal(
    forum_nodes: ForumNodes, toxiproxy: Toxiproxy, clients: Clients
) -> None:
    nodes, links = await proxied_cluster(forum_nodes, toxiproxy, "abc", env=QUICK)
    a, b, c = (clients(n) for n in nodes)
    for name, client in zip("abc", (a, b, c), strict=True):
        own = {p.url for (source, _), p in links.items() if source == name}
        await eventually(lambda cl=client, u=own: peers_are(cl, u), what=f"{name} via proxies")

    async with toxiproxy.partition(links, {"a"}, {"b", "c"}):
        due_at = time.time() + 3.0
        await a.write(b"job/later", not_before=due_at)  # a's side only, for now
        await b.write(b"job/short", ttl=2.0)  # b's side only
        await a.pause(b"job/")
        await eventually(lambda: _count(c, 1), what="b's write on c")
        status = await c.status()
        assert status.delayed == 0 and list(status.paused) == []
        assert await b.count(JOBS) == 1 and await a.count(JOBS) == 0
    # Healed: a's delayed write reaches b and c not due yet, and due there when it is due on a.
    for node in (b, c):
        await eventually(lambda n=node: _status(n, "delayed", 1), what=f"a's write on {node}")
        await eventually(lambda n=node: _paused(n, ["job/"]), what=f"a's pause on {node}")
    for node in (a, b, c):  # a's delayed one due, b's short one expired, on every node
        await eventually(lambda n=node: _only(n, b"job/later"), what=f"due on {node}")
    assert time.time() >= due_at
    # b's short one expired on b and c (on a too, unless it arrived expired: never live there).
    for node in (b, c):
        assert (await node.status()).expired == 1
    assert await a.take(JOBS) is None  # paused everywhere
    assert await c.resume(b"job/") == 1
    assert await a.take(JOBS, timeout=5) == b"job/later"


async def _peers_alive(client: ForumClient) -> bool:
    peers = (await client.status()).peers
    return len(peers) == 2 and all(p.state == "alive" for p in peers)


async def _count(client: ForumClient, n: int) -> bool:
    return await client.count(JOBS) == n


async def _only(client: ForumClient, payload: bytes) -> bool:
    return await client.count(JOBS) == 1 and await client.read(JOBS) == payload


async def _status(client: ForumClient, figure: str, n: int) -> bool:
    return getattr(await client.status(), figure) == n


async def _paused(client: ForumClient, prefixes: list[str]) -> bool:
    return list((await client.status()).paused) == prefixes
