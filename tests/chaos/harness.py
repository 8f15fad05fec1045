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

``CHAOS_SEED=<n>`` replays a run's random choices.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from forum.deploy.cluster import Cluster, ClusterConfig
from forum.deploy.demo import WORK_MS_ENV
from forum.deploy.history import History, Verdict
from forum.deploy.processes import NodeService
from forum.deploy.toxiproxy import Toxiproxy
from forum.deploy.workload import collect
from forum.node.client.remote import ForumClient
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


Fault = Callable[[Run], Awaitable[None]]


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


async def heal(run: Run) -> None:
    """Every proxy enabled, every toxic gone, every process running."""
    await run.toxiproxy.reset()
    for service in [*run.cluster.nodes, *run.cluster.workers]:
        if not service.running:
            await service.start()


async def drain(run: Run, deadline: float = 90.0) -> None:
    """Until every acknowledged job is done and every node holds the same live set."""
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    while True:
        await collect(run.cluster, run.history)
        done = {job for job, n in run.history.effects.items() if n}
        left = run.history.acknowledged - done
        counts = await run.cluster.live_counts(PREFIX.encode())
        if not left and len(set(counts)) == 1 and counts[0] == 0:
            return
        if loop.time() > until:
            raise AssertionError(
                f"not drained in {deadline} s: {len(left)} jobs not done "
                f"(e.g. {sorted(left)[:5]}), live {PREFIX!r} per node {counts}"
            )
        await asyncio.sleep(0.25)


async def converged(run: Run) -> list[int]:
    """The same live tuples on every node (all of them, not only jobs)."""
    listings = []
    for node in run.cluster.nodes:
        ids: list[str] = []
        async with ForumClient(node.url, timeout=10) as client:
            cursor: int | None = 0
            while cursor is not None:
                page = await client.list(Pattern(b""), cursor=cursor, limit=1000)
                ids.extend(str(t.id) for t in page.tuples)
                cursor = page.next_cursor
        listings.append(sorted(ids))
    assert all(listing == listings[0] for listing in listings), "live sets differ"
    # And every node holds (or compacted away) every entry of every origin:
    # the same vectors, once anti-entropy has had its rounds.
    deadline = time.monotonic() + 30
    while True:
        vectors = []
        for node in run.cluster.nodes:
            async with ForumClient(node.url, timeout=10) as client:
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
        worker_env={WORK_MS_ENV: "20"},
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
        producers = [asyncio.create_task(produce(run, node, 0)) for node in run.cluster.nodes]
        try:
            async with asyncio.timeout(produce_for + 60):
                faulting = asyncio.create_task(fault(run))
                await asyncio.sleep(produce_for)
                run.producing = False
                await asyncio.gather(*producers)
                await faulting
        finally:
            run.producing = False
            for task in producers:
                task.cancel()
            await asyncio.gather(*producers, return_exceptions=True)
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
