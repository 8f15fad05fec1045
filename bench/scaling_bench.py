"""Scaling with nodes: does adding nodes waste work? A live producer, N nodes, a worker each.

Usage: ``.venv/bin/python bench/scaling_bench.py [--nodes 2,3,5,7]
[--work-ms 10,100,1000] [--jobs 300,150,40] [--producer-rate 150,60,12]
[--producer-batch 30] [--kill-one | --pause-one] [--variants pool,main]
[--main-tree DIR | --main-ref REF] [--rounds 1] [--idle 0] [--out PATH]``;
scaled out: ``[--groups 1,2,3 [--replicas 3] [--mesh 3,5,7,9] [--load-per-group]
[--home-only] [--plot PATH | --no-plot]]`` (below).

Each run is a fresh :class:`forum.deploy.cluster.Cluster`: N nodes peered in
a mesh, one ``forum worker`` per node (8 slots, the demo handler
:mod:`forum.deploy.demo`, ``--work-ms`` of work per job), a Redis for the
Lens. A producer writes the jobs *while the workers run*: batches of
``--producer-batch`` (``write_many``) round robin over the nodes, paced at
``--producer-rate`` jobs/s, as an application's producers do; the run ends
when every job has its effect. (Until issue 29 this bench wrote every job
first, in batches of 100, and only then did the workers find them: a
backlog, where each node had its own tuples to hand out and copies of the
others' that it held back. A live producer is the case the issue measured,
17-20 % of jobs reserved on two nodes at 3 nodes, 100 ms jobs, batches of
30: a new tuple is wanted at once, on every node whose worker has a free
slot.) The history checker must pass (nothing lost, no effect twice).

``--work-ms``, ``--jobs`` and ``--producer-rate`` are lists of one value per
job length (or one value for all); by default 300 jobs at 150/s for jobs
of up to 10 ms, 150 at 60/s up to 100 ms, 40 at 12/s for longer ones: each
run a few seconds. The rate is below what the smallest cluster serves (2
nodes x 8 slots: 16 jobs/s of 1 s), so the workers keep up and the jobs are
new when they are taken.

Measured, per run (medians over ``--rounds``):

jobs/s         jobs over the time from the first write to the last effect
               (the producer's pace bounds it)
takes/job      the nodes' ``takes`` (their ``/v1/status``), summed, over the
               jobs: 1.0 when every job is taken once; each copy a node hands
               out after the job was done elsewhere adds one (the Lens turns
               it away, the worker acks it)
double/job     the nodes' ``double_takes``, summed, over the jobs: tuples
               reserved (or taken) on two nodes, copies the Lens caught
               (issue 29's target: <= 0.01). A node counts every Take of a
               tuple after its first, and one that ends a reservation of its
               own, so the sum over the nodes is about N times the extra
               hand-outs: the per-node counts, kept in the JSON, come out
               near equal
cpu ms/job     CPU time (user + system, ``/proc/<pid>/stat``) of every node and
               worker process from the first write to the last effect, over
               the jobs; ``node ms`` of it the nodes', ``worker ms`` the
               workers'; Redis's separately
idle ms/s      before the jobs, the nodes' CPU per second of an idle cluster
               (``--idle`` seconds of it; 0, the default, skips it)

``--kill-one`` adds, per run: ``--down-after-ms`` (20) after the producer's
batch that reaches half the jobs, the node it went to is SIGKILLed (its
worker keeps running, its node gone); the producer writes to the others from
then on. Its jobs are those the producer wrote to it that had no effect then
(``victim jobs``, in the JSON). ``down->served s`` is the time from the kill
until the last of them has its effect, served by another node (or by its own
worker, if it held the job already; ``-`` when none was left to serve);
``stranded`` counts those still without an effect ``--down-wait`` (30)
seconds after the kill (a job the node made durable and died before pushing
is held by it alone: only its return serves it). The node is then started
again on its data, so every job is done and the checker judges the whole
run. In this mode the CPU figures are not measured (a killed process's CPU
is gone with it), jobs/s counts the wait for the node's jobs, and the killed
node's ``takes`` and ``double_takes`` count from its restart only.

``--pause-one`` is the same with SIGSTOP, and SIGCONT at the end: the node
hangs, its connections open and nothing answered, as a partitioned node
looks to the others (a killed one refuses connections at once). A partition
proper (``tests/chaos``, Toxiproxy) leaves the node its own worker, which
serves its jobs as fast as ever, so the time they take elsewhere would need
that worker stopped too: the pause measures the others' side of it.

The variants are settings of this code, and one other tree:

slots          the old stagger: a remote tuple waits 1 to 4 remote delays by
               a hash (``FORUM_REPL_RANKING=slots``), live at its slot
               (``FORUM_REMOTE_HOLD=0``)
rank           the rank among the live members (:mod:`forum.replication.ranking`),
               live at its turn (``FORUM_REMOTE_HOLD=0``)
pool           the defaults: the rank, and a turn no taker wanted puts the
               tuple in the node's pool, held (``remote_hold``, 2 s) then
               aired, taken in the node's rank order (``forum.node.space.surfacing``);
               a tuple whose writer is alive is handed out by it alone,
               lent to the others that ask (``forum.node.space.lending``)
unlent         the defaults without lending (``FORUM_REPL_LENDING=false``):
               each node hands out the copies it holds, at their turns
main           the code in ``--main-tree DIR`` (a checkout or ``git -C /work/main
               archive HEAD | tar -x -C DIR``), or of ``--main-ref REF`` (a
               commit of this repository, unpacked by :func:`trees.export`),
               at its defaults: its nodes and workers run with ``PYTHONPATH``
               on that tree (:func:`trees.pythonpath`)

Each (nodes, job length, variant) runs once per round; the variants
alternate within a round (their order reversed every other round), so all
see the same machine. Prints a table; writes bench/results/scaling_bench.json.

Targets: issue 29, double/job <= 0.01 at 2, 3, 5 and 7 nodes with 10 ms,
100 ms and 1 s jobs, and no change to down->served; issue 13, takes/job <=
1.02 and cpu ms/job flat from 3 to 7 nodes.

``--groups G,..`` (issue 30): the same, scaled out. Each run is G replica
groups of ``--replicas`` R nodes under one cluster map
(:class:`groups.GroupedCluster`: no node peers outside its group), a worker
beside each node (bench/cluster_worker.py: a coordinator ``Worker`` on a
``ClusterClient`` whose client id homes it on its node's group, stealing
from the other groups in turn, no directory), and R producer ``ClusterClient``s writing each job
once, keyed with its name, to its slot's group (:class:`KeyedProducer`),
at one fixed offered load (one ``--work-ms``, default 10 ms; 3000 jobs at
150/s). ``--mesh N,..`` adds one group of N: the full mesh of today, the
same code. Each shape runs once a round, their order reversed every other
round; medians. Beside the figures above (``cpu ms/job`` split in
``node ms/job`` and ``all ms/job``: nodes, workers, Redis and this
process, the producer), per run:

strand B/job   bytes appended to every node's Strand (``strand_bytes`` plus
               ``bytes_reclaimed``: before compaction) over the run, per job
copies         that over one job's bytes in one Strand, measured on a node
               of its own first (:func:`groups.one_copy_bytes`): R when each
               member holds each of its group's jobs once and nothing else
misplaced      writes that went to a group other than their slot's
req/job        requests the nodes were sent (``streams_requests``) per job

and the targets of issue 30, each shape of R against ``1xR``: node ms/job
<= 1.1x; idle <= 1.1 x G x ``1xR``'s; copies <= 1.05 x R; takes/job <=
1.03. ``--load-per-group`` offers G times the jobs and the rate (each
node as busy at every G); ``--home-only`` gives each worker its home group
alone (it never steals). Writes bench/results/scaling_groups_bench.json and
a plot beside it (matplotlib: .venv-bench, scripts/bench-env).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal

from groups import GroupedCluster, one_copy_bytes
from trees import named_in, other_tree, pythonpath

from forum.deploy.cluster import Cluster, ClusterConfig
from forum.deploy.demo import WORK_MS_ENV
from forum.deploy.history import History
from forum.deploy.processes import NodeService, Service
from forum.deploy.sink import EffectSink
from forum.deploy.workload import collect, wait_until_done
from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.core.errors import ClientError

ROOT = Path(__file__).resolve().parent.parent
#: The node environment of each variant (see above); ``main``'s is made from its tree.
VARIANTS = {
    "slots": {"FORUM_REPL_RANKING": "slots", "FORUM_REMOTE_HOLD": "0"},
    "rank": {"FORUM_REPL_RANKING": "members", "FORUM_REMOTE_HOLD": "0"},
    "pool": {},
    "unlent": {"FORUM_REPL_LENDING": "false"},
    "main": {},
}
_TICK = os.sysconf("SC_CLK_TCK")
#: After the last effect, how long the nodes may take to settle (acks land,
#: parked copies are killed by the Takes that follow them).
_SETTLE = 30.0
#: Between two looks at the effects, in ``--kill-one`` and ``--pause-one``.
_POLL = 0.05


@dataclass(frozen=True, slots=True)
class Load:
    """One job length's run: ``jobs`` jobs of ``work_ms`` each, written at
    ``rate`` jobs/s in batches of ``batch``."""

    work_ms: float
    jobs: int
    rate: float
    batch: int


@dataclass(frozen=True, slots=True)
class DownPlan:
    """``--kill-one`` (``how="kill"``) or ``--pause-one`` (``"pause"``): the
    node taken down ``after_s`` after the batch that reaches half the jobs,
    and how long its jobs are waited for (``wait_s``)."""

    how: Literal["kill", "pause"]
    after_s: float
    wait_s: float


@dataclass(frozen=True, slots=True)
class Down:
    """What ``--kill-one`` or ``--pause-one`` saw: the node's jobs without an
    effect when it went down, how long until the last of them had one
    (``None``: some never did within the wait), and how many had none then."""

    victim_jobs: int
    served_s: float | None
    stranded: int


@dataclass(frozen=True, slots=True)
class Run:
    nodes: int
    variant: str
    work_ms: float
    jobs: int
    seconds: float
    takes: int
    #: Each node's ``double_takes`` (node-a first).
    double_takes_by_node: tuple[int, ...]
    valid: bool
    #: CPU seconds over the run (``None`` with a node taken down).
    node_cpu_s: float | None
    worker_cpu_s: float | None
    redis_cpu_s: float | None
    idle_node_cpu_s_per_s: float | None = None
    down: Down | None = None

    @property
    def takes_per_job(self) -> float:
        return self.takes / self.jobs

    @property
    def double_per_job(self) -> float:
        return sum(self.double_takes_by_node) / self.jobs

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds

    def ms_per_job(self, cpu_s: float | None) -> float | None:
        return None if cpu_s is None else 1000 * cpu_s / self.jobs


def cpu_seconds(services: Sequence[Service]) -> float:
    """User + system CPU of the services' processes so far."""
    total = 0
    for service in services:
        if service.pid is None:
            continue
        fields = Path(f"/proc/{service.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / _TICK


async def settled(cluster: Cluster) -> tuple[int, tuple[int, ...]]:
    """Sum of takes, and each node's double takes, once no node holds a job
    live or reserved (or after ``_SETTLE`` s), and the counts stopped moving."""
    deadline = time.monotonic() + _SETTLE
    last: tuple[int, tuple[int, ...]] | None = None
    while True:
        statuses = []
        for node in cluster.nodes:
            async with ForumClient(node.url, timeout=10) as client:
                statuses.append(await client.status())
        now = (sum(s.takes for s in statuses), tuple(s.double_takes for s in statuses))
        idle = all(s.live == 0 and s.reserved == 0 for s in statuses)
        if (idle and now == last) or time.monotonic() > deadline:
            return now
        last = now
        await asyncio.sleep(0.5)


@dataclass(slots=True)
class Producer:
    """Writes the jobs in batches, round robin over the nodes that run, at
    the load's pace, recording each batch in ``history`` (acknowledged or
    not: a batch that failed may still have landed) and which node took it."""

    cluster: Cluster
    load: Load
    history: History
    #: Job names by the node the producer wrote them to.
    written_to: dict[str, list[str]] = field(default_factory=dict)
    #: The node that took the batch reaching half the jobs: the one taken down.
    victim: str | None = None
    #: Set once that batch was written (or failed), or at the end.
    half: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        prefix = self.cluster.cfg.prefix
        names = [f"{i:06d}" for i in range(self.load.jobs)]
        clients = {n.name: ForumClient(n.url, timeout=10) for n in self.cluster.nodes}
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            for i, start in enumerate(range(0, len(names), self.load.batch)):
                await asyncio.sleep(max(0.0, started + start / self.load.rate - loop.time()))
                batch = names[start : start + self.load.batch]
                node = self._next_running(i)
                try:
                    await clients[node.name].write_many([(prefix + n).encode() for n in batch])
                    acknowledged = True
                except ClientError:
                    acknowledged = False
                for name in batch:
                    self.history.wrote(prefix + name, acknowledged)
                if acknowledged:
                    self.written_to.setdefault(node.name, []).extend(prefix + n for n in batch)
                if start + len(batch) >= len(names) / 2 and not self.half.is_set():
                    self.victim = node.name
                    self.half.set()  # between two batches: the kill lands on none
        finally:
            self.half.set()
            for client in clients.values():
                await client.aclose()

    def _next_running(self, i: int) -> NodeService:
        nodes = self.cluster.nodes
        for step in range(len(nodes)):
            node = nodes[(i + step) % len(nodes)]
            if node.running:
                return node
        raise RuntimeError("every node is down")


async def take_one_down(cluster: Cluster, producer: Producer, plan: DownPlan) -> Down:
    """``plan.after_s`` seconds after the producer's batch that reaches half
    the jobs, SIGKILL (or SIGSTOP) the node it went to; the time until each
    job written to it without an effect then has one (see the module's
    docstring); the node started again on its data (or resumed) at the end."""
    await producer.half.wait()
    victim = next((n for n in cluster.nodes if n.name == producer.victim), None)
    if victim is None:
        return Down(0, None, 0)  # no batch reached half: none was taken down
    await asyncio.sleep(plan.after_s)
    async with EffectSink.from_url(cluster.sink_url) as sink:
        effects = await sink.effects()
        if plan.how == "kill":
            await victim.kill()
        else:
            victim.pause()
        down = time.perf_counter()
        waiting = {j for j in producer.written_to.get(victim.name, []) if not effects.get(j)}
        count = len(waiting)
        last_served = down
        while waiting and time.perf_counter() - down < plan.wait_s:
            await asyncio.sleep(_POLL)
            effects = await sink.effects()
            served = {j for j in waiting if effects.get(j)}
            if served:
                waiting -= served
                last_served = time.perf_counter()
    if plan.how == "kill":
        await victim.start()
    else:
        victim.resume()
    if not count:
        return Down(0, None, 0)  # nothing of it was left to serve: no time to tell
    return Down(count, None if waiting else last_served - down, len(waiting))


async def run_once(
    nodes: int, variant: str, load: Load, tree: Path, idle: float, plan: DownPlan | None
) -> Run:
    env = {"PYTHONPATH": pythonpath(tree)} if tree != ROOT else {}
    cfg = ClusterConfig(
        nodes=nodes,
        workers=1,
        handler=named_in(tree, ClusterConfig().handler),
        node_env={**VARIANTS[variant], **env},
        worker_env={WORK_MS_ENV: str(load.work_ms), **env},
    )
    history = History()
    down: Down | None = None
    async with Cluster(cfg) as cluster:
        redis: list[Service] = [cluster.redis] if cluster.redis is not None else []
        idle_rate = await idle_cpu(cluster, idle) if idle else None
        node0, worker0 = cpu_seconds(cluster.nodes), cpu_seconds(cluster.workers)
        redis0 = cpu_seconds(redis)
        producer = Producer(cluster, load, history)
        started = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            group.create_task(producer.run())
            taking_down = (
                group.create_task(take_one_down(cluster, producer, plan))
                if plan is not None
                else None
            )
        await wait_until_done(cluster, history, deadline=600, progress=False)
        seconds = time.perf_counter() - started
        cpu = (
            cpu_seconds(cluster.nodes) - node0,
            cpu_seconds(cluster.workers) - worker0,
            cpu_seconds(redis) - redis0,
        )
        if taking_down is not None:
            down = taking_down.result()
        takes, doubles = await settled(cluster)
        await collect(cluster, history)
    verdict = history.check()
    if not verdict.valid:
        print(verdict.explain(), file=sys.stderr)
    node_cpu, worker_cpu, redis_cpu = (None, None, None) if down else cpu
    return Run(
        nodes,
        variant,
        load.work_ms,
        load.jobs,
        seconds,
        takes,
        doubles,
        verdict.valid,
        node_cpu,
        worker_cpu,
        redis_cpu,
        idle_rate,
        down,
    )


async def idle_cpu(cluster: Cluster, seconds: float) -> float:
    """The nodes' CPU seconds per second over ``seconds`` with nothing to do."""
    before = cpu_seconds(cluster.nodes)
    await asyncio.sleep(seconds)
    return (cpu_seconds(cluster.nodes) - before) / seconds


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def median_of(runs: list[Run]) -> dict[str, float | None]:
    downs = [r.down for r in runs if r.down is not None]
    return {
        "jobs_per_s": statistics.median(r.jobs_per_s for r in runs),
        "takes_per_job": statistics.median(r.takes_per_job for r in runs),
        "double_per_job": statistics.median(r.double_per_job for r in runs),
        "node_cpu_ms_per_job": _median([r.ms_per_job(r.node_cpu_s) for r in runs]),
        "worker_cpu_ms_per_job": _median([r.ms_per_job(r.worker_cpu_s) for r in runs]),
        "redis_cpu_ms_per_job": _median([r.ms_per_job(r.redis_cpu_s) for r in runs]),
        "idle_node_cpu_ms_per_s": _median(
            [
                None if r.idle_node_cpu_s_per_s is None else 1000 * r.idle_node_cpu_s_per_s
                for r in runs
            ]
        ),
        "down_to_served_s": _median([d.served_s for d in downs]) if downs else None,
        "stranded": _median([d.stranded for d in downs]) if downs else None,
        "victim_jobs": _median([d.victim_jobs for d in downs]) if downs else None,
    }


def _cell(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def report(summary: dict[str, dict[str, dict[str, dict[str, float | None]]]]) -> None:
    print(f"{'nodes':>5} {'work ms':>7} {'variant':<8} {'jobs/s':>6} {'takes/job':>9} "
          f"{'double/job':>10} {'cpu ms/job':>10} {'node ms':>7} {'worker ms':>9} "
          f"{'redis ms':>8} {'idle ms/s':>9} {'down->served s':>14} {'stranded':>8}")  # fmt: skip
    for nodes, by_work in summary.items():
        for work_ms, by_variant in by_work.items():
            for variant, m in by_variant.items():
                node, worker = m["node_cpu_ms_per_job"], m["worker_cpu_ms_per_job"]
                cpu = None if node is None or worker is None else node + worker
                print(f"{nodes:>5} {work_ms:>7} {variant:<8} {_cell(m['jobs_per_s'], 6, 0)} "
                      f"{_cell(m['takes_per_job'], 9, 3)} {_cell(m['double_per_job'], 10, 3)} "
                      f"{_cell(cpu, 10, 2)} {_cell(node, 7, 2)} {_cell(worker, 9, 2)} "
                      f"{_cell(m['redis_cpu_ms_per_job'], 8, 2)} "
                      f"{_cell(m['idle_node_cpu_ms_per_s'], 9, 0)} "
                      f"{_cell(m['down_to_served_s'], 14, 2)} "
                      f"{_cell(m['stranded'], 8, 0)}")  # fmt: skip


# -- --groups: replica groups under one map ------------------------------------------


@dataclass(slots=True)
class KeyedProducer:
    """``--groups``: each job one keyed write (a write's key is its job's:
    ``write_many``'s one key would be every job's), a batch of them sent at
    once at the load's pace, through ``ClusterClient``s, so each job goes to
    its slot's group. There are R clients, each starting each group from
    the member its id draws, and the batch's jobs are dealt over them, so
    the writes spread over a group's members (the round robin of
    :class:`Producer` spreads them over a mesh's nodes evenly)."""

    cluster: GroupedCluster
    load: Load
    history: History

    async def run(self) -> int:
        """Write the jobs; how many went to a group other than their slot's."""
        prefix = self.cluster.cfg.prefix
        names = [f"{prefix}{i:06d}" for i in range(self.load.jobs)]
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(
                    ClusterClient(self.cluster.map, client_id=f"producer-{r}")
                )
                for r in range(self.cluster.replicas)
            ]
            loop = asyncio.get_running_loop()
            started = loop.time()
            for start in range(0, len(names), self.load.batch):
                await asyncio.sleep(max(0.0, started + start / self.load.rate - loop.time()))
                batch = names[start : start + self.load.batch]
                await asyncio.gather(
                    *(self._write(clients[(start + k) % len(clients)], job)
                      for k, job in enumerate(batch))
                )  # fmt: skip
            return sum(client.misplaced for client in clients)

    async def _write(self, client: ClusterClient, job: str) -> None:
        try:
            await client.write(job.encode(), key=job)
            acknowledged = True
        except ClientError:
            acknowledged = False
        self.history.wrote(job, acknowledged)


@dataclass(frozen=True, slots=True)
class GroupRun:
    """One ``--groups`` run: ``groups`` groups of ``replicas``, and what a
    mesh run does not measure."""

    groups: int
    replicas: int
    run: Run
    #: This process's CPU (the producer, and the look at the effects).
    producer_cpu_s: float
    #: Bytes appended to the Strands of every node (their ``strand_bytes``
    #: plus ``bytes_reclaimed``: what compaction gave back counts).
    strand_bytes: int
    #: One job's entries in one Strand (:func:`groups.one_copy_bytes`).
    entry_bytes: float
    misplaced: int
    #: Requests the nodes were sent over the run and the settling after it
    #: (their ``streams_requests``): the producer's, the workers' and this
    #: bench's looks at the nodes.
    requests: int

    @property
    def all_cpu_s(self) -> float | None:
        r = self.run
        if r.node_cpu_s is None or r.worker_cpu_s is None or r.redis_cpu_s is None:
            return None
        return r.node_cpu_s + r.worker_cpu_s + r.redis_cpu_s + self.producer_cpu_s

    @property
    def strand_copies(self) -> float:
        """The Strand bytes per job in copies of the job's entries (R when
        each member holds each job once, and nothing more)."""
        return self.strand_bytes / self.run.jobs / self.entry_bytes


async def appended(cluster: Cluster) -> tuple[int, int]:
    """The bytes every node's Strand took so far (compaction's given back
    too), and the requests every node was sent on its clients' streams."""
    total = requests = 0
    for node in cluster.nodes:
        async with ForumClient(node.url, timeout=10) as client:
            status = await client.status()
        total += status.strand_bytes + status.bytes_reclaimed
        requests += status.streams_requests
    return total, requests


async def run_grouped(
    groups: int, replicas: int, load: Load, idle: float, home_only: bool
) -> GroupRun:
    """One run of the load on ``groups`` groups of ``replicas`` (bench/groups.py)."""
    cfg = ClusterConfig(worker_env={WORK_MS_ENV: str(load.work_ms)})
    history = History()
    async with GroupedCluster(cfg, groups, replicas, home_only) as cluster:
        redis: list[Service] = [cluster.redis] if cluster.redis is not None else []
        idle_rate = await idle_cpu(cluster, idle) if idle else None
        entry = await one_copy_bytes(cluster.root, cfg.prefix)
        bytes0, requests0 = await appended(cluster)
        node0, worker0 = cpu_seconds(cluster.nodes), cpu_seconds(cluster.workers)
        redis0, producer0 = cpu_seconds(redis), time.process_time()
        started = time.perf_counter()
        misplaced = await KeyedProducer(cluster, load, history).run()
        await wait_until_done(cluster, history, deadline=600, progress=False)
        seconds = time.perf_counter() - started
        node_cpu = cpu_seconds(cluster.nodes) - node0
        worker_cpu = cpu_seconds(cluster.workers) - worker0
        redis_cpu = cpu_seconds(redis) - redis0
        producer_cpu = time.process_time() - producer0
        takes, doubles = await settled(cluster)
        bytes1, requests1 = await appended(cluster)
        strand, requests = bytes1 - bytes0, requests1 - requests0
        await collect(cluster, history)
    verdict = history.check()
    if not verdict.valid:
        print(verdict.explain(), file=sys.stderr)
    run = Run(groups * replicas, f"{groups}x{replicas}", load.work_ms, load.jobs, seconds, takes,
              doubles, verdict.valid, node_cpu, worker_cpu, redis_cpu, idle_rate)  # fmt: skip
    return GroupRun(groups, replicas, run, producer_cpu, strand, entry, misplaced, requests)


#: The targets of issue 30 on this machine, checked in the report.
NODE_CPU_BOUND, IDLE_BOUND, COPIES_BOUND, TAKES_BOUND = 1.1, 1.1, 1.05, 1.03


def grouped_summary(runs: list[GroupRun]) -> dict[str, dict[str, float | None]]:
    """Per shape (``GxR``), the medians over the rounds."""
    shapes = dict.fromkeys((r.groups, r.replicas) for r in runs)
    summary = {}
    for groups, replicas in shapes:
        mine = [r for r in runs if (r.groups, r.replicas) == (groups, replicas)]
        summary[f"{groups}x{replicas}"] = {
            "groups": float(groups),
            "replicas": float(replicas),
            **median_of([r.run for r in mine]),
            "all_cpu_ms_per_job": _median([r.run.ms_per_job(r.all_cpu_s) for r in mine]),
            "producer_cpu_ms_per_job": statistics.median(
                r.run.ms_per_job(r.producer_cpu_s) or 0.0 for r in mine
            ),
            "strand_bytes_per_job": statistics.median(r.strand_bytes / r.run.jobs for r in mine),
            "entry_bytes": statistics.median(r.entry_bytes for r in mine),
            "strand_copies_per_job": statistics.median(r.strand_copies for r in mine),
            "misplaced": statistics.median(r.misplaced for r in mine),
            "requests_per_job": statistics.median(r.requests / r.run.jobs for r in mine),
        }
    return summary


def grouped_targets(
    summary: dict[str, dict[str, float | None]], replicas: int
) -> dict[str, dict[str, float | bool | None]]:
    """Each of issue 30's targets against the ``G x replicas`` rows: the
    figure (a ratio) and whether it is met; ``None`` when the rows are not there."""
    base = summary.get(f"1x{replicas}")
    rows = {k: m for k, m in summary.items() if m["replicas"] == replicas}
    targets: dict[str, dict[str, float | bool | None]] = {}
    for key, m in rows.items():
        groups = int(m["groups"] or 1)
        node, idle = m["node_cpu_ms_per_job"], m["idle_node_cpu_ms_per_s"]
        node_ratio = (
            node / base["node_cpu_ms_per_job"]
            if base and node is not None and base["node_cpu_ms_per_job"]
            else None
        )
        idle_ratio = (
            idle / (groups * base["idle_node_cpu_ms_per_s"])
            if base and idle is not None and base["idle_node_cpu_ms_per_s"]
            else None
        )
        copies = (m["strand_copies_per_job"] or 0.0) / replicas
        takes = m["takes_per_job"] or 0.0
        targets[key] = {
            "node_cpu_vs_1_group": node_ratio,
            "node_cpu_ok": None if node_ratio is None else node_ratio <= NODE_CPU_BOUND,
            "idle_vs_g_times_1_group": idle_ratio,
            "idle_ok": None if idle_ratio is None else idle_ratio <= IDLE_BOUND,
            "strand_vs_r_copies": copies,
            "strand_ok": copies <= COPIES_BOUND,
            "takes_per_job": takes,
            "takes_ok": takes <= TAKES_BOUND,
        }
    return targets


def grouped_report(
    summary: dict[str, dict[str, float | None]],
    targets: dict[str, dict[str, float | bool | None]],
) -> None:
    print(f"{'shape':>5} {'nodes':>5} {'jobs/s':>6} {'node ms/job':>11} {'all ms/job':>10} "
          f"{'idle ms/s':>9} {'strand B/job':>12} {'copies':>6} {'takes/job':>9} "
          f"{'double/job':>10} {'misplaced':>9} {'req/job':>7}")  # fmt: skip
    for key, m in summary.items():
        nodes = int((m["groups"] or 0) * (m["replicas"] or 0))
        print(f"{key:>5} {nodes:>5} {_cell(m['jobs_per_s'], 6, 0)} "
              f"{_cell(m['node_cpu_ms_per_job'], 11, 2)} {_cell(m['all_cpu_ms_per_job'], 10, 2)} "
              f"{_cell(m['idle_node_cpu_ms_per_s'], 9, 0)} "
              f"{_cell(m['strand_bytes_per_job'], 12, 0)} "
              f"{_cell(m['strand_copies_per_job'], 6, 2)} {_cell(m['takes_per_job'], 9, 3)} "
              f"{_cell(m['double_per_job'], 10, 3)} {_cell(m['misplaced'], 9, 0)} "
              f"{_cell(m['requests_per_job'], 7, 2)}")  # fmt: skip
    print("targets (issue 30): node ms/job <= 1.1x 1 group; idle <= 1.1 x G x 1 group's; "
          "strand <= 1.05 x R copies; takes/job <= 1.03")  # fmt: skip
    for key, t in targets.items():
        print(f"{key:>5} node {_ratio(t['node_cpu_vs_1_group'], t['node_cpu_ok'])}  "
              f"idle {_ratio(t['idle_vs_g_times_1_group'], t['idle_ok'])}  "
              f"strand {_ratio(t['strand_vs_r_copies'], t['strand_ok'])}  "
              f"takes {_ratio(t['takes_per_job'], t['takes_ok'])}")  # fmt: skip


def _ratio(value: float | bool | None, ok: float | bool | None) -> str:
    if value is None:
        return "   -   "
    return f"{value:.3f} {'ok' if ok else 'MISS'}"


def grouped_plot(summary: dict[str, dict[str, float | None]], path: Path) -> None:
    """CPU per job and idle CPU per shape (bench/plots.py)."""
    import plots  # noqa: PLC0415 (matplotlib: in .venv-bench only)

    def nodes(m: dict[str, float | None]) -> int:
        return int((m["groups"] or 0) * (m["replicas"] or 0))

    # By nodes, groups first among equals: G x R beside the mesh of as many.
    rows = sorted(summary.items(), key=lambda kv: (nodes(kv[1]), -(kv[1]["groups"] or 0)))
    plots.grouped_bars(
        path,
        "Replica groups (G x R) against one group of N (the full mesh): CPU at a fixed "
        "offered load, medians\nnode = every forum serve's; all = nodes, workers, Redis and the "
        "producer; idle = the nodes', no jobs",
        [f"{k}\n({nodes(m)} nodes)" for k, m in rows],
        {
            "node ms/job": [m["node_cpu_ms_per_job"] or 0.0 for _, m in rows],
            "all ms/job": [m["all_cpu_ms_per_job"] or 0.0 for _, m in rows],
            "idle node ms/s / 10": [(m["idle_node_cpu_ms_per_s"] or 0.0) / 10 for _, m in rows],
        },
        "CPU ms per job (idle: ms per s, over 10)",
        fmt=",.2f",
    )


async def main_grouped(args: argparse.Namespace, load: Load) -> dict[str, object]:
    """``--groups`` (and ``--mesh``): each shape once per round, in turn."""
    load_average = os.getloadavg()
    shapes = [(g, args.replicas) for g in args.groups] + [
        (1, n) for n in args.mesh if (1, n) not in {(g, args.replicas) for g in args.groups}
    ]
    runs: list[GroupRun] = []
    for round_ in range(args.rounds):
        for groups, replicas in shapes if round_ % 2 == 0 else shapes[::-1]:
            scaled = groups if args.load_per_group else 1
            mine = replace(load, jobs=load.jobs * scaled, rate=load.rate * scaled)
            run = await run_grouped(groups, replicas, mine, args.idle, args.home_only)
            runs.append(run)
            print(f"round {round_ + 1} {groups}x{replicas}: {run.run.jobs_per_s:.0f} jobs/s "
                  f"node {run.run.ms_per_job(run.run.node_cpu_s):.2f} ms/job takes/job "
                  f"{run.run.takes_per_job:.3f} copies {run.strand_copies:.2f} "
                  f"valid={run.run.valid}", file=sys.stderr)  # fmt: skip
    summary = grouped_summary(runs)
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": load_average,
            "load_average_at_end": os.getloadavg(),
        },
        "load": asdict(load),
        "rounds": args.rounds,
        "idle_s": args.idle,
        "workers": "home only" if args.home_only else "stealing in turn",
        "load_per_group": args.load_per_group,
        "summary": summary,
        "targets": grouped_targets(summary, args.replicas),
        "runs": [
            {
                **asdict(r.run),
                "groups": r.groups,
                "replicas": r.replicas,
                "producer_cpu_s": r.producer_cpu_s,
                "strand_bytes": r.strand_bytes,
                "entry_bytes": r.entry_bytes,
                "misplaced": r.misplaced,
                "requests": r.requests,
            }
            for r in runs
        ],
        "all_valid": all(r.run.valid for r in runs),
    }


def _key(work_ms: float) -> str:
    return f"{work_ms:g}"


async def main(
    args: argparse.Namespace, loads: list[Load], other: Path | None
) -> dict[str, object]:
    load_average = os.getloadavg()
    runs: list[Run] = []
    for round_ in range(args.rounds):
        for nodes in args.nodes:
            for load in loads:
                # Alternate which variant goes first, round by round.
                order = args.variants if round_ % 2 == 0 else args.variants[::-1]
                for variant in order:
                    tree = other if variant == "main" and other is not None else ROOT
                    run = await run_once(nodes, variant, load, tree, args.idle, args.down)
                    runs.append(run)
                    down = (
                        f" down->served {run.down.served_s} s stranded {run.down.stranded}"
                        if run.down
                        else ""
                    )
                    print(f"round {round_ + 1} nodes={nodes} work={_key(load.work_ms)} ms "
                          f"{variant}: {run.jobs_per_s:.0f} jobs/s takes/job "
                          f"{run.takes_per_job:.3f} double/job {run.double_per_job:.3f}"
                          f"{down} valid={run.valid}", file=sys.stderr)  # fmt: skip
    summary = {
        str(nodes): {
            _key(load.work_ms): {
                variant: median_of(
                    [
                        r
                        for r in runs
                        if (r.nodes, r.work_ms, r.variant) == (nodes, load.work_ms, variant)
                    ]
                )
                for variant in args.variants
            }
            for load in loads
        }
        for nodes in args.nodes
    }
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": load_average,
        },
        "loads": [asdict(load) for load in loads],
        "rounds": args.rounds,
        "idle_s": args.idle,
        "down": None if args.down is None else asdict(args.down),
        "main_tree": None if other is None else str(args.main_tree or args.main_ref),
        "summary": summary,
        "runs": [
            {**asdict(r), "takes_per_job": r.takes_per_job, "double_per_job": r.double_per_job}
            for r in runs
        ],
        "all_valid": all(r.valid for r in runs),
    }


def _numbers(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of numbers"
        ) from None
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each value must be above 0")
    return values


def _ints(text: str) -> list[int]:
    values = _numbers(text)
    if any(v != int(v) for v in values):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers")
    return [int(v) for v in values]


def _variants(text: str) -> list[str]:
    names = text.split(",")
    unknown = set(names) - set(VARIANTS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown variant {sorted(unknown)[0]!r}")
    return names


#: The defaults by job length: the first whose bound (ms) the length is within.
_JOBS = ((10.0, 300), (100.0, 150), (math.inf, 40))
_RATES = ((10.0, 150.0), (100.0, 60.0), (math.inf, 12.0))


def _default(work_ms: float, table: Sequence[tuple[float, float]]) -> float:
    return next(value for bound, value in table if work_ms <= bound)


def _per_load(values: Sequence[float], work: Sequence[float]) -> list[float] | None:
    """``values``, one per job length (one value: the same for each);
    ``None`` if there are neither one nor one per job length."""
    if len(values) == 1:
        return [values[0]] * len(work)
    return list(values) if len(values) == len(work) else None


def grouped_cli(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--groups``: its own checks, run, table, JSON and plot."""
    if args.replicas < 1:
        parser.error("--replicas must be 1 or more")
    if args.kill_one or args.pause_one or args.variants != ["pool"]:
        parser.error("--groups runs the defaults, no node taken down: no --variants, "
                     "--kill-one or --pause-one")  # fmt: skip
    if args.main_tree is not None or args.main_ref is not None:
        parser.error("--groups runs this tree: no --main-tree or --main-ref")
    if len(args.work_ms or [10.0]) != 1 or len(args.jobs or [0]) != 1:
        parser.error("--groups runs one load: one --work-ms, --jobs and --producer-rate")
    if args.producer_batch < 1:
        parser.error("--producer-batch must be 1 or more")
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("matplotlib is not installed here: run from .venv-bench, or --no-plot")
    if max(args.groups) * args.replicas > 26 or max(args.mesh or [1]) > 26:
        parser.error("at most 26 nodes (node-a to node-z)")
    load = Load(
        (args.work_ms or [10.0])[0],
        (args.jobs or [GROUPED_JOBS])[0],
        (args.producer_rate or [GROUPED_RATE])[0],
        args.producer_batch,
    )
    results = asyncio.run(main_grouped(args, load))
    summary = results["summary"]
    grouped_report(summary, results["targets"])  # type: ignore[arg-type]
    out = args.out or ROOT / "bench/results/scaling_groups_bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    if not args.no_plot:
        plot = args.plot or out.with_suffix(".png")
        grouped_plot(summary, plot)  # type: ignore[arg-type]
        print(f"drew {plot}", file=sys.stderr)
    return 0 if results["all_valid"] else 1


#: ``--groups``' load by default: a fixed offered load below what the
#: smallest shape serves (150 jobs/s of 10 ms), long enough to be steady.
GROUPED_JOBS, GROUPED_RATE = 3000, 150.0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=_ints, default=[2, 3, 5, 7], help="e.g. 2,3,5,7")
    parser.add_argument(
        "--work-ms", type=_numbers, help="e.g. 10,100,1000 (the default; --groups: 10)"
    )
    parser.add_argument("--jobs", type=_ints, help="per --work-ms (default: by job length)")
    parser.add_argument(
        "--producer-rate", type=_numbers, help="jobs/s, per --work-ms (default: by job length)"
    )
    parser.add_argument("--producer-batch", type=int, default=30, help="jobs per write_many")
    downs = parser.add_mutually_exclusive_group()
    downs.add_argument("--kill-one", action="store_true", help="SIGKILL a node mid-run")
    downs.add_argument("--pause-one", action="store_true", help="SIGSTOP a node mid-run")
    parser.add_argument(
        "--down-after-ms", type=float, default=20.0,
        help="the kill or pause this long after the batch that reaches half the jobs",
    )  # fmt: skip
    parser.add_argument(
        "--down-wait", type=float, default=30.0,
        help="how long the jobs of the node taken down are waited for",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variants", type=_variants, default=["pool"])
    parser.add_argument("--main-tree", type=Path, help="the tree variant main runs (see above)")
    parser.add_argument("--main-ref", help="a commit variant main runs, unpacked (see above)")
    parser.add_argument("--idle", type=float, default=0.0, help="seconds idle measured first")
    parser.add_argument(
        "--groups", type=_ints, help="replica groups under one map, e.g. 1,2,3 (see above)"
    )
    parser.add_argument("--replicas", type=int, default=3, help="--groups: nodes per group")
    parser.add_argument(
        "--mesh", type=_ints, default=[], help="--groups: one group of N beside them, e.g. 3,5,7,9"
    )
    parser.add_argument("--out", type=Path, help="the JSON (default bench/results/<mode>.json)")
    parser.add_argument("--plot", type=Path, help="--groups: the PNG (default: beside the JSON)")
    parser.add_argument("--no-plot", action="store_true", help="--groups: draw no PNG")
    parser.add_argument(
        "--home-only", action="store_true", help="--groups: workers never steal (see above)"
    )
    parser.add_argument(
        "--load-per-group", action="store_true",
        help="--groups: the jobs and the rate times G (each node as busy at every G)",
    )  # fmt: skip
    arguments = parser.parse_args()
    if arguments.groups is not None:
        sys.exit(grouped_cli(parser, arguments))
    if arguments.mesh:
        parser.error("--mesh goes with --groups")
    arguments.work_ms = arguments.work_ms or [10.0, 100.0, 1000.0]
    arguments.out = arguments.out or ROOT / "bench/results/scaling_bench.json"
    if arguments.producer_batch < 1:
        parser.error("--producer-batch must be 1 or more")
    if arguments.main_tree is not None and arguments.main_ref is not None:
        parser.error("give --main-tree or --main-ref, not both")
    has_other = arguments.main_tree is not None or arguments.main_ref is not None
    if "main" in arguments.variants and not has_other:
        parser.error("variant main needs --main-tree DIR or --main-ref REF")
    if has_other and "main" not in arguments.variants:
        parser.error("--main-tree / --main-ref: add main to --variants (e.g. pool,main)")
    if (
        arguments.main_tree is not None
        and not (arguments.main_tree / "forum" / "__init__.py").is_file()
    ):
        parser.error(f"--main-tree {arguments.main_tree}: not a Forum tree (no forum/__init__.py)")
    work = arguments.work_ms
    jobs = _per_load(arguments.jobs or [_default(w, _JOBS) for w in work], work)
    rates = _per_load(arguments.producer_rate or [_default(w, _RATES) for w in work], work)
    if jobs is None or rates is None:
        parser.error("--jobs and --producer-rate: one value, or one per --work-ms")
    loads = [
        Load(w, int(j), r, arguments.producer_batch)
        for w, j, r in zip(work, jobs, rates, strict=True)
    ]
    how: Literal["kill", "pause"] | None = (
        "kill" if arguments.kill_one else "pause" if arguments.pause_one else None
    )
    after = arguments.down_after_ms / 1000
    arguments.down = None if how is None else DownPlan(how, after, arguments.down_wait)
    with other_tree(arguments.main_tree, arguments.main_ref) as tree:
        results = asyncio.run(main(arguments, loads, tree))
    report(results["summary"])  # type: ignore[arg-type]
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {arguments.out}", file=sys.stderr)
