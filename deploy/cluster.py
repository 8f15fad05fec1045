"""``forum cluster``: a local cluster of real processes, and the demo run on it.

``forum cluster up --nodes 3 [--redis auto|URL] [--workers N] [--chaos]``
starts the nodes (wired to each other as peers), a Redis for the Lens when
none is given (``redis-server`` with AOF), optionally a Toxiproxy with one
proxy per directed node-to-node link and per worker-to-Redis link, and
``--workers`` workers per node; prints where everything is and a status line
until Ctrl-C, then stops it all (workers first, so they hand jobs back).

``forum cluster demo`` does the same, writes ``--jobs`` jobs spread over the
nodes, waits until every job's effect is applied, and prints the history
checker's verdict: nothing lost, nothing unexpected, no effect twice.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import string
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import aiohttp

from deploy.demo import SINK_URL_ENV, WORK_MS_ENV
from deploy.history import History, Verdict
from deploy.processes import (
    NodeService,
    RedisService,
    ToxiproxyService,
    WorkerService,
    free_port,
)
from deploy.sink import EffectSink
from deploy.toxiproxy import Proxy, Toxiproxy, link_name
from node import Pattern
from node.client import ForumClient
from node.errors import ClientError
from node.resource import AsyncResource


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """What to start. Node ``i`` is named ``node-a``, ``node-b``, ..."""

    nodes: int = 3
    #: Workers per node.
    workers: int = 0
    #: ``"auto"`` starts a Redis; a ``redis://`` URL uses that one.
    redis: str = "auto"
    #: Put Toxiproxy on every node-to-node and worker-to-Redis link.
    chaos: bool = False
    #: Where data and logs go; ``None``: a temporary directory, removed after.
    root: Path | None = None
    prefix: str = "job/"
    handler: str = "deploy.demo:open_handler"
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
        if self.redis != "auto" and not self.redis.startswith(("redis://", "rediss://")):
            raise ValueError("redis must be 'auto' or a redis:// URL")


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
        stands for an external system, not for the Lens's link)."""
        return self.redis_url.rsplit("/", 1)[0] + "/1"

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
            node.args = [*self._peer_args(node), *self.cfg.node_args]
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


# -- the demo ------------------------------------------------------------------


async def write_jobs(cluster: Cluster, names: Sequence[str], history: History) -> None:
    """Write the jobs in batches, round-robin over the nodes, recording what was
    acknowledged (a batch that failed may still have landed: not acknowledged)."""
    clients = [ForumClient(node.url, timeout=10) for node in cluster.nodes]
    try:
        for i in range(0, len(names), 100):
            batch = names[i : i + 100]
            client = clients[(i // 100) % len(clients)]
            try:
                await client.write_many([cluster.cfg.prefix.encode() + n.encode() for n in batch])
                acknowledged = True
            except ClientError:
                acknowledged = False
            for name in batch:
                history.wrote(cluster.cfg.prefix + name, acknowledged)
    finally:
        for client in clients:
            await client.aclose()


async def collect(cluster: Cluster, history: History) -> None:
    """Read the effects and deliveries recorded by the sink into ``history``."""
    async with EffectSink.from_url(cluster.sink_url) as sink:
        history.effects = await sink.effects()
        history.reruns = await sink.reruns()
        history.deliveries = await sink.deliveries()


async def wait_until_done(
    cluster: Cluster, history: History, deadline: float, progress: bool = True
) -> None:
    """Until every acknowledged job has its effect, or ``deadline`` seconds pass."""
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    started = time.perf_counter()
    async with EffectSink.from_url(cluster.sink_url) as sink:
        while True:
            effects = await sink.effects()
            done = sum(1 for job in history.acknowledged if effects.get(job))
            if progress:
                rate = done / max(time.perf_counter() - started, 1e-9)
                print(f"\rdone {done}/{len(history.acknowledged)}  {rate:8.0f} jobs/s ",
                      end="", file=sys.stderr, flush=True)  # fmt: skip
            if done >= len(history.acknowledged) or loop.time() > until:
                break
            await asyncio.sleep(0.2)
    if progress:
        print(file=sys.stderr)


async def run_demo(cfg: ClusterConfig, jobs: int, deadline: float) -> Verdict:
    history = History()
    async with Cluster(cfg) as cluster:
        print(cluster.describe(), flush=True)
        started = time.perf_counter()
        names = [f"{i:06d}" for i in range(jobs)]
        await write_jobs(cluster, names, history)
        await wait_until_done(cluster, history, deadline)
        elapsed = time.perf_counter() - started
        await collect(cluster, history)
        print(await cluster.status_line(), flush=True)
        counts = await cluster.live_counts(cfg.prefix.encode())
        print(f"{len(history.acknowledged)} jobs through {cfg.nodes} nodes and "
              f"{len(cluster.workers)} workers in {elapsed:.1f} s; "
              f"live {cfg.prefix!r} left per node: {counts}", flush=True)  # fmt: skip
    verdict = history.check()
    print(verdict.explain(), flush=True)
    return verdict


# -- the command ---------------------------------------------------------------


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``forum cluster up`` and ``forum cluster demo`` to the ``forum`` parser."""
    parser = commands.add_parser(
        "cluster",
        help="run a local cluster of real processes (nodes, Redis, workers)",
        description="Start a local cluster: nodes wired as peers, a Redis for the Lens, "
        "optional Toxiproxy links and workers. Ctrl-C stops everything.",
    )
    actions = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        help="start the cluster and show a live status line until Ctrl-C",
        epilog="example:\n  forum cluster up --nodes 3 --workers 1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo = actions.add_parser(
        "demo",
        help="start a cluster, put jobs through it, and check the history",
        epilog="example:\n  forum cluster demo --jobs 2000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for sub, workers in ((up, 0), (demo, 1)):
        add = sub.add_argument
        add("--nodes", type=int, default=3, help="how many nodes (default 3)")
        add("--workers", type=int, default=workers, help=f"workers per node (default {workers})")
        add("--redis", default="auto", help="'auto' starts a redis-server; or a redis:// URL")
        add("--chaos", action="store_true", help="route links through Toxiproxy")
        add("--root", type=Path, help="where data and logs go (default: a temporary dir)")
        add("--concurrency", type=int, default=8, help="handlers per worker (default 8)")
    up.set_defaults(func=_up)
    demo.add_argument("--jobs", type=int, default=2000, help="jobs to write (default 2000)")
    demo.add_argument("--deadline", type=float, default=120, help="seconds to wait (default 120)")
    demo.add_argument("--work-ms", type=float, default=5, help="each job's work (default 5 ms)")
    demo.set_defaults(func=_demo)


def _config(args: argparse.Namespace, **extra: object) -> ClusterConfig:
    return dataclasses.replace(
        ClusterConfig(),
        nodes=args.nodes,
        workers=args.workers,
        redis=args.redis,
        chaos=args.chaos,
        root=args.root,
        concurrency=args.concurrency,
        **extra,  # type: ignore[arg-type]
    )


async def _up(args: argparse.Namespace) -> int:
    async with _until_signalled() as stopping, Cluster(_config(args)) as cluster:
        print(cluster.describe(), flush=True)
        while not stopping.is_set():
            print(f"\r{await cluster.status_line()}", end="", file=sys.stderr, flush=True)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    await stopping.wait()
        print("\nstopping", file=sys.stderr)
    return 0


async def _demo(args: argparse.Namespace) -> int:
    cfg = _config(args, worker_env={WORK_MS_ENV: str(args.work_ms)})
    verdict = await run_demo(cfg, args.jobs, args.deadline)
    return 0 if verdict.valid else 1


@contextlib.asynccontextmanager
async def _until_signalled() -> AsyncIterator[asyncio.Event]:
    """An event set on SIGINT or SIGTERM, for the length of the block."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    try:
        yield stopping
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
