"""Scaling with nodes: does adding nodes waste work? The demo workload at 3, 5, 7 nodes.

Usage: ``.venv/bin/python bench/scaling_bench.py [--jobs 2000] [--rounds 1]
[--nodes 3,5,7] [--variants slots,rank,pool] [--main-tree DIR] [--work-ms 5]
[--idle 5] [--out PATH]``

Each run is ``forum cluster demo`` (:func:`forum.deploy.workload.run_demo`'s steps,
on a fresh :class:`forum.deploy.cluster.Cluster`): N nodes peered in a mesh, one
worker per node (8 slots, the demo handler, ``--work-ms`` of work per job),
a Redis for the Lens; the jobs are written in batches of 100 round-robin over
the nodes, and the run ends when every job has its effect. The history
checker must pass (nothing lost, no effect twice). Measured, per run:

takes/job      the nodes' ``takes`` (their ``/v1/status``), summed, over the
               jobs: 1.0 when every job is taken once; each copy a node hands
               out after the job was done elsewhere adds one (the Lens turns
               it away, the worker acks it)
double/job     the nodes' ``double_takes``, summed, over the jobs: tuples taken
               (or reserved) on two nodes, copies the Lens caught
cpu ms/job     CPU time (user + system, ``/proc/<pid>/stat``) of every node and
               worker process from the first write to the last effect, over the
               jobs (``node ms`` of it the nodes'); Redis's separately
jobs/s         jobs over the same interval
idle ms/s      before the jobs, the nodes' CPU per second of an idle cluster
               (``--idle`` seconds of it; 0 skips): anti-entropy rounds,
               membership, the workers' waiting reserves; what it adds to a
               job is this times the run's seconds over its jobs

Each (nodes, variant) pair runs once per round; the variants alternate within
a round (their order reversed every other round), so all see the same
machine. The variants are settings of this code, and one other tree:

slots          the old stagger: a remote tuple waits 1 to 4 remote delays by
               a hash (``FORUM_REPL_RANKING=slots``), live at its slot
               (``FORUM_REMOTE_HOLD=0``)
rank           the rank among the live members (:mod:`forum.replication.ranking`),
               live at its turn (``FORUM_REMOTE_HOLD=0``)
pool           the defaults: the rank, and a turn no taker wanted puts the
               tuple in the node's pool, held (``remote_hold``, 2 s) then
               aired, taken in the node's rank order (``forum.node.space.surfacing``)
main           the code in ``--main-tree DIR`` (e.g. ``git -C /work/main
               archive HEAD | tar -x -C DIR``) at its defaults: its nodes and
               workers run with ``PYTHONPATH=DIR``

Medians over rounds. Prints a table; writes bench/results/scaling_bench.json.

Targets (issue 13): takes/job <= 1.02 at 3, 5 and 7 nodes; cpu ms/job flat
from 3 to 7 nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from trees import named_in, pythonpath

from forum.deploy.cluster import Cluster, ClusterConfig
from forum.deploy.demo import WORK_MS_ENV
from forum.deploy.history import History
from forum.deploy.processes import Service
from forum.deploy.workload import collect, wait_until_done, write_jobs
from forum.node.client.remote import ForumClient

ROOT = Path(__file__).resolve().parent.parent
#: The node environment of each variant (see above); ``main``'s is made from ``--main-tree``.
VARIANTS = {
    "slots": {"FORUM_REPL_RANKING": "slots", "FORUM_REMOTE_HOLD": "0"},
    "rank": {"FORUM_REPL_RANKING": "members", "FORUM_REMOTE_HOLD": "0"},
    "pool": {},
    "main": {},
}
_TICK = os.sysconf("SC_CLK_TCK")
#: After the last effect, how long the nodes may take to settle (acks land,
#: parked copies are killed by the Takes that follow them).
_SETTLE = 30.0


@dataclass(frozen=True, slots=True)
class Run:
    nodes: int
    variant: str
    jobs: int
    seconds: float
    takes: int
    double_takes: int
    cpu_s: float
    node_cpu_s: float
    redis_cpu_s: float
    valid: bool
    idle_node_cpu_s_per_s: float | None = None

    @property
    def takes_per_job(self) -> float:
        return self.takes / self.jobs

    @property
    def double_per_job(self) -> float:
        return self.double_takes / self.jobs

    @property
    def cpu_ms_per_job(self) -> float:
        return 1000 * self.cpu_s / self.jobs

    @property
    def node_cpu_ms_per_job(self) -> float:
        return 1000 * self.node_cpu_s / self.jobs

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds


def cpu_seconds(services: list[Service]) -> float:
    """User + system CPU of the services' processes so far."""
    total = 0
    for service in services:
        if service.pid is None:
            continue
        fields = Path(f"/proc/{service.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / _TICK


async def settled(cluster: Cluster) -> tuple[int, int]:
    """Sum of takes and of double takes once no node holds a job live or
    reserved (or after ``_SETTLE`` s), and the takes stopped moving."""
    deadline = time.monotonic() + _SETTLE
    last: tuple[int, int] | None = None
    while True:
        statuses = []
        for node in cluster.nodes:
            async with ForumClient(node.url, timeout=10) as client:
                statuses.append(await client.status())
        now = (sum(s.takes for s in statuses), sum(s.double_takes for s in statuses))
        idle = all(s.live == 0 and s.reserved == 0 for s in statuses)
        if (idle and now == last) or time.monotonic() > deadline:
            return now
        last = now
        await asyncio.sleep(0.5)


async def run_once(
    nodes: int, variant: str, jobs: int, work_ms: float, main_tree: Path | None, idle: float
) -> Run:
    tree = main_tree if variant == "main" and main_tree else ROOT
    env = {"PYTHONPATH": pythonpath(tree)} if tree != ROOT else {}
    cfg = ClusterConfig(
        nodes=nodes,
        workers=1,
        handler=named_in(tree, ClusterConfig().handler),
        node_env={**VARIANTS[variant], **env},
        worker_env={WORK_MS_ENV: str(work_ms), **env},
    )
    history = History()
    names = [f"{i:06d}" for i in range(jobs)]
    async with Cluster(cfg) as cluster:
        measured: list[Service] = [*cluster.nodes, *cluster.workers]
        redis: list[Service] = [cluster.redis] if cluster.redis is not None else []
        idle_rate = await idle_cpu(cluster, idle) if idle else None
        cpu0, redis0 = cpu_seconds(measured), cpu_seconds(redis)
        node0 = cpu_seconds(cluster.nodes)
        started = time.perf_counter()
        await write_jobs(cluster, names, history)
        await wait_until_done(cluster, history, deadline=600, progress=False)
        seconds = time.perf_counter() - started
        cpu, redis_cpu = cpu_seconds(measured) - cpu0, cpu_seconds(redis) - redis0
        node_cpu = cpu_seconds(cluster.nodes) - node0
        takes, double = await settled(cluster)
        await collect(cluster, history)
    verdict = history.check()
    if not verdict.valid:
        print(verdict.explain(), file=sys.stderr)
    return Run(
        nodes,
        variant,
        jobs,
        seconds,
        takes,
        double,
        cpu,
        node_cpu,
        redis_cpu,
        verdict.valid,
        idle_rate,
    )


async def idle_cpu(cluster: Cluster, seconds: float) -> float:
    """The nodes' CPU seconds per second over ``seconds`` with nothing to do."""
    before = cpu_seconds(cluster.nodes)
    await asyncio.sleep(seconds)
    return (cpu_seconds(cluster.nodes) - before) / seconds


def median_of(runs: list[Run]) -> dict[str, float]:
    return {
        "takes_per_job": statistics.median(r.takes_per_job for r in runs),
        "double_per_job": statistics.median(r.double_per_job for r in runs),
        "cpu_ms_per_job": statistics.median(r.cpu_ms_per_job for r in runs),
        "node_cpu_ms_per_job": statistics.median(r.node_cpu_ms_per_job for r in runs),
        "idle_node_cpu_ms_per_s": statistics.median(
            1000 * (r.idle_node_cpu_s_per_s or 0.0) for r in runs
        ),
        "redis_cpu_ms_per_job": statistics.median(1000 * r.redis_cpu_s / r.jobs for r in runs),
        "jobs_per_s": statistics.median(r.jobs_per_s for r in runs),
    }


def report(summary: dict[str, dict[str, dict[str, float]]]) -> None:
    print(f"{'nodes':>5} {'variant':<10} {'takes/job':>9} {'double/job':>10} "
          f"{'cpu ms/job':>10} {'node ms':>8} {'redis ms/job':>12} {'jobs/s':>7} "
          f"{'idle ms/s':>9}")  # fmt: skip
    for nodes, by_variant in summary.items():
        for variant, m in by_variant.items():
            print(f"{nodes:>5} {variant:<10} {m['takes_per_job']:>9.3f} "
                  f"{m['double_per_job']:>10.3f} {m['cpu_ms_per_job']:>10.2f} "
                  f"{m['node_cpu_ms_per_job']:>8.2f} "
                  f"{m['redis_cpu_ms_per_job']:>12.2f} {m['jobs_per_s']:>7.0f} "
                  f"{m['idle_node_cpu_ms_per_s']:>9.0f}")  # fmt: skip


async def main(args: argparse.Namespace) -> dict[str, object]:
    load = os.getloadavg()
    runs: list[Run] = []
    for round_ in range(args.rounds):
        for nodes in args.nodes:
            # Alternate which variant goes first, round by round.
            order = args.variants if round_ % 2 == 0 else args.variants[::-1]
            for variant in order:
                run = await run_once(
                    nodes, variant, args.jobs, args.work_ms, args.main_tree, args.idle
                )
                runs.append(run)
                print(f"round {round_ + 1} nodes={nodes} {variant}: takes/job "
                      f"{run.takes_per_job:.3f} cpu ms/job {run.cpu_ms_per_job:.2f} "
                      f"{run.jobs_per_s:.0f} jobs/s valid={run.valid}",
                      file=sys.stderr)  # fmt: skip
    summary = {
        str(nodes): {
            variant: median_of([r for r in runs if r.nodes == nodes and r.variant == variant])
            for variant in args.variants
        }
        for nodes in args.nodes
    }
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": load,
        },
        "jobs": args.jobs,
        "rounds": args.rounds,
        "work_ms": args.work_ms,
        "idle_s": args.idle,
        "main_tree": None if args.main_tree is None else str(args.main_tree),
        "summary": summary,
        "runs": [{**asdict(r), "takes_per_job": r.takes_per_job} for r in runs],
        "all_valid": all(r.valid for r in runs),
    }


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def _variants(text: str) -> list[str]:
    names = text.split(",")
    unknown = set(names) - set(VARIANTS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown variant {sorted(unknown)[0]!r}")
    return names


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--nodes", type=_ints, default=[3, 5, 7], help="e.g. 3,5,7")
    parser.add_argument("--variants", type=_variants, default=["slots", "rank", "pool"])
    parser.add_argument("--main-tree", type=Path, help="the tree variant main runs (see above)")
    parser.add_argument("--work-ms", type=float, default=5.0)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle measured first")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/scaling_bench.json")
    arguments = parser.parse_args()
    if "main" in arguments.variants and arguments.main_tree is None:
        parser.error("variant main needs --main-tree DIR")
    if (
        arguments.main_tree is not None
        and not (arguments.main_tree / "forum" / "__init__.py").is_file()
    ):
        parser.error(f"--main-tree {arguments.main_tree}: not a Forum tree (no forum/__init__.py)")
    results = asyncio.run(main(arguments))
    report(results["summary"])  # type: ignore[arg-type]
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {arguments.out}", file=sys.stderr)
