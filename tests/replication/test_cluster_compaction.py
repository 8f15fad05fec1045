"""Compaction across real ``forum serve`` processes: the background compactor
with the replication horizon, a member that was stopped, one forgotten, and a
new node joining a compacted cluster."""

from __future__ import annotations

import asyncio

import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually, free_port
from tests.replication.conftest import Clients, converged, live_set, mesh

pytestmark = pytest.mark.slow

JOBS = Pattern(b"job-")
#: The background compactor looks every 0.2 s and runs whenever anything is
#: dead; it rewrites sealed segments only, so segments are small (4 KiB; but
#: a batch is one append, so one may end up with about 250 entries). What is
#: kept beyond the live is at most the current segment and the Writes of the
#: sealed one before it whose Takes are in the current one.
COMPACTING = (
    "--compact-interval",
    "0.2",
    "--compact-dead-ratio",
    "0",
    "--segment-bytes",
    "4096",
    "--max-payload",
    "1024",
)
ONE_SEGMENT = 250
#: Rounds of 100 jobs written and taken: 2,000 entries of history per churn.
CHURN_ROUNDS = 10


async def churn(client: ForumClient) -> None:
    """Jobs written and taken at once: the history grows, the backlog does not."""
    for _ in range(CHURN_ROUNDS):
        await client.write_many([b"fill-%d" % i for i in range(100)])
        assert len(await client.take_many(Pattern(b"fill-"), limit=100)) == 100


async def entries(client: ForumClient) -> int:
    return (await client.status()).entries


async def test_a_stopped_node_holds_compaction_back_then_all_three_compact(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    nodes = mesh(forum_nodes, "abc", *COMPACTING)
    await forum_nodes.start_all()
    a, b, c = (clients(n) for n in nodes)
    await a.write_many([b"job-%d" % i for i in range(200)])
    await converged([a, b, c])

    await nodes[2].stop()
    assert len(await b.take_many(JOBS, limit=150)) == 150
    await converged([a, b])

    async def c_holds_it_back() -> bool:
        (row,) = [p for p in (await a.status()).peers if p.url == nodes[2].url]
        return row.holds_back >= 150 and not row.forgotten

    await eventually(c_holds_it_back, what="a shows c holding compaction back")
    # Several passes of the compactor (every 0.2 s) later, a and b still hold
    # every Take c lacks, and their Writes. (A bounded wait: this asserts
    # that something does not happen.)
    for _ in range(5):
        await asyncio.sleep(0.3)
        assert await entries(a) == 350 and await entries(b) == 350

    await nodes[2].start()
    assert len(await converged([a, b, c])) == 50
    await churn(b)
    for client in (a, b, c):
        await eventually(
            lambda n=client: _at_most(n, 50 + 2 * ONE_SEGMENT), 20, f"{client.url} compacted"
        )

    # A new node with an empty data directory joins from the compacted pages.
    d = forum_nodes.make("d", *COMPACTING, "--peer", nodes[0].url, env=nodes[0].env)
    await d.start()
    assert len(await converged([a, b, c, clients(d)])) == 50
    assert await entries(clients(d)) <= 50 + 2 * ONE_SEGMENT  # not the history of 2,350


async def test_a_member_forgotten_comes_back_with_its_stale_log_and_own_writes(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    nodes = mesh(forum_nodes, "abc", *COMPACTING, env={"FORUM_FORGET_AFTER": "2"})
    await forum_nodes.start_all()
    a, b, c = (clients(n) for n in nodes)
    await a.write_many([b"job-a-%d" % i for i in range(100)])
    await converged([a, b, c])

    # c goes on alone, cut off: on another port (the others dial the old one
    # in vain) and with no peers of its own. It writes while cut off.
    cut_off: NodeProcess = nodes[2]
    meshed, port = list(cut_off.args), cut_off.port
    await cut_off.stop()
    cut_off.args, cut_off.port = _without_peers(meshed), free_port()
    await cut_off.start()
    alone = clients(cut_off)
    await alone.write_many([b"job-c-%d" % i for i in range(5)])
    assert len(await b.take_many(JOBS, limit=80)) == 80
    await churn(b)
    await converged([a, b])
    expected_on_a = await live_set(a)
    for client in (a, b):
        await eventually(
            lambda n=client: _at_most(n, 20 + 2 * ONE_SEGMENT),
            20,
            f"{client.url} compacted without c",
        )

    stale = await live_set(alone)
    assert len(stale) == 105  # the 80 taken are live on c still
    await cut_off.stop()
    cut_off.args, cut_off.port = meshed, port
    await cut_off.start()

    mine = {t for t in stale if t[1].startswith(b"job-c-")}
    assert await converged([a, b, c]) == expected_on_a | mine
    for client in (a, b):  # nothing stale came back to them
        assert await live_set(client) == expected_on_a | mine


async def _at_most(client: ForumClient, n: int) -> bool:
    return await entries(client) <= n


def _without_peers(args: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--peer":
            skip = True
        else:
            kept.append(arg)
    return kept
