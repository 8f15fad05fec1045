"""A node started with a cluster map: its group, its peers, the map it serves."""

from __future__ import annotations

from collections.abc import Awaitable

import aiohttp
import pytest

from forum import Pattern
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import ClusterMap
from tests.fixtures.nodes import ForumNodes, eventually

pytestmark = pytest.mark.slow


async def test_nodes_of_a_map_serve_it_name_their_group_and_replicate_only_inside_it(
    forum_nodes: ForumNodes,
) -> None:
    forum_nodes.root.mkdir(parents=True, exist_ok=True)
    path = forum_nodes.root / "map.toml"
    nodes = [
        forum_nodes.make(f"n{i}", "--cluster-map", str(path), "--cluster-secret", "s")
        for i in range(3)
    ]
    urls = [f"http://127.0.0.1:{node.port}" for node in nodes]
    path.write_text(
        'epoch = 4\n[[groups]]\nid = "g1"\n'
        f'members = ["{urls[0]}", "{urls[1]}"]\n'
        f'[[groups]]\nid = "g2"\nmembers = ["{urls[2]}"]\n'
    )
    await forum_nodes.start_all()
    async with ForumClient(urls[0]) as a, ForumClient(urls[1]) as b, ForumClient(urls[2]) as c:
        statuses = [await x.status() for x in (a, b, c)]
        assert [(s.group, s.map_epoch) for s in statuses] == [("g1", 4), ("g1", 4), ("g2", 4)]
        assert [p.url for p in statuses[0].peers] == [urls[1]]  # its group's other member
        assert statuses[2].peers == ()
        await a.write(b"job/1")
        await eventually(lambda: b.count(Pattern(b"job/")))  # a count of 1 is truthy
        assert await c.count(Pattern(b"job/")) == 0  # nothing between groups

    async with aiohttp.ClientSession() as http, http.get(f"{urls[2]}/v1/map") as answer:
        assert answer.headers["Forum-Map-Epoch"] == "4"
        served = await answer.json()
    assert served["group"] == "g2"
    cluster = ClusterMap.from_document(
        {k: v for k, v in served.items() if k not in ("signature", "group")}
    )
    assert served["signature"] == cluster.signature("s")

    # A newer map written to the file is taken; an older one is not.
    path.write_text(path.read_text().replace("epoch = 4", "epoch = 5"))

    async def epoch() -> str:
        async with aiohttp.ClientSession() as http, http.get(f"{urls[0]}/healthz") as answer:
            return answer.headers["Forum-Map-Epoch"]

    await eventually(lambda: _is(epoch(), "5"))
    path.write_text(path.read_text().replace("epoch = 5", "epoch = 3"))
    await eventually(lambda: "not above this node's 5" in nodes[0].log_text())
    assert await epoch() == "5"


async def _is(value: Awaitable[str], expected: str) -> bool:
    return await value == expected


async def test_a_node_without_a_map_answers_404_for_it(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("solo")
    async with aiohttp.ClientSession() as http, http.get(f"{node.url}/v1/map") as answer:
        assert answer.status == 404
        assert (await answer.json())["error"] == "no_cluster_map"
        assert "Forum-Map-Epoch" not in answer.headers
