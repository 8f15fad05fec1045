"""Partitions through Toxiproxy: both sides keep working, and heal to one state.

Every node reaches every other through its own proxy (one per directed link),
given as its ``--peer``; cutting the proxies between two groups partitions
the cluster. Timeline of the double take::

    t0  a writes job-x; it replicates to b and c
    t1  partition {a} | {b, c}
    t2  a takes job-x          (a cannot tell b)
    t3  b takes job-x          (b cannot tell a): both got it, by design
    t4  heal: each side learns the other's Take; job-x is gone everywhere and
        every node counts one double take
"""

from __future__ import annotations

import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.fixtures.clusters import peers_are, proxied_cluster
from tests.fixtures.nodes import ForumNodes, eventually
from tests.fixtures.toxiproxy import Toxiproxy
from tests.replication.conftest import Clients, live_set

pytestmark = [pytest.mark.slow, pytest.mark.chaos]


async def test_a_double_take_across_a_partition_converges_and_is_counted(
    forum_nodes: ForumNodes, toxiproxy: Toxiproxy, clients: Clients
) -> None:
    nodes, links = await proxied_cluster(forum_nodes, toxiproxy, "abc")
    a, b, c = (clients(n) for n in nodes)
    for name, client in zip("abc", (a, b, c), strict=True):
        own = {p.url for (source, _), p in links.items() if source == name}
        # Learned direct addresses give way to the proxied seeds of the same nodes.
        await eventually(lambda cl=client, u=own: peers_are(cl, u), what=f"{name} via proxies")

    await a.write(b"job-x")
    for client in (b, c):
        await eventually(lambda cl=client: _has(cl, b"job-x"), what="job-x everywhere")

    async with toxiproxy.partition(links, {"a"}, {"b", "c"}):
        assert await a.take(Pattern(b"job-x")) == b"job-x"
        assert await b.take(Pattern(b"job-x")) == b"job-x"
        await a.write_many([b"job-a-side-%d" % i for i in range(20)])
        await b.write_many([b"job-b-side-%d" % i for i in range(20)])
        await eventually(lambda: _count(c, b"job-b-side-", 20), what="b's side replicates")
        await c.take_many(Pattern(b"job-b-side-"), limit=5)
        await eventually(lambda: _count(b, b"job-b-side-", 15), what="c's takes reach b")
        await eventually(
            lambda: peers_are(a, {links["a", "b"].url, links["a", "c"].url}, "dead"),
            what="a sees its peers dead",
        )
        assert await a.count(Pattern(b"job-b-side-")) == 0
        assert await b.count(Pattern(b"job-a-side-")) == 0
        expected = await live_set(a) | await live_set(b)
    assert len(expected) == 20 + 15
    assert b"job-x" not in {payload for _, payload in expected}

    for client in (a, b, c):
        await eventually(lambda cl=client: _live_is(cl, expected), what="healed to one live set")
        await eventually(lambda cl=client: _double_takes(cl, 1), what="the double take counted")
    # The heal is seen by each side's next membership round, not at once.
    a_links = {links["a", "b"].url, links["a", "c"].url}
    await eventually(lambda: peers_are(a, a_links), what="a sees its peers alive again")


async def _has(client: ForumClient, payload: bytes) -> bool:
    return await client.read(Pattern(payload)) == payload


async def _count(client: ForumClient, prefix: bytes, n: int) -> bool:
    return await client.count(Pattern(prefix)) == n


async def _live_is(client: ForumClient, expected: set[tuple[str, bytes]]) -> bool:
    return await live_set(client) == expected


async def _double_takes(client: ForumClient, n: int) -> bool:
    return (await client.status()).double_takes == n
