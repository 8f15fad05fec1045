"""A local cluster of real processes: the launcher behind ``forum cluster``.

:class:`Cluster` starts the nodes (wired to each other as peers), a Redis for
the Lens when none is given (``redis-server`` with AOF), optionally a
Toxiproxy with one proxy per directed node-to-node link and per
worker-to-Redis link, and ``workers`` workers per node (each one a
:mod:`forum.deploy.processes` service); it stops them all in the reverse order,
workers first, so they hand their jobs back. The chaos tests run on it too.

With ``groups``, the nodes are replica groups placed by a cluster map it
writes in its directory (forum.deploy.groups): each node is started with
``--cluster-map`` and finds its group there by its URL, and Toxiproxy's links
are made inside each group only. :meth:`Cluster.follow_map` takes the
operator's edits of that map (``forum cluster add-group`` / ``retire-group``):
it starts the nodes of a group added and stops those of a group retired.
"""

from __future__ import annotations

import asyncio
import os
import string
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit

import aiohttp

from forum.coordinator.redis_url import RedisTarget
from forum.deploy.demo import SINK_URL_ENV
from forum.deploy.groups import MAP_FILE, first_map, group_id, write_map
from forum.deploy.processes import (
    START_DEADLINE,
    NodeService,
    RedisService,
    ToxiproxyService,
    WorkerService,
    free_port,
    http_ok,
)
from forum.deploy.toxiproxy import Proxy, Toxiproxy, link_name
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import load_map
from forum.node.core.errors import ClientError, ClusterMapError
from forum.node.core.resource import AsyncResource
from forum.node.core.space import Pattern

#: The most groups a local cluster starts (each is ``replicas`` processes).
MAX_GROUPS = 16
#: The most members of a group (a letter each: ``g1-a`` .. ``g1-z``).
MAX_REPLICAS = len(string.ascii_lowercase)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """What to start. Without groups, one group of ``nodes`` peers named
    ``node-a``, ``node-b``, ... and no map; with ``groups`` (>= 1), that many
    replica groups of ``replicas`` nodes each (``g1-a``, ``g1-b``, ...,
    ``g2-a``, ...) placed by a cluster map (forum.deploy.groups)."""

    nodes: int = 3
    #: Replica groups placed by a map; 0: none (one group of ``nodes``, no map).
    groups: int = 0
    #: Each group's members (with ``groups``).
    replicas: int = 3
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
        if not 0 <= self.groups <= MAX_GROUPS:
            raise ValueError(f"groups must be 1 to {MAX_GROUPS}")
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise ValueError(f"replicas must be 1 to {MAX_REPLICAS}")
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


#: With groups, the launcher's pid, in the cluster's directory while it runs:
#: ``forum cluster add-group`` needs a launcher to start the new nodes.
PID_FILE = "cluster.pid"


class Cluster(AsyncResource):
    """The running processes of one local cluster. ``async with Cluster(cfg) as c``."""

    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if cfg.root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="forum-cluster-")
        self.root = cfg.root or Path(self._tmp.name)  # type: ignore[union-attr]
        #: With groups: the map's file, and each group's nodes by group id.
        self.map_path: Path | None = self.root / MAP_FILE if cfg.groups else None
        self.groups: dict[str, list[NodeService]] = {}
        if cfg.groups:
            for n in range(1, cfg.groups + 1):
                gid = group_id(n)
                self.groups[gid] = [self._node(f"{gid}-{c}") for c in _letters(cfg.replicas)]
            self.nodes = [node for members in self.groups.values() for node in members]
        else:
            self.nodes = [self._node(f"node-{c}") for c in _letters(cfg.nodes)]
        self.workers: list[WorkerService] = []
        self._worker_node: dict[WorkerService, str] = {}
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

    def _node(self, name: str, port: int | None = None) -> NodeService:
        return NodeService(name, self.root, env=self.cfg.node_env, port=port)

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
            for members in self._replica_sets():  # links inside a group only
                self.links.update(await self.toxiproxy.links({n.name: unused for n in members}))
            for node in self.nodes:
                node.port = free_port()
            ports = {n.name: n.port for n in self.nodes}
            for (source, target), proxy in self.links.items():
                upstream = f"127.0.0.1:{ports[target]}"
                self.links[source, target] = await self.toxiproxy.set_upstream(proxy.name, upstream)
        if self.map_path is not None:
            write_map(self.map_path, first_map([[n.url for n in g] for g in self.groups.values()]))
            (self.root / PID_FILE).write_text(f"{os.getpid()}\n")
        await self._start_nodes(self.nodes)

    async def _start_nodes(self, nodes: list[NodeService]) -> None:
        """Start ``nodes`` and then their workers."""
        for node in nodes:
            node.args = self._node_args(node)
        await asyncio.gather(*(node.start() for node in nodes))
        workers = [
            await self.add_worker(node, _worker_name(node, i))
            for node in nodes
            for i in range(self.cfg.workers)
        ]
        await asyncio.gather(*(w.start() for w in workers))

    def _node_args(self, node: NodeService) -> list[str]:
        # --lens-url: the dashboard of every node shows the workers and the Lens.
        args = [*self._peer_args(node), "--lens-url", self.redis_url]
        if self.map_path is not None:
            # Its group is the one listing its URL; its peers, the group's
            # other members (unless given: the proxies, with chaos).
            args += ["--cluster-map", str(self.map_path)]
        return [*args, *self.cfg.node_args]

    def _replica_sets(self) -> list[list[NodeService]]:
        """The sets of nodes that replicate among themselves: the groups, or all."""
        return list(self.groups.values()) if self.groups else [self.nodes]

    def _peer_args(self, node: NodeService) -> list[str]:
        if self.map_path is not None and not self.links:
            return []  # the node takes its group's other members from the map
        members = next(m for m in self._replica_sets() if node in m)
        args = []
        for other in members:
            if other is not node:
                url = self.links[node.name, other.name].url if self.links else other.url
                args += ["--peer", url]
        return args

    async def add_worker(self, node: NodeService, name: str) -> WorkerService:
        """Make (not start) a worker on ``node`` (with groups, the node it
        first asks; it is stopped with that node's group); with chaos its
        Redis goes through a proxy."""
        redis_url = self.redis_url
        if self.toxiproxy is not None:
            upstream = redis_url.split("://", 1)[1].split("/", 1)[0]
            proxy = await self.toxiproxy.create(link_name(name, "redis"), upstream)
            self.redis_links[name] = proxy
            redis_url = f"redis://{proxy.listen}/0"
        # With groups, the launcher's map: the worker routes by it (its home
        # group placed by its name, stealing from the others), and takes the
        # operator's edits from the nodes' Forum-Map-Epoch.
        routing = [] if self.map_path is None else ["--cluster-map", str(self.map_path)]
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
                *routing,
                *self.cfg.worker_args,
            ],
        )  # fmt: skip
        worker.env.update({SINK_URL_ENV: self.sink_url, **self.cfg.worker_env})
        self.workers.append(worker)
        self._worker_node[worker] = node.url
        return worker

    async def follow_map(self) -> list[str]:
        """Take the operator's edits of the map (forum.deploy.groups): start the
        nodes (and workers) of a group added to it, stop those of a group
        retired. What was done, a line each; nothing without groups or a change."""
        if self.map_path is None:
            return []
        try:
            cluster = load_map(self.map_path)
        except ClusterMapError as exc:
            return [f"map not taken: {exc}"]
        done = []
        for group in cluster.groups:
            running = self.groups.get(group.id)
            if running is None and group.state != "retired":
                letters = _letters(len(group.members))
                nodes = [
                    self._node(f"{group.id}-{c}", urlsplit(url).port)
                    for c, url in zip(letters, group.members, strict=True)
                ]
                self.groups[group.id] = nodes
                self.nodes += nodes
                if self.toxiproxy is not None:  # its own links, as at start
                    upstreams = {n.name: f"127.0.0.1:{n.port}" for n in nodes}
                    self.links.update(await self.toxiproxy.links(upstreams))
                await self._start_nodes(nodes)
                done.append(f"group {group.id} started: {' '.join(group.members)}")
            elif running and group.state == "retired" and any(n.running for n in running):
                await self._stop_nodes(running)
                self.nodes = [n for n in self.nodes if n not in running]  # not "down"
                done.append(f"group {group.id} retired: its nodes stopped")
        return done

    async def _stop_nodes(self, nodes: list[NodeService]) -> None:
        """Stop ``nodes``' workers (they hand their jobs back), then ``nodes``."""
        urls = {n.url for n in nodes}
        await asyncio.gather(*(w.stop() for w in self.workers if self._worker_node[w] in urls))
        await asyncio.gather(*(n.stop() for n in nodes))

    async def stop(self) -> None:
        """Workers first (they drain and hand jobs back), then nodes, Redis, Toxiproxy."""
        await asyncio.gather(*(w.stop() for w in self.workers))
        await asyncio.gather(*(n.stop() for n in self.nodes))
        if self.map_path is not None:
            (self.root / PID_FILE).unlink(missing_ok=True)
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
        if self.map_path is not None:
            lines.append(
                f"  {'map':<10} {self.map_path}   ({len(self.groups)} groups of "
                f"{self.cfg.replicas}; a client needs it or any node's URL)"
            )
            for gid, members in self.groups.items():
                lines.append(f"  group {gid:<4} {members[0].url}   (connect here for {gid})")
                lines += [f"    {n.name:<8} {n.url}   log {n.log_path}" for n in members]
            lines.append(
                f"  {'groups':<10} forum cluster add-group|drain-group ID|retire-group ID"
                f" --root {self.root}"
            )
        else:
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


def launcher_running(root: Path) -> bool:
    """Whether the launcher of the cluster of groups in ``root`` runs (its pid file
    names a live process)."""
    try:
        pid = int((root / PID_FILE).read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


async def nodes_ready(urls: list[str], deadline: float = START_DEADLINE) -> bool:
    """Whether every node at ``urls`` is ready (``/readyz``) within ``deadline`` s."""
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    pending = list(urls)
    while pending:
        pending = [url for url in pending if not await http_ok(url + "/readyz")]
        if pending and loop.time() > until:
            return False
        await asyncio.sleep(0.1 if pending else 0)
    return True


def _letters(n: int) -> str:
    """The members' letters of a group of ``n``: ``a``, ``b``, ..."""
    return string.ascii_lowercase[:n]


def _worker_name(node: NodeService, i: int) -> str:
    """``worker-a1`` for ``node-a``'s first worker; ``worker-g1a1`` for ``g1-a``'s."""
    return f"worker-{node.name.removeprefix('node-').replace('-', '')}{i + 1}"


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
