"""Write concern over real ``forum serve`` processes: a write with ``copies=2``
is answered only once a peer holds it durably, so losing the writer's disk
right after the answer loses none of it; short of its copies in time the
answer says how many hold it, and the write stands."""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.errors import CopiesShort, ForumError, NodeRejected
from forum.node.core.space import Pattern
from tests.fixtures.cli import run_forum
from tests.fixtures.nodes import ForumNodes, eventually
from tests.replication.conftest import Clients, live_set, mesh

pytestmark = pytest.mark.slow

#: Remote tuples live here within a fraction of a second (the check reads B's live set).
QUICK = {"FORUM_REMOTE_HOLD": "0.1"}
ROUNDS = 10
WRITERS = 4


async def _peers_alive(client: ForumClient, count: int) -> bool:
    peers = (await client.status()).peers
    return len(peers) == count and all(p.state == "alive" and p.origin for p in peers)


async def _write_until_killed(
    client: ForumClient, name: str, acknowledged: list[bytes], stop: asyncio.Event
) -> None:
    """Write one tuple after another with copies=2 and note each answered one,
    until ``stop`` or the node is gone."""
    n = 0
    while not stop.is_set():
        payload = f"job-{name}-{n}".encode()
        try:
            await client.write(payload, copies=2)
        except ForumError:  # the node died mid-call: the answer is lost, not acknowledged
            return
        acknowledged.append(payload)
        n += 1


async def test_b_holds_every_tuple_acknowledged_with_copies_2_when_a_and_its_disk_die(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    """t0: writers on A write with copies=2, each answer noted
    t1: A is SIGKILLed and its data directory deleted at once
    then: every noted tuple is on B (the only copy left). Ten times, A coming
    back empty (a new origin) between rounds."""
    a_node, b_node = mesh(forum_nodes, "ab", env=QUICK)
    await forum_nodes.start_all()
    b = clients(b_node)
    acknowledged: list[bytes] = []
    for round_ in range(ROUNDS):
        async with ForumClient(a_node.url, timeout=10) as a:
            await eventually(lambda: _peers_alive(a, 1), 20, "A sees B alive")
            stop = asyncio.Event()
            writers = [
                asyncio.create_task(_write_until_killed(a, f"{round_}-{w}", acknowledged, stop))
                for w in range(WRITERS)
            ]
            enough = len(acknowledged) + 20
            await eventually(lambda: len(acknowledged) >= enough, 20, "writes answered")  # noqa: B023
            await a_node.kill()
            shutil.rmtree(a_node.data_dir)
            stop.set()
            await asyncio.gather(*writers)
        wanted = set(acknowledged)

        async def all_on_b(wanted: set[bytes] = wanted) -> bool:
            return wanted <= {payload for _, payload in await live_set(b)}

        await eventually(all_on_b, 20, f"round {round_}: every acknowledged tuple on B")
        await a_node.restart()
    assert len(acknowledged) >= ROUNDS * 20


async def test_copies_2_with_b_down_answers_how_many_hold_it_and_the_write_stands(
    forum_nodes: ForumNodes,
) -> None:
    b_node = forum_nodes.make("b", env=QUICK)
    a_node = await forum_nodes.start("a", "--peer", b_node.url, "--copies-timeout", "0.5")
    async with ForumClient(a_node.url) as a, aiohttp.ClientSession() as http:
        with pytest.raises(CopiesShort) as short:
            await a.write(b"job-short", copies=2)
        assert (short.value.held, short.value.copies, short.value.retriable) == (1, 2, False)
        assert "stays written" in str(short.value)
        [written] = short.value.ids
        assert await a.read(Pattern(b"job-short")) == b"job-short"

        # Over HTTP: a 504 naming the copies held, and the ids that stand.
        status, body = await _post(
            http, f"{a_node.url}/v1/tuples/batch", {"payloads": ["job-1", "job-2"], "copies": 2}
        )
        assert status == 504, body
        assert (body["error"], body["copies"], body["copies_held"]) == ("too_few_copies", 2, 1)
        assert len(body["ids"]) == 2

        # The HTTP transport's client reads the 504 as the stream's does.
        async with ForumClient(a_node.url, transport="http") as over_http:
            with pytest.raises(CopiesShort, match="1 of 2 copies held") as short_http:
                await over_http.write_many([b"job-3"], copies=2)
            assert (short_http.value.held, short_http.value.status) == (1, 504)
        # The command line: one line saying so, and a failing exit code.
        code, out, err = await run_forum("write", "job-cli", "--copies", "2", "--node", a_node.url)
        assert code != 0 and out == ""
        assert "too_few_copies" in err and "stays written" in err and err.count("\n") == 1

        # More copies than members: refused at once, nothing written.
        count = await a.count(Pattern(b""))
        with pytest.raises(NodeRejected, match="copies=3 but the cluster has 2 members") as many:
            await a.write(b"job-many", copies=3)
        assert many.value.status == 400
        assert await a.count(Pattern(b"")) == count

        # B comes: it gets what A holds, the short write among it.
        await forum_nodes.start_all()
        async with ForumClient(b_node.url) as b:
            await eventually(
                lambda: _holds(b, str(written)), 20, "B holds the write that was short"
            )
            await eventually(lambda: _peers_alive(a, 1), 20, "A sees B alive")
            assert (await a.write(b"job-two", copies=2)).origin == written.origin  # held by B


async def test_ack_copies_is_the_default_of_a_write_that_gives_none(
    forum_nodes: ForumNodes,
) -> None:
    b_node = forum_nodes.make("b")
    a_node = await forum_nodes.start(
        "a", "--peer", b_node.url, "--ack-copies", "2", "--copies-timeout", "0.5"
    )
    async with ForumClient(a_node.url) as a:
        with pytest.raises(CopiesShort):
            await a.write(b"plain")
        # A write may ask for less than the node's default.
        await a.write(b"one", copies=1)


async def _holds(client: ForumClient, entry_id: str) -> bool:
    return entry_id in {i for i, _ in await live_set(client)}


async def _post(http: aiohttp.ClientSession, url: str, body: object) -> tuple[int, Any]:
    async with http.post(url, json=body, headers={"Accept": "application/json"}) as response:
        return response.status, json.loads(await response.read())
