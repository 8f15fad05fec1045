"""A local cluster of real processes: the launcher behind ``forum cluster``.

:class:`Cluster` starts the nodes (wired to each other as peers), a Redis for
the Lens when none is given (``redis-server`` with AOF), optionally a
Toxiproxy with one proxy per directed node-to-node link and per
worker-to-Redis link, and ``workers`` workers per node (each one a
:mod:`forum.deploy.processes` service); it stops them all in the reverse order,
workers first, so they hand their jobs back. The chaos tests run on it too.
"""

from __future__ import annotations

import asyncio
import string
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit

import aiohttp

from forum.coordinator.redis_url import RedisTarget
from forum.deploy.demo import SINK_URL_ENV
from forum.deploy.processes import (
    NodeService,
    RedisService,
    ToxiproxyService,
    WorkerService,
    free_port,
)
from forum.deploy.toxiproxy import Proxy, Toxiproxy, link_name
from forum.node.client.remote import ForumClient
from forum.node.core.errors import ClientError
from forum.node.core.resource import AsyncResource
from forum.node.core.space import Pattern


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """What to start. Node ``i`` is named ``node-a``, ``node-b``, ..."""

    nodes: int = 3
    #: Workers per node.
    workers: int = 0
    #: ``"auto"`` starts a Redis; a URL uses that one: any the workers take
    #: (``redis://``, ``redis+sentinel://``, ``redis+cluster://``,
    #: forum.coordinator.redis_url).
    redis: str = "auto"
    #: Put Toxiproxy on every node-to-node and worker-to-Redis link.
    chaos: bool = False
    #: Where data and logs go; ``None``: a temporary directory, removed after.
    root: Path | None = None
    prefix: str = "job/"
    handler: str = "forum.deploy.demo:open_handler"
    concurrency: int = 8
    lease: float = 10.0
    node_args: tuple[str, ...] = ()
    node_env: dict[str, str] = field(default_factory=dict)
    worker_args: tuple[str, ...] = ()
    worker_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= len(string.ascii_lowercase):
            raise ValueError(f"nodes must be 1 to {len(string.ascii_lowercase)}")
        if self.workers < 0:
            raise ValueError("workers must be >= 0")
        if self.redis != "auto":
            try:
                target = RedisTarget.from_url(self.redis)
            except ValueError as exc:
                raise ValueError(
                    "redis must be 'auto' or a redis:// URL (or redis+sentinel://, "
                    f"redis+cluster://): {exc}"
                ) from None
            if self.chaos and target.nodes:
                # A proxy fronts one server; Sentinel and Cluster hand out
                # their servers' own addresses, which no proxy would be on.
                raise ValueError(
                    "--chaos puts a proxy before one Redis server: not with a "
                    "redis+sentinel:// or redis+cluster:// URL"
                )


class Cluster(AsyncResource):
    """The running processes of one local cluster. ``async with Cluster(cfg) as c``."""

    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if cfg.root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="forum-cluster-")
        self.root = cfg.root or Path(self._tmp.name)  # type: ignore[union-attr]
        names = [f"node-{c}" for c in string.ascii_lowercase[: cfg.nodes]]
        self.nodes = [NodeService(name, self.root, env=cfg.node_env) for name in names]
        self.workers: list[WorkerService] = []
        self.redis: RedisService | None = (
            RedisService("redis", self.root) if cfg.redis == "auto" else None
        )
        self.toxiproxy_server = ToxiproxyService("toxiproxy", self.root) if cfg.chaos else None
        self.toxiproxy: Toxiproxy | None = None
        #: ``links[a, b]``: the proxy node ``a`` dials to reach node ``b`` (chaos only).
        self.links: dict[tuple[str, str], Proxy] = {}
        #: ``redis_links[worker]``: the proxy that worker dials to reach Redis (chaos only).
        self.redis_links: dict[str, Proxy] = {}
        self._session: aiohttp.ClientSession | None = None

    @property
    def redis_url(self) -> str:
        return self.redis.url if self.redis is not None else self.cfg.redis

    @property
    def sink_url(self) -> str:
        """The effect sink: database 1 of the same Redis, reached directly (it
        stands for an external system, not for the Lens's link); a Redis
        Cluster has only database 0, where the sink's keys (under their own
        hash tag) sit beside the Lens's."""
        return _other_database(self.redis_url, 1)

    # -- starting and stopping -------------------------------------------------

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        # Order matters for ports: every port is picked free, but only a bound
        # port stays free of others. Toxiproxy picks its proxies' ports itself,
        # so they are made first and the nodes' ports picked after them.
        if self.toxiproxy_server is not None:
            await self.toxiproxy_server.start()
        if self.redis is not None:
            await self.redis.start()
        if self.toxiproxy_server is not None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
            self.toxiproxy = Toxiproxy(self.toxiproxy_server.url, self._session)
            unused = "127.0.0.1:9"  # the discard port, until the nodes' ports are known
            self.links = await self.toxiproxy.links({n.name: unused for n in self.nodes})
            for node in self.nodes:
                node.port = free_port()
            ports = {n.name: n.port for n in self.nodes}
            for (source, target), proxy in self.links.items():
                upstream = f"127.0.0.1:{ports[target]}"
                self.links[source, target] = await self.toxiproxy.set_upstream(proxy.name, upstream)
        for node in self.nodes:
            # --lens-url: the dashboard of every node shows the workers and the Lens.
            node.args = [*self._peer_args(node), "--lens-url", self.redis_url,
                         *self.cfg.node_args]  # fmt: skip
        await asyncio.gather(*(node.start() for node in self.nodes))
        for node in self.nodes:
            for i in range(self.cfg.workers):
                await self.add_worker(node, f"worker-{node.name[-1]}{i + 1}")
        await asyncio.gather(*(w.start() for w in self.workers))

    def _peer_args(self, node: NodeService) -> list[str]:
        args = []
        for other in self.nodes:
            if other is not node:
                url = self.links[node.name, other.name].url if self.links else other.url
                args += ["--peer", url]
        return args

    async def add_worker(self, node: NodeService, name: str) -> WorkerService:
        """Make (not start) a worker on ``node``; with chaos its Redis goes through a proxy."""
        redis_url = self.redis_url
        if self.toxiproxy is not None:
            upstream = redis_url.split("://", 1)[1].split("/", 1)[0]
            proxy = await self.toxiproxy.create(link_name(name, "redis"), upstream)
            self.redis_links[name] = proxy
            redis_url = f"redis://{proxy.listen}/0"
        worker = WorkerService(
            name,
            self.root,
            [
                "--node", node.url,
                "--redis-url", redis_url,
                "--prefix", self.cfg.prefix,
                "--handler", self.cfg.handler,
                "--concurrency", str(self.cfg.concurrency),
                "--lease", str(self.cfg.lease),
                "--owner", name,
                "--no-progress",
                *self.cfg.worker_args,
            ],
        )  # fmt: skip
        worker.env.update({SINK_URL_ENV: self.sink_url, **self.cfg.worker_env})
        self.workers.append(worker)
        return worker

    async def stop(self) -> None:
        """Workers first (they drain and hand jobs back), then nodes, Redis, Toxiproxy."""
        await asyncio.gather(*(w.stop() for w in self.workers))
        await asyncio.gather(*(n.stop() for n in self.nodes))
        if self.redis is not None:
            await self.redis.stop()
        if self.toxiproxy_server is not None:
            await self.toxiproxy_server.stop()
        if self._session is not None:
            await self._session.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await asyncio.shield(self.stop())
            raise
        return self

    async def aclose(self) -> None:
        await self.stop()

    # -- looking at it ---------------------------------------------------------

    def describe(self) -> str:
        lines = [f"cluster in {self.root}"]
        for node in self.nodes:
            lines.append(f"  {node.name:<10} {node.url}   log {node.log_path}")
        if self.nodes:
            # Every node serves the dashboard (docs/dashboard.md); any one shows the cluster.
            lines.append(f"  {'dashboard':<10} {self.nodes[0].url}/ui   (on every node)")
        for worker in self.workers:
            lines.append(f"  {worker.name:<10} metrics http://127.0.0.1:{worker.port}/metrics")
        if self.redis is not None:
            lines.append(f"  {'redis':<10} {self.redis.url} (Lens; effects in db 1)")
        if self.toxiproxy_server is not None:
            lines.append(
                f"  {'toxiproxy':<10} {self.toxiproxy_server.url} ({len(self.links)} links)"
            )
        return "\n".join(lines)

    async def status_line(self) -> str:
        parts = []
        for node in self.nodes:
            try:
                async with ForumClient(node.url, timeout=2) as client:
                    s = await client.status()
                alive = sum(p.state == "alive" for p in s.peers)
                parts.append(
                    f"{node.name}: live={s.live} writes={s.writes} takes={s.takes} "
                    f"double={s.double_takes} peers={alive}/{len(s.peers)}"
                )
            except ClientError:
                parts.append(f"{node.name}: down")
        return " | ".join(parts)

    async def live_counts(self, prefix: bytes = b"") -> list[int | None]:
        """Live tuples matching ``prefix`` on each node (``None`` when it does not answer)."""
        counts: list[int | None] = []
        for node in self.nodes:
            try:
                async with ForumClient(node.url, timeout=5) as client:
                    counts.append(await client.count(Pattern(prefix)))
            except ClientError:
                counts.append(None)
        return counts


def _other_database(url: str, db: int) -> str:
    """``url``'s Redis, database ``db`` (``redis://h:p/1``,
    ``redis+sentinel://h:p/name/1``, ``unix:///path?db=1``); a cluster's own
    URL (it has only database 0)."""
    target = RedisTarget.from_url(url)
    parts = urlsplit(url)
    if target.cluster:
        return url
    if parts.scheme == "unix":  # not geturl(): it drops the empty host's "//"
        return f"{url.partition('?')[0]}?db={db}"
    path = f"/{db}" if target.service is None else f"/{target.service}/{db}"
    return parts._replace(path=path).geturl()
