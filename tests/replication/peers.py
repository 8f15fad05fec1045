"""Replicating nodes in one process, reachable over either peer transport.

``Nodes("memory", ...)`` puts them on a :class:`MemoryNetwork` (no sockets);
``Nodes("http", ...)`` serves each with the real replication routes on a
loopback port and calls them with :class:`HttpTransport`. Each node is a real
Forum (its Strand in a temporary directory) and a running Replicator.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from forum.node.config.node import FORGET_AFTER
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from forum.replication.auth import ClusterAuth
from forum.replication.clocks import ClockSamples
from forum.replication.config import ReplicationConfig
from forum.replication.memory import MemoryNetwork, MemoryTransport
from forum.replication.messages import Member
from forum.replication.metrics import ReplicationMetrics
from forum.replication.replicator import Replicator
from forum.replication.routes import REPLICATION, Replication, add_routes
from forum.replication.transport import HttpTransport, SignedTransport
from tests.fixtures.nodes import free_port

SECRET = "s3cret"
CONFIG = ReplicationConfig(attempts=2, backoff_base=0.01, backoff_max=0.02, request_timeout=5)


@dataclass(frozen=True, slots=True)
class Node:
    replicator: Replicator

    @property
    def forum(self) -> Forum:
        return self.replicator.forum

    @property
    def me(self) -> Member:
        return self.replicator.me

    @property
    def url(self) -> str:
        assert self.me.url is not None
        return self.me.url


class Nodes:
    """Makes nodes reachable over one kind of transport; closes them at the end."""

    def __init__(
        self,
        kind: str,
        root: Path,
        stack: AsyncExitStack,
        config: ReplicationConfig = CONFIG,
        *,
        forget_after: float = FORGET_AFTER,
    ) -> None:
        self.kind = kind
        self.forget_after = forget_after
        self.network = MemoryNetwork()
        self._root = root
        self._stack = stack
        self._config = config
        self._ports: dict[str, int] = {}

    def url(self, name: str) -> str:
        """The URL the node called ``name`` answers at (once made)."""
        if self.kind == "memory":
            return f"http://{name}.memory:1"
        return f"http://127.0.0.1:{self._ports.setdefault(name, free_port())}"

    async def transport(
        self,
        key: str | None = SECRET,
        caller: str | None = None,
        clocks: ClockSamples | None = None,
    ) -> SignedTransport:
        """A transport calling with ``key`` (from the node at ``caller``, in
        memory), telling ``clocks`` the answers' clock samples."""
        auth = ClusterAuth(key)
        if self.kind == "memory":
            return await self._stack.enter_async_context(
                MemoryTransport(self.network, auth, self._config, caller=caller, clocks=clocks)
            )
        return await self._stack.enter_async_context(HttpTransport(auth, self._config, clocks))

    async def node(
        self,
        name: str,
        key: str | None = SECRET,
        *,
        running: bool = True,
        seeds: Sequence[str] = (),
    ) -> Node:
        """A node answering at :meth:`url`, replicating with ``seeds`` (names of
        other nodes); ``running=False``: its replication is not (503)."""
        cfg = StrandConfig().with_storage(self._root / name).with_node_name(name)
        forum = await self._stack.enter_async_context(
            Forum(await Strand.open(cfg.with_fsync("never")), remote_delay=0)
        )
        url = self.url(name)
        replicator = Replicator(
            forum=forum,
            me=Member(forum.strand.origin, url),
            seeds=[self.url(seed) for seed in seeds],
            transport=await self.transport(key, caller=url),
            metrics=ReplicationMetrics(CollectorRegistry()),
            config=self._config,
            forget_after=self.forget_after,
        )
        await self._stack.enter_async_context(replicator)
        replication = Replication(replicator, ClusterAuth(key)) if running else None
        if self.kind == "memory":
            self.network.attach(url, replication)
        else:
            app = web.Application()
            add_routes(app)
            if replication is not None:
                app[REPLICATION] = replication
            runner = web.AppRunner(app, shutdown_timeout=0.1)
            await runner.setup()
            self._stack.push_async_callback(runner.cleanup)
            await web.TCPSite(runner, "127.0.0.1", self._ports[name]).start()
        return Node(replicator)

    def nowhere(self) -> str:
        """A URL nothing answers at."""
        if self.kind == "memory":
            return "http://nobody.memory:1"
        return f"http://127.0.0.1:{free_port()}"
