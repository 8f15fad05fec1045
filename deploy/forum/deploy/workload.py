"""The demo workload: ``forum cluster demo`` and the chaos tests put it through a
:class:`~forum.deploy.cluster.Cluster`.

Jobs named ``000000``, ``000001``, ... are written in batches round-robin over
the nodes (with groups, each to its slot's group through the cluster client);
every worker runs :mod:`forum.deploy.demo`'s handler on them, which records
each delivery and applies each effect in the
:class:`~forum.deploy.sink.EffectSink`; once every acknowledged job has its effect
(or a deadline passed), the history checker judges the run: nothing lost,
nothing unexpected, no effect twice.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from forum.coordinator import LensConfig, LensError
from forum.coordinator.checks import store_check
from forum.deploy.cluster import Cluster, ClusterConfig
from forum.deploy.history import History, Verdict
from forum.deploy.sink import EffectSink
from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import load_map
from forum.node.core.errors import ClientError


async def write_jobs(cluster: Cluster, names: Sequence[str], history: History) -> None:
    """Write the jobs, recording what was acknowledged (a write that failed may
    still have landed: not acknowledged). Without groups, in batches
    round-robin over the nodes; with groups, through the cluster client."""
    if cluster.map_path is not None:
        return await _write_by_slot(cluster, cluster.map_path, names, history)
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


#: Keyed writes the demo keeps in flight at once with groups.
_IN_FLIGHT = 32


async def _write_by_slot(
    cluster: Cluster, map_path: Path, names: Sequence[str], history: History
) -> None:
    """Each job written with its name as its key, so to its slot's group
    (forum.node.client.cluster), as a task's enqueue is: one request a job,
    ``_IN_FLIGHT`` at once (a batch has one key, so one group)."""
    gate = asyncio.Semaphore(_IN_FLIGHT)

    async def write(space: ClusterClient, job: str) -> None:
        async with gate:
            try:
                await space.write(job.encode(), key=job)
                acknowledged = True
            except ClientError:
                acknowledged = False
        history.wrote(job, acknowledged)

    async with ClusterClient(load_map(map_path)) as space:
        await asyncio.gather(*(write(space, cluster.cfg.prefix + n) for n in names))
        if space.misplaced:
            print(f"{space.misplaced} jobs misplaced (their group did not answer)", flush=True)


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


async def settled_counts(
    cluster: Cluster, prefix: bytes, deadline: float = 10.0
) -> list[int | None]:
    """Each node's live ``prefix`` count, once the last acks have landed.

    A job's effect is recorded before its completion and ack (and a worker
    sends its acks with its next reserve, or alone within 50 ms), and each
    ack's Take then replicates: right after the last effect a node may still
    hold a copy. So wait, up to ``deadline`` seconds, for every node to count
    none, and report what is left then.
    """
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    while True:
        counts = await cluster.live_counts(prefix)
        if all(count == 0 for count in counts) or loop.time() > until:
            return counts
        await asyncio.sleep(0.1)


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
        counts = await settled_counts(cluster, cfg.prefix.encode())
        groups = f" in {len(cluster.groups)} groups" if cluster.groups else ""
        print(f"{len(history.acknowledged)} jobs through {len(cluster.nodes)} nodes{groups} and "
              f"{len(cluster.workers)} workers in {elapsed:.1f} s; "
              f"live {cfg.prefix!r} left per node: {counts}", flush=True)  # fmt: skip
        verdict = history.check()
        await keep_verdict(cluster, verdict)
    print(verdict.explain(), flush=True)
    return verdict


async def keep_verdict(cluster: Cluster, verdict: Verdict) -> None:
    """Keep the check's one line in the Lens, where the dashboard's Guarantees
    page reads it (forum.coordinator.checks); a Redis that does not take it costs
    the demo nothing but the line."""
    try:
        await store_check(LensConfig(url=cluster.redis_url), verdict.summary(), verdict.valid)
    except LensError as exc:
        print(f"the verdict was not kept for the dashboard: {exc}", file=sys.stderr)
