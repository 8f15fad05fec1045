"""The seam replication plugs into: an extension adds routes, startup work,
peers in status and metrics in the app's own registry."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import Counter

from forum.node.api.status import PeerStatus
from forum.node.config.node import NodeConfig
from forum.node.http.app import CLUSTER_PREFIX, build_app
from forum.node.http.keys import CONFIG, FORUM, METRICS_REGISTRY, PEERS
from forum.node.space.forum import Forum
from tests.fixtures.nodes import free_port

PEER_B = PeerStatus(
    url="http://peer-b:7070",
    advertised=None,
    origin=None,
    seed=True,
    state="suspect",
    last_contact=None,
    last_contact_age=None,
    failures=1,
    last_error="refused",
    behind=None,
    queued=0,
)


def replication_like(app: web.Application) -> None:
    pushes = Counter("forum_test_pushes", "Pushes seen.", registry=app[METRICS_REGISTRY])
    started: list[str] = []

    async def push(request: web.Request) -> web.Response:
        pushes.inc()
        forum = request.app[FORUM]
        return web.json_response({"origin": forum.strand.origin, "started": started})

    async def running(app: web.Application) -> AsyncIterator[None]:
        started.append(app[CONFIG].advertise_url())
        yield

    app.router.add_post(CLUSTER_PREFIX + "push", push)
    app.cleanup_ctx.append(running)
    app[PEERS] = lambda: [PEER_B]


async def test_an_extension_adds_routes_peers_and_metrics(local_forum: Forum) -> None:
    port = free_port()
    config = NodeConfig(listen=f"127.0.0.1:{port}", token="t", cluster_secret="c")
    runner = web.AppRunner(build_app(local_forum, config, [replication_like]))
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/v1/cluster/push") as response:
                assert response.status == 401
            cluster = {"Authorization": "Bearer c"}
            async with http.post(f"{url}/v1/cluster/push", headers=cluster) as response:
                document: dict[str, Any] = await response.json()
            assert document == {"origin": local_forum.strand.origin, "started": [url]}
            client = {"Authorization": "Bearer t"}
            async with http.get(f"{url}/v1/status", headers=client) as response:
                peers = (await response.json())["peers"]
            assert peers == [dataclasses.asdict(PEER_B)]
            async with http.get(f"{url}/metrics", headers=client) as response:
                assert "forum_test_pushes_total 1.0" in await response.text()
    finally:
        await runner.cleanup()
