"""The replication tests' fixtures: real ``forum serve`` clusters, and Toxiproxy.

Nodes run with short replication intervals (``FAST``), so anti-entropy and
liveness act within a fraction of a second; the tests still wait on
predicates with deadlines, never on the clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AsyncExitStack

import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.fixtures.clusters import FAST
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually

__all__ = ["FAST", "clients", "live_set", "mesh"]


Clients = Callable[[NodeProcess], ForumClient]


def mesh(
    forum_nodes: ForumNodes,
    names: Iterable[str],
    *args: str,
    env: Mapping[str, str] | None = None,
) -> list[NodeProcess]:
    """Nodes (not started) that each have every other as a ``--peer``."""
    nodes = [forum_nodes.make(name, *args, env={**FAST, **(env or {})}) for name in names]
    for node in nodes:
        for peer in nodes:
            if peer is not node:
                node.args += ["--peer", peer.url]
    return nodes


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    """``clients(node)``: a ForumClient of the node, closed after the test."""
    async with AsyncExitStack() as stack:
        made: dict[str, ForumClient] = {}

        def client(node: NodeProcess) -> ForumClient:
            if node.url not in made:
                made[node.url] = ForumClient(node.url, timeout=30)
                stack.push_async_callback(made[node.url].aclose)
            return made[node.url]

        yield client


async def live_set(client: ForumClient) -> set[tuple[str, bytes]]:
    """Every live tuple on the node, as (id text, payload)."""
    found: set[tuple[str, bytes]] = set()
    cursor = 0
    while True:
        page = await client.list(Pattern(b""), cursor=cursor, limit=1000)
        found |= {(str(t.id), t.payload) for t in page.tuples}
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


async def converged(nodes: Iterable[ForumClient], timeout: float = 15.0) -> set[tuple[str, bytes]]:
    """Wait until every node has the same live set; returns it."""
    clients = list(nodes)
    result: set[tuple[str, bytes]] = set()

    async def same() -> bool:
        nonlocal result
        sets = [await live_set(c) for c in clients]
        result = sets[0]
        return all(s == sets[0] for s in sets)

    await eventually(same, timeout, "the same live set on every node")
    return result
