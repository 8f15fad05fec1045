"""Double takes per prefix: a tuple reserved on one node and taken on
another is counted on the first in its prefix (``/metrics``, status, the
dashboard's Prefixes panel)."""

from __future__ import annotations

import aiohttp
import pytest

from forum.node.api.parameters import MAX_GROUPS
from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from forum.node.space.applying import MOST_PREFIXES
from tests.fixtures.clusters import peers_are
from tests.fixtures.nodes import ForumNodes, eventually
from tests.replication.conftest import Clients, mesh

pytestmark = pytest.mark.slow

UNLENT = {"FORUM_REPL_LENDING": "false"}


def test_the_prefixes_counted_are_as_many_as_the_prefixes_route_shows() -> None:
    assert MOST_PREFIXES == MAX_GROUPS


async def test_a_tuple_reserved_here_and_taken_there_is_counted_in_its_prefix(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    # Lending off: b hands out a's tuple itself, as it does when a is cut off
    # (with lending, b's reserve borrows it and a hands it out no more).
    node_a, node_b = mesh(forum_nodes, "ab", env=UNLENT)
    a, b = clients(node_a), clients(node_b)
    await forum_nodes.start_all()
    await eventually(lambda: peers_are(b, {node_a.url}), what="b reached a")
    await eventually(lambda: peers_are(a, {node_b.url}), what="a reached b")

    wid = await a.write(b"job/1")
    reserved = await b.reserve(Pattern(b"job/"), lease=30, timeout=10)
    assert reserved is not None and reserved.id == wid
    assert await a.take(Pattern(b"job/")) == b"job/1"  # a hands it out too

    await eventually(lambda: _double_takes(b), what="b counts the double take")
    status = await b.status()
    assert status.double_takes_by_prefix == {"job/": 1}
    metrics = await _metrics(b)
    assert 'forum_double_takes_by_prefix_total{prefix="job/"} 1.0' in metrics
    assert "forum_double_takes_total 1.0" in metrics
    assert (await a.status()).double_takes_by_prefix == {}
    page = await _get(b, "/ui/prefixes")
    row = page[page.index('<tr data-prefix="job/"') :]
    assert '<td class="double-takes">1</td>' in row[: row.index("</tr>")]
    other = await _get(b, "/ui/prefixes?separator=-")  # not where the node counts them
    assert '<td class="double-takes">' not in other.replace('<td class="double-takes">—', "")


async def _double_takes(client: ForumClient) -> bool:
    return (await client.status()).double_takes == 1


async def _metrics(client: ForumClient) -> str:
    return await _get(client, "/metrics")


async def _get(client: ForumClient, path: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(client.url + path) as answer:
        assert answer.status == 200
        return await answer.text()
