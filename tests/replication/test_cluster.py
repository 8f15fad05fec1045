"""Several real ``forum serve`` processes on loopback, one tuple space."""

from __future__ import annotations

import asyncio
import shutil

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.fixtures.nodes import ForumNodes, eventually, free_port
from tests.replication.conftest import FAST, Clients, converged, live_set, mesh

pytestmark = pytest.mark.slow

JOBS = Pattern(b"job-")


async def test_write_on_a_is_visible_everywhere_and_a_take_on_b_gone_everywhere(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    nodes = mesh(forum_nodes, "abc")
    await forum_nodes.start_all()
    a, b, c = (clients(n) for n in nodes)
    for node in (a, b, c):
        await eventually(lambda n=node: _all_alive(n, 2), what=f"{node} reached its peers")

    written = await a.write_many([b"job-%d" % i for i in range(50)])
    for node in (b, c):
        await eventually(lambda n=node: _count(n, 50), what=f"50 jobs on {node}")
    # A full mesh forwards nothing: a pushed to both, so b and c push none of it on.
    for node in (b, c):
        assert 'kind="push"' not in _sent_lines(await _metrics(node)), node

    taken = await b.take_many(JOBS, limit=10)
    assert len(taken) == 10
    expected = {(str(i), b"job-%d" % n) for n, i in enumerate(written)} - {
        (str(t.id), t.payload) for t in taken
    }
    for node in (a, b, c):
        await eventually(lambda n=node: _live_is(n, expected), what=f"takes seen on {node}")
    counts = [await n.count(JOBS) for n in (a, b, c)]
    assert counts == [40, 40, 40]

    # Status shows the peers alive, caught up, and metrics count what was sent.
    async def caught_up() -> bool:
        peers = (await a.status()).peers
        return len(peers) == 2 and all(
            p.state == "alive" and p.behind == 0 and p.origin for p in peers
        )

    await eventually(caught_up, what="a's peers alive and caught up")
    assert {p.url for p in (await a.status()).peers} == {nodes[1].url, nodes[2].url}
    metrics = await _metrics(a)
    assert "forum_replication_entries_sent_total" in metrics
    assert f'forum_replication_peer_up{{peer="{nodes[1].url}"}} 1.0' in metrics


async def test_a_blocking_take_is_woken_by_a_write_on_another_node(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    nodes = mesh(forum_nodes, "ab")
    await forum_nodes.start_all()
    a, b = (clients(n) for n in nodes)
    await eventually(lambda: _all_alive(a, 1), what="a sees b")

    taker = asyncio.create_task(b.take(JOBS, timeout=20))
    await eventually(lambda: _waiting(b), what="the take waiting on b")
    await a.write(b"job-wake")
    assert await asyncio.wait_for(taker, 20) == b"job-wake"
    await eventually(lambda: _count(a, 0), what="the take seen on a")


async def test_a_long_poll_read_is_woken_by_a_write_on_another_node(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    """The remote write becomes live on b only after its remote delay: the
    waiting read must be woken then, not when the entry arrived."""
    nodes = mesh(forum_nodes, "ab")
    await forum_nodes.start_all()
    a, b = (clients(n) for n in nodes)
    await eventually(lambda: _all_alive(a, 1), what="a sees b")

    reader = asyncio.create_task(b.read_entry(JOBS, timeout=20))
    await eventually(lambda: _long_polls(b), what="the read waiting on b")
    await a.write(b"job-read")
    found = await asyncio.wait_for(reader, 10)
    assert found is not None and found.payload == b"job-read"
    assert await b.count(JOBS) == 1  # a read leaves it live


async def test_a_killed_node_restarted_misses_nothing(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    nodes = mesh(forum_nodes, "abc")
    await forum_nodes.start_all()
    a, b, c = (clients(n) for n in nodes)
    await a.write_many([b"job-before-%d" % i for i in range(20)])
    await eventually(lambda: _count(c, 20), what="c caught up")

    await nodes[2].kill()
    await a.write_many([b"job-while-down-%d" % i for i in range(100)])
    await eventually(lambda: _count(b, 120), what="b has a's writes")
    await b.take_many(JOBS, limit=30)
    await b.write(b"job-from-b")
    await eventually(lambda: _count(a, 91), what="a has b's takes and write")
    await nodes[2].start()

    expected = await live_set(a)
    await eventually(lambda: _live_is(c, expected), what="the restarted node caught up")
    assert await converged([a, b, c]) == expected


async def test_a_tuple_whose_writer_died_surfaces_without_waiting_for_it(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    """t0: a writes e, pushed to b and c, where it waits for its turn (an
    hour a turn here); t1: a is killed; b and c find it down at their next
    call to it, and the first of them in e's turns ranks 0: e is live there
    at once, not after the hour it would wait for a."""
    nodes = mesh(forum_nodes, "abc", "--remote-delay", "3600")
    await forum_nodes.start_all()
    a, b, c = (clients(n) for n in nodes)
    for node in (a, b, c):
        await eventually(lambda n=node: _all_alive(n, 2), what=f"{node} reached its peers")
    await a.write(b"job-orphan")
    for node in (b, c):
        await eventually(lambda n=node: _entries(n, 1), what=f"the write held on {node}")
        assert await node.count(JOBS) == 0  # waiting for its turn

    await nodes[0].kill()
    takers = [asyncio.create_task(node.take(JOBS, timeout=30)) for node in (b, c)]
    done, pending = await asyncio.wait(takers, return_when=asyncio.FIRST_COMPLETED)
    for taker in pending:
        taker.cancel()
    assert [t.result() for t in done] == [b"job-orphan"]


async def test_a_wiped_node_rejoins_under_a_new_origin_and_catches_up(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    nodes = mesh(forum_nodes, "abc")
    await forum_nodes.start_all()
    a, b, c = (clients(n) for n in nodes)
    await c.write_many([b"job-c-%d" % i for i in range(10)])
    await a.write_many([b"job-a-%d" % i for i in range(10)])
    await eventually(lambda: _count(a, 20), what="a has c's writes")
    old_origin = (await c.status()).origin

    await nodes[2].stop()
    shutil.rmtree(nodes[2].data_dir)
    await a.take_many(JOBS, limit=5)
    await nodes[2].start()

    new_origin = (await c.status()).origin
    assert new_origin != old_origin
    expected = await live_set(a)
    await eventually(lambda: _live_is(c, expected), what="the wiped node caught up")

    # Its peers know it under its new origin, and its new writes replicate.
    async def new_origin_known() -> bool:
        peers = (await a.status()).peers
        return any(p.url == nodes[2].url and p.origin == new_origin for p in peers)

    await eventually(new_origin_known, what="a knows c's new origin")
    await c.write(b"job-c-reborn")
    await eventually(lambda: _count(b, len(expected) + 1), what="c's new write on b")


async def test_a_node_whose_peers_are_down_serves_and_stops_cleanly(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    node = forum_nodes.make("lonely", *(arg for url in dead for arg in ("--peer", url)), env=FAST)
    await node.start()
    client = clients(node)
    await client.write_many([b"job-%d" % i for i in range(100)])
    assert await client.count(JOBS) == 100

    async def peers_dead() -> bool:
        peers = (await client.status()).peers
        return len(peers) == 2 and all(p.state == "dead" for p in peers)

    await eventually(peers_dead, what="both peers dead")
    # Shutdown cancels the calls to the peers at once: an exit 0, no SIGKILL needed.
    assert await node.stop(deadline=5) == 0


async def _count(client: ForumClient, n: int) -> bool:
    return await client.count(JOBS) == n


async def _entries(client: ForumClient, n: int) -> bool:
    return (await client.status()).entries == n


async def _live_is(client: ForumClient, expected: set[tuple[str, bytes]]) -> bool:
    return await live_set(client) == expected


async def _all_alive(client: ForumClient, peers: int) -> bool:
    found = (await client.status()).peers
    return len(found) == peers and all(p.state == "alive" for p in found)


async def _waiting(client: ForumClient) -> bool:
    return (await client.status()).waiting_takers > 0


async def _long_polls(client: ForumClient) -> bool:
    return (await client.status()).long_polls > 0


def _sent_lines(metrics: str) -> str:
    return "\n".join(
        line
        for line in metrics.splitlines()
        if line.startswith("forum_replication_entries_sent_total{")
    )


async def _metrics(client: ForumClient) -> str:
    async with aiohttp.ClientSession() as session, session.get(client.url + "/metrics") as answer:
        return await answer.text()
