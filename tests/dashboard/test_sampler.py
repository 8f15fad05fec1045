"""The dashboard's sampler in a real node app (in process, real HTTP between
two apps): peers are asked only while someone looks, their samples fill the
ring, and shutting the app down leaves no task behind."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web

from forum.dashboard import dashboard
from forum.dashboard.pages import SAMPLER
from forum.node.api.status import PeerStatus
from forum.node.config.node import NodeConfig
from forum.node.http.app import build_app
from forum.node.http.keys import PEERS
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import eventually, free_port

INTERVAL = 0.05


@contextlib.asynccontextmanager
async def running_app(
    tmp: Path, name: str, extensions: list[object]
) -> AsyncIterator[tuple[web.Application, str]]:
    port = free_port()
    cfg = StrandConfig().with_storage(tmp / name).with_node_name(name)
    async with Forum(await Strand.open(cfg)) as forum:
        config = NodeConfig(listen=f"127.0.0.1:{port}")
        app = build_app(forum, config, extensions)  # type: ignore[arg-type]
        runner = web.AppRunner(app)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", port).start()
            yield app, f"http://127.0.0.1:{port}"
        finally:
            await runner.cleanup()


def peer(url: str) -> PeerStatus:
    return PeerStatus(
        url=url, advertised=None, origin=None, seed=True, state="alive", last_contact=None,
        last_contact_age=None, failures=0, last_error=None, behind=0, queued=0,
    )  # fmt: skip


async def test_peers_are_sampled_while_someone_looks_and_nothing_is_left(tmp_path: Path) -> None:
    async with running_app(tmp_path, "b", []) as (_, b_url):

        def with_peer(app: web.Application) -> None:
            app[PEERS] = lambda: [peer(b_url)]

        tasks_before = asyncio.all_tasks()
        async with running_app(tmp_path, "a", [with_peer, dashboard(INTERVAL)]) as (a, a_url):
            sampler = a[SAMPLER]

            def samples(url: str) -> int:
                history = sampler.histories.get(url)
                return 0 if history is None else len(history.samples)

            await eventually(lambda: samples(a_url) >= 3, what="samples")
            assert b_url not in sampler.histories  # nobody looked: no call to the peer
            async with aiohttp.ClientSession() as http, http.get(f"{a_url}/ui") as answer:
                assert answer.status == 200
            await eventually(lambda: samples(b_url) >= 2, what="the peer sampled")
            history = sampler.histories[b_url]
            assert history.error is None
            assert history.latest is not None and history.latest.node_id == "b"
        # The app's cleanup ended the sampler's loop and closed its session.
        assert asyncio.all_tasks() - tasks_before == set()
