"""The chaos runs' common part: a cluster behind Toxiproxy, a randomized
workload, a fault, then heal, drain and judge.

Every run:

1. starts 3 nodes and one worker per node (``forum.deploy.cluster.Cluster`` with
   ``chaos=True``: one Toxiproxy proxy per directed node-to-node link and per
   worker-to-Redis link), with short leases and short replication intervals;
2. runs producers on every node, writing uniquely named jobs at a random
   pace, while the scenario's fault runs beside them;
3. heals (every proxy enabled, every toxic removed, every process running),
   waits until every acknowledged job's effect is applied, and until all
   nodes hold the same live set;
4. checks the history (``forum.deploy.history``): lost = 0, unexpected = 0,
   duplicate effects = 0; prints the verdict, the seed, the double takes the
   nodes counted and the re-offers the workers made.

``CHAOS_SEED=<n>`` replays a run's random choices. The second half of this
module runs the same over replica groups under a cluster map
(:func:`run_group_scenario`, for tests/chaos/test_groups.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import aiohttp

from forum.coordinator import Backoff, Lens, Worker
from forum.deploy.cluster import Cluster, ClusterConfig
from forum.deploy.demo import SINK_URL_ENV, WORK_MS_ENV, open_handler
from forum.deploy.history import History, Verdict
from forum.deploy.processes import NodeService, RedisService, ToxiproxyService
from forum.deploy.sink import EffectSink
from forum.deploy.toxiproxy import Proxy, Toxiproxy, link_name
from forum.deploy.workload import collect
from forum.node.api.status import NodeStatus
from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import ClusterMap, Group, GroupState
from forum.node.core.errors import ClientError
from forum.node.core.space import Pattern

PREFIX = "job/"
#: One line per finished run, printed at the end of the pytest session (see
#: conftest.py), so CI's log shows every scenario's counts and seed.
REPORT: list[str] = []
#: Replication tuned for a quick run: faults are found and healed in seconds.
NODE_ENV = {
    "FORUM_REPL_ANTI_ENTROPY_INTERVAL": "0.3",
    "FORUM_REPL_DEAD_AFTER": "2",
    "FORUM_REPL_CONNECT_TIMEOUT": "0.5",
    "FORUM_REPL_REQUEST_TIMEOUT": "2",
    "FORUM_REPL_ATTEMPTS": "2",
}
WORKER_ARGS = (
    "--take-wait",
    "0.5",
    "--backoff",
    "0.2",
    "--drain-timeout",
    "5",
    "--max-attempts",
    "50",
)
LEASE = 2.0
#: The demo handler's work per job, in milliseconds.
WORK_MS = 20


@dataclass(slots=True)
class Run:
    """One chaos run: its cluster, its random source and what it recorded."""

    cluster: Cluster
    rng: random.Random
    seed: int
    history: History = field(default_factory=History)
    producing: bool = True

    @property
    def toxiproxy(self) -> Toxiproxy:
        assert self.cluster.toxiproxy is not None
        return self.cluster.toxiproxy

    def links_of(self, node: str, *, outgoing: bool = True, incoming: bool = True) -> list[str]:
        """Names of the proxies on ``node``'s links to the other nodes."""
        return [
            proxy.name
            for (source, target), proxy in self.cluster.links.items()
            if (outgoing and source == node) or (incoming and target == node)
        ]

    def node_links(self) -> list[str]:
        return [proxy.name for proxy in self.cluster.links.values()]

    def node(self, name: str) -> NodeService:
        return next(n for n in self.cluster.nodes if n.name == name)

    async def sleep(self, low: float, high: float) -> None:
        await asyncio.sleep(self.rng.uniform(low, high))

    async def toxic(self, proxies: list[str], kind: str, stream: str = "downstream",
                    toxicity: float = 1.0, **attributes: float) -> None:  # fmt: skip
        for proxy in proxies:
            await self.toxiproxy.add_toxic(
                proxy, kind, attributes, stream=stream, toxicity=toxicity,
                name=f"{kind}_{stream}_{self.rng.randrange(1 << 30)}",
            )  # fmt: skip


Fault = Callable[[Run], Coroutine[Any, Any, None]]


async def produce(run: Run, node: NodeService, start: int) -> None:
    """Write jobs to ``node`` at a random pace until the run stops producing."""
    n = start
    async with ForumClient(node.url, timeout=3, connect_timeout=1) as client:
        while run.producing:
            batch = [f"{PREFIX}{node.name}-{n + i:06d}" for i in range(run.rng.randint(1, 8))]
            n += len(batch)
            try:
                await client.write_many([name.encode() for name in batch])
                acknowledged = True
            except ClientError:
                acknowledged = False  # it may have landed: "recovered" if it is done
            for name in batch:
                run.history.wrote(name, acknowledged)
            await run.sleep(0.005, 0.05)


async def beside(
    run: Run | GroupRun,
    producing: list[Coroutine[Any, Any, None]],
    fault: Coroutine[Any, Any, None],
    produce_for: float,
    slack: float,
) -> None:
    """The producers and the fault together: ``produce_for`` seconds of
    writes, then until the fault is over too (``slack`` seconds more at most)."""
    producers = [asyncio.create_task(producer) for producer in producing]
    try:
        async with asyncio.timeout(produce_for + slack):
            faulting = asyncio.create_task(fault)
            await asyncio.sleep(produce_for)
            run.producing = False
            await asyncio.gather(*producers)
            await faulting
    finally:
        run.producing = False
        for task in producers:
            task.cancel()
        await asyncio.gather(*producers, return_exceptions=True)


async def heal(run: Run) -> None:
    """Every proxy enabled, every toxic gone, every process running."""
    await run.toxiproxy.reset()
    for service in [*run.cluster.nodes, *run.cluster.workers]:
        if not service.running:
            await service.start()


async def drain(run: Run, deadline: float = 90.0) -> None:
    """Until every acknowledged job is done and every node holds the same live set."""
    await until_drained(
        run.history,
        lambda: collect(run.cluster, run.history),
        lambda: run.cluster.live_counts(PREFIX.encode()),
        deadline,
    )


async def until_drained(
    history: History,
    collect_effects: Callable[[], Awaitable[None]],
    live_counts: Callable[[], Awaitable[list[int | None]]],
    deadline: float,
) -> None:
    """Until every acknowledged job of ``history`` has its effect (read by
    ``collect_effects``) and every node counts no live job (``live_counts``)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    while True:
        await collect_effects()
        done = {job for job, n in history.effects.items() if n}
        left = history.acknowledged - done
        counts = await live_counts()
        if not left and all(count == 0 for count in counts):
            return
        if loop.time() > until:
            raise AssertionError(
                f"not drained in {deadline} s: {len(left)} jobs not done "
                f"(e.g. {sorted(left)[:5]}), live {PREFIX!r} per node {counts}"
            )
        await asyncio.sleep(0.25)


async def converged(run: Run) -> list[int]:
    """The same live tuples on every node (all of them, not only jobs)."""
    return await same_replicas([node.url for node in run.cluster.nodes])


async def same_replicas(urls: list[str]) -> list[int]:
    """The live sets of the nodes at ``urls`` (all tuples, not only jobs) are
    the same, and so are their vectors, once anti-entropy has had its rounds;
    the live set's size on each."""
    listings = []
    for url in urls:
        ids: dict[str, bytes] = {}
        async with ForumClient(url, timeout=10) as client:
            cursor: int | None = 0
            while cursor is not None:
                page = await client.list(Pattern(b""), cursor=cursor, limit=1000)
                ids.update((str(t.id), t.payload[:60]) for t in page.tuples)
                cursor = page.next_cursor
        listings.append(ids)
    differ = {i: p for listing in listings for i, p in listing.items()
              if not all(i in other for other in listings)}  # fmt: skip
    assert not differ, f"live sets differ on {urls}: {sorted(differ.items())[:5]}"
    # And every node holds (or compacted away) every entry of every origin:
    # the same vectors, once anti-entropy has had its rounds.
    deadline = time.monotonic() + 30
    while True:
        vectors = []
        for url in urls:
            async with ForumClient(url, timeout=10) as client:
                vectors.append((await client.status()).vector)
        if all(vector == vectors[0] for vector in vectors):
            break
        assert time.monotonic() < deadline, f"the nodes' vectors differ: {vectors}"
        await asyncio.sleep(0.2)
    return [len(listing) for listing in listings]


async def worker_counter(run: Run, outcome: str) -> int:
    """The sum over running workers of ``forum_worker_jobs_total{outcome=...}``."""
    total = 0
    pattern = re.compile(rf'forum_worker_jobs_total{{outcome="{outcome}"}} (\S+)')
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for worker in run.cluster.workers:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(f"http://127.0.0.1:{worker.port}/metrics") as r:
                    match = pattern.search(await r.text())
                    total += int(float(match.group(1))) if match else 0
    return total


async def double_takes(run: Run) -> int:
    most = 0
    for node in run.cluster.nodes:
        async with ForumClient(node.url, timeout=5) as client:
            most = max(most, (await client.status()).double_takes)
    return most


@contextlib.asynccontextmanager
async def chaos_cluster(root: Path, node_args: tuple[str, ...] = ()) -> AsyncIterator[Run]:
    seed = int(os.environ.get("CHAOS_SEED", random.randrange(1 << 30)))
    print(f"\nchaos seed={seed} (replay with CHAOS_SEED={seed})")
    cfg = ClusterConfig(
        nodes=3,
        workers=1,
        chaos=True,
        root=root,
        concurrency=4,
        lease=LEASE,
        node_env=NODE_ENV,
        node_args=node_args,
        worker_args=WORKER_ARGS,
        worker_env={WORK_MS_ENV: str(WORK_MS)},
    )
    async with Cluster(cfg) as cluster:
        yield Run(cluster, random.Random(seed), seed)


async def run_scenario(
    root: Path, fault: Fault, *, produce_for: float = 8.0, node_args: tuple[str, ...] = ()
) -> Verdict:
    """The whole run: workload and fault together, then heal, drain, judge
    (``node_args`` go to every ``forum serve``)."""
    async with chaos_cluster(root, node_args) as run:
        started = time.perf_counter()
        producers = [produce(run, node, 0) for node in run.cluster.nodes]
        await beside(run, producers, fault(run), produce_for, 60)
        await heal(run)
        await drain(run)
        sizes = await converged(run)
        verdict = run.history.check()
        line = (
            f"{verdict.summary()} double_takes={await double_takes(run)} "
            f"reoffered={await worker_counter(run, 'reoffered')} "
            f"live_per_node={sizes} seed={run.seed} "
            f"elapsed={time.perf_counter() - started:.1f}s"
        )
        print(line)
        REPORT.append(f"{root.name}: {line}")
        assert verdict.valid, verdict.explain()
        return verdict


# -- replica groups (tests/chaos/test_groups.py) -------------------------------
#
# A scaled-out cluster (docs/scaling.md; docs/chaos.md, "Groups"): replica
# groups of R nodes under one cluster map, each node behind a Toxiproxy proxy
# of its own that every client (producers and workers) reaches it through;
# the map lists those proxies, so a fault between the clients and a group is
# a proxy away. Inside a group the nodes replicate directly. Producers write
# keyed jobs through a ``ClusterClient``; the workers are in-process
# ``forum.coordinator.Worker``s on ``ClusterClient``s with different home
# groups, running the demo handler (its effect sink as above). Every run ends
# as the others do: healed, drained, each group converged, the history checked.

#: Members per group: two replicate as three do, at two thirds of the processes.
GROUP_REPLICAS = 2


@dataclass(slots=True)
class GroupRun:
    """One run over replica groups: its processes, its map, what it recorded."""

    root: Path
    rng: random.Random
    seed: int
    redis: RedisService
    toxiproxy: Toxiproxy
    node_args: tuple[str, ...]
    #: Each group's nodes, by group id, in the map's order.
    groups: dict[str, list[NodeService]] = field(default_factory=dict)
    states: dict[str, GroupState] = field(default_factory=dict)
    #: The proxy each node is reached through by the clients, by node name.
    fronts: dict[str, Proxy] = field(default_factory=dict)
    epoch: int = 1
    history: History = field(default_factory=History)
    producing: bool = True
    #: The producers' and the workers' clients, to read what they counted.
    producers: list[ClusterClient] = field(default_factory=list)
    workers: list[ClusterClient] = field(default_factory=list)

    @property
    def map_path(self) -> Path:
        return self.root / "cluster-map.json"

    @property
    def sink_url(self) -> str:
        return self.redis.url.rsplit("/", 1)[0] + "/1"

    @property
    def nodes(self) -> list[NodeService]:
        return [node for members in self.groups.values() for node in members]

    def cluster_map(self) -> ClusterMap:
        """The map as the run has it now (the file holds the same)."""
        groups = [
            Group(gid, tuple(self.fronts[n.name].url for n in nodes), state=self.states[gid])
            for gid, nodes in self.groups.items()
        ]
        return ClusterMap(self.epoch, tuple(groups))

    def fronts_of(self, gid: str) -> list[str]:
        return [self.fronts[node.name].name for node in self.groups[gid]]

    async def sleep(self, low: float, high: float) -> None:
        await asyncio.sleep(self.rng.uniform(low, high))

    def served_nodes(self) -> list[NodeService]:
        """The nodes of the groups not retired."""
        return [n for gid, nodes in self.groups.items() if self.states[gid] != "retired"
                for n in nodes]  # fmt: skip

    async def make_group(self, gid: str, replicas: int = GROUP_REPLICAS) -> list[NodeService]:
        """A group of ``replicas`` nodes (not started, not in the map yet), each
        behind its own proxy; they replicate among themselves directly."""
        nodes = [NodeService(f"{gid}-{c}", self.root, env=NODE_ENV) for c in "abcdefg"[:replicas]]
        for node in nodes:
            self.fronts[node.name] = await self.toxiproxy.create(
                link_name("clients", node.name), f"127.0.0.1:{node.port}"
            )
            peers = [f"--peer={other.url}" for other in nodes if other is not node]
            node.args = ["--cluster-map", str(self.map_path), "--group", gid, *peers,
                         *self.node_args]  # fmt: skip
        self.groups[gid] = nodes
        self.states[gid] = "active"
        return nodes

    async def add_group(self, gid: str, replicas: int = GROUP_REPLICAS) -> None:
        """A new group, in a new map (epoch + 1), then started."""
        nodes = await self.make_group(gid, replicas)
        self.write_map(self.epoch + 1)
        await asyncio.gather(*(node.start() for node in nodes))

    def set_state(self, gid: str, state: GroupState) -> None:
        """``gid`` in ``state`` in a new map (epoch + 1)."""
        self.states[gid] = state
        self.write_map(self.epoch + 1)

    def write_map(self, epoch: int) -> None:
        """The map at ``epoch``, written whole at once (a rename): the nodes
        take it within their reload interval, the clients from their refresh
        or an answer that names the epoch."""
        self.epoch = epoch
        partial = self.map_path.with_suffix(".part")
        partial.write_text(json.dumps(self.cluster_map().to_document()))
        partial.replace(self.map_path)

    async def until_clients_have(self, epoch: int, deadline: float = 30.0) -> None:
        """Until every worker, and every producer while they produce, routes
        by map ``epoch`` or later (a client takes a newer map as it calls)."""
        until = time.monotonic() + deadline
        while any(
            c.map.epoch < epoch
            for c in [*(self.producers if self.producing else ()), *self.workers]
        ):
            assert time.monotonic() < until, f"the clients did not take map epoch {epoch}"
            await asyncio.sleep(0.1)

    async def group_status(self, gid: str) -> list[NodeStatus]:
        """The status of each of ``gid``'s nodes, asked directly (not through its proxy)."""
        found = []
        for node in self.groups[gid]:
            async with ForumClient(node.url, timeout=10) as client:
                found.append(await client.status())
        return found

    async def live_counts(self) -> list[int | None]:
        """Live and reserved jobs on each node of the served groups (``None``:
        it does not answer). Reserved ones count: a copy of a job done
        elsewhere may be parked by a worker (reserved), and is live again
        when the worker lets it go."""
        counts: list[int | None] = []
        for node in self.served_nodes():
            try:
                async with ForumClient(node.url, timeout=5) as client:
                    live = await client.count(Pattern(PREFIX.encode()))
                    counts.append(live + (await client.status()).reserved)
            except ClientError:
                counts.append(None)
        return counts

    async def collect(self) -> None:
        """Read the effects and deliveries the sink recorded into the history."""
        async with EffectSink.from_url(self.sink_url) as sink:
            self.history.effects = await sink.effects()
            self.history.reruns = await sink.reruns()
            self.history.deliveries = await sink.deliveries()


GroupFault = Callable[[GroupRun], Coroutine[Any, Any, None]]


def homed(cluster: ClusterMap, gid: str, name: str) -> str:
    """A client id whose home group in ``cluster`` is ``gid`` (a client's
    home follows from its id alone; making one opens nothing)."""
    n = 0
    while ClusterClient(cluster, client_id=f"{name}-{n}").home != (gid,):
        n += 1
    return f"{name}-{n}"


async def produce_keyed(run: GroupRun, tag: str, *spaces: ClusterClient) -> None:
    """Write keyed jobs (the key is the job's name) one at a time, at a random
    pace, until the run stops producing; each job through every one of
    ``spaces`` in turn (acknowledged when one of them was)."""
    n = 0
    while run.producing:
        name = f"{PREFIX}{tag}-{n:06d}"
        n += 1
        acknowledged = False
        for space in spaces:
            try:
                await space.write(name.encode(), key=name)
                acknowledged = True
            except ClientError:
                pass  # it may have landed: "recovered" if it is done
        run.history.wrote(name, acknowledged)
        await run.sleep(0.005, 0.03)


@contextlib.asynccontextmanager
async def group_workers(run: GroupRun, homes: tuple[str, ...]) -> AsyncIterator[None]:
    """One in-process worker at home in each group of ``homes``, for the block;
    stopped (drained) after it."""
    cluster = run.cluster_map()
    env = {SINK_URL_ENV: run.sink_url, WORK_MS_ENV: str(WORK_MS)}
    async with contextlib.AsyncExitStack() as stack:
        # The demo handler takes its sink and its work time from the environment.
        stack.enter_context(mock.patch.dict(os.environ, env))
        handler = await stack.enter_async_context(open_handler())
        workers = []
        for gid in homes:
            owner = homed(cluster, gid, f"worker-{gid}")
            space = await stack.enter_async_context(
                ClusterClient(cluster, client_id=owner, map_refresh=1.0)
            )
            lens = await stack.enter_async_context(Lens.from_url(run.redis.url))
            run.workers.append(space)
            workers.append(Worker(
                space, lens, Pattern(PREFIX.encode()), handler, concurrency=4, lease=LEASE,
                take_wait=0.5, backoff=Backoff(base=0.2, cap=1.0), max_attempts=50,
                drain_timeout=5, owner=owner, seed=run.rng.randrange(1 << 30),
            ))  # fmt: skip
        tasks = [asyncio.create_task(w.run(), name=w.owner) for w in workers]
        try:
            yield
        finally:
            for worker in workers:
                worker.stop()
            await asyncio.gather(*tasks)


@contextlib.asynccontextmanager
async def chaos_groups(
    root: Path, groups: int, replicas: int, node_args: tuple[str, ...]
) -> AsyncIterator[GroupRun]:
    """Toxiproxy, a Redis (the Lens in database 0, the sink in 1) and
    ``groups`` groups ``g1``.. of ``replicas`` nodes under a map of epoch 1,
    all running for the block (``node_args`` go to every ``forum serve``)."""
    seed = int(os.environ.get("CHAOS_SEED", random.randrange(1 << 30)))
    print(f"\nchaos seed={seed} (replay with CHAOS_SEED={seed})")
    redis = RedisService("redis", root)
    proxy_server = ToxiproxyService("toxiproxy", root)
    async with contextlib.AsyncExitStack() as stack:
        for service in (proxy_server, redis):
            await service.start()
            stack.push_async_callback(service.stop)
        session = await stack.enter_async_context(aiohttp.ClientSession())
        run = GroupRun(
            root, random.Random(seed), seed, redis,
            Toxiproxy(proxy_server.url, session), node_args,
        )  # fmt: skip
        stack.push_async_callback(lambda: asyncio.gather(*(n.stop() for n in run.nodes)))
        for n in range(groups):
            await run.make_group(f"g{n + 1}", replicas)
        run.write_map(1)
        await asyncio.gather(*(node.start() for node in run.nodes))
        yield run


async def run_group_scenario(
    root: Path,
    fault: GroupFault,
    *,
    groups: int = 3,
    replicas: int = GROUP_REPLICAS,
    homes: tuple[str, ...] = ("g1", "g2", "g3"),
    produce_for: float = 6.0,
    node_args: tuple[str, ...] = (),
    prepare: GroupFault | None = None,
    after: GroupFault | None = None,
) -> GroupRun:
    """The whole run over groups: ``prepare``, then two keyed producers and
    the workers at ``homes``, the fault beside them; then heal, drain, check
    each served group converged, ``after`` (every node still up), and judge
    the history."""
    async with chaos_groups(root, groups, replicas, node_args) as run:
        started = time.perf_counter()
        if prepare is not None:
            await prepare(run)
        async with contextlib.AsyncExitStack() as stack:
            for n in range(2):
                space = ClusterClient(run.cluster_map(), client_id=f"producer-{n}")
                run.producers.append(await stack.enter_async_context(space))
            async with group_workers(run, homes):
                producers = [produce_keyed(run, f"p{n}", p) for n, p in enumerate(run.producers)]
                await beside(run, producers, fault(run), produce_for, 90)
                await run.toxiproxy.reset()
                for node in run.served_nodes():
                    if not node.running:
                        await node.start()
                await until_drained(run.history, run.collect, run.live_counts, 90.0)
                # With the workers still running, as the single cluster's runs.
                live = {
                    gid: await same_replicas([node.url for node in nodes])
                    for gid, nodes in run.groups.items()
                    if run.states[gid] != "retired"
                }
                if after is not None:
                    await after(run)
        await run.collect()  # and what the workers did as they stopped
        verdict = run.history.check()
        line = (
            f"{verdict.summary()} misplaced={sum(p.misplaced for p in run.producers)} "
            f"live_per_group={live} epoch={run.epoch} seed={run.seed} "
            f"elapsed={time.perf_counter() - started:.1f}s"
        )
        print(line)
        REPORT.append(f"{root.name}: {line}")
        assert verdict.valid, verdict.explain()
        return run
