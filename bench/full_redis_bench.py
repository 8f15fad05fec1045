"""What a worker costs while the Lens's Redis is full, with and without the back-off.

Usage: ``.venv/bin/python bench/full_redis_bench.py --main-tree DIR [--rounds 3]
[--window 5] [--out PATH]``

Each run is a one-node :class:`forum.deploy.cluster.Cluster` (a ``forum serve``, a
``redis-server`` for the Lens with AOF, one ``forum worker`` of 8 slots
running the demo handler, its effects in database 1). 200 jobs run; then
Redis is made full the way the recommended settings fill one (``maxmemory``
below what it holds, ``noeviction``: every write refused with ``OOM``, PING
still answered), 200 more jobs are written, and once the worker has met the
full Redis, over ``--window`` seconds:

node req/s     requests the node answered on its streams (the worker's
               reserves and releases; ``streams_requests`` of its status)
warnings/s     WARNING lines in the worker's log
worker cpu %   the worker process's CPU (user + system, ``/proc/<pid>/stat``)
               over the window, as a share of one core

Then ``maxmemory`` is raised (``CONFIG SET maxmemory 0``) and the run checks
that every job ran, each effect once (``resumed`` is False otherwise).

Variants, alternated within each round (their order reversed every other
round), so both see the same machine:

backoff        this tree: the worker checks every shard with a write and
               backs off (forum.coordinator.availability)
main           the tree in ``--main-tree DIR`` (e.g. ``git archive <commit> |
               tar -x -C DIR``): its worker runs with ``PYTHONPATH=DIR``

Medians over rounds. Prints a table; writes bench/results/full_redis_bench.json.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scaling_bench import cpu_seconds  # noqa: E402
from trees import named_in, pythonpath  # noqa: E402

from forum.deploy.cluster import Cluster, ClusterConfig  # noqa: E402
from forum.deploy.demo import WORK_MS_ENV  # noqa: E402
from forum.deploy.sink import EffectSink  # noqa: E402
from forum.node.client.remote import ForumClient  # noqa: E402
from tests.coordinator.full_redis import fill, make_room  # noqa: E402

JOBS = 200


@dataclass(frozen=True, slots=True)
class Run:
    variant: str
    window: float
    node_requests: int
    warnings: int
    worker_cpu_s: float
    resumed: bool

    @property
    def requests_per_s(self) -> float:
        return self.node_requests / self.window

    @property
    def warnings_per_s(self) -> float:
        return self.warnings / self.window

    @property
    def cpu_percent(self) -> float:
        return 100 * self.worker_cpu_s / self.window


async def until(predicate: object, deadline: float, what: str) -> None:
    """Poll ``predicate()`` (a coroutine function) until true, or fail after ``deadline`` s."""
    end = time.monotonic() + deadline
    while not await predicate():  # type: ignore[operator]
        if time.monotonic() > end:
            raise TimeoutError(what)
        await asyncio.sleep(0.1)


def warnings(path: Path) -> int:
    return sum(" WARNING " in line for line in path.read_text().splitlines())


async def run_once(variant: str, window: float, main_tree: Path | None) -> Run:
    tree = main_tree if variant == "main" and main_tree else ROOT
    env = {"PYTHONPATH": pythonpath(tree)} if tree != ROOT else {}
    handler = named_in(tree, ClusterConfig().handler)
    cfg = ClusterConfig(nodes=1, workers=1, handler=handler, worker_env={WORK_MS_ENV: "1", **env})
    async with Cluster(cfg) as cluster:
        assert cluster.redis is not None
        node, worker = cluster.nodes[0], cluster.workers[0]
        async with (
            ForumClient(node.url) as space,
            EffectSink.from_url(cluster.sink_url) as sink,
        ):

            async def effects_at_least(n: int) -> bool:
                return len(await sink.effects()) >= n

            await space.write_many([f"job/a{i:04d}".encode() for i in range(JOBS)])
            await until(lambda: effects_at_least(JOBS), 60, "the first jobs")
            before = warnings(worker.log_path)
            fill(cluster.redis.port)
            await space.write_many([f"job/b{i:04d}".encode() for i in range(JOBS)])

            async def met() -> bool:  # its claims refused: a warning, either variant
                return warnings(worker.log_path) > before

            await until(met, 60, "the worker to meet the full Redis")
            await asyncio.sleep(0.5)  # past the first failure's own requests
            requests0, lines0 = (await space.status()).streams_requests, warnings(worker.log_path)
            cpu0 = cpu_seconds([worker])
            await asyncio.sleep(window)  # the measuring window
            cpu = cpu_seconds([worker]) - cpu0
            requests = (await space.status()).streams_requests - requests0
            lines = warnings(worker.log_path) - lines0
            make_room(cluster.redis.port)
            try:
                await until(lambda: effects_at_least(2 * JOBS), 60, "every job")
                resumed = set((await sink.effects()).values()) == {1}
            except TimeoutError:
                resumed = False
    return Run(variant, window, requests, lines, cpu, resumed)


def medians(runs: list[Run]) -> dict[str, float | bool]:
    return {
        "node_requests_per_s": statistics.median(r.requests_per_s for r in runs),
        "warnings_per_s": statistics.median(r.warnings_per_s for r in runs),
        "worker_cpu_percent": statistics.median(r.cpu_percent for r in runs),
        "resumed": all(r.resumed for r in runs),
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    runs: list[Run] = []
    variants = ["backoff", "main"] if args.main_tree else ["backoff"]
    for round_ in range(args.rounds):
        for variant in variants if round_ % 2 == 0 else variants[::-1]:
            run = await run_once(variant, args.window, args.main_tree)
            print(f"round {round_ + 1} {variant}: {run.requests_per_s:.0f} req/s, "
                  f"{run.warnings_per_s:.1f} warnings/s, {run.cpu_percent:.0f} % cpu, "
                  f"resumed {run.resumed}", file=sys.stderr, flush=True)  # fmt: skip
            runs.append(run)
    summary = {v: medians([r for r in runs if r.variant == v]) for v in variants}
    print(f"{'variant':<8} {'node req/s':>10} {'warnings/s':>10} {'worker cpu %':>12} resumed")
    for variant, m in summary.items():
        print(f"{variant:<8} {m['node_requests_per_s']:>10.1f} {m['warnings_per_s']:>10.2f} "
              f"{m['worker_cpu_percent']:>12.1f} {m['resumed']}")  # fmt: skip
    return {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load": os.getloadavg()},
        "rounds": args.rounds,
        "window_s": args.window,
        "jobs": JOBS,
        "medians": summary,
        "runs": [asdict(r) for r in runs],
    }  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--main-tree", type=Path, help="the tree variant main runs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/full_redis_bench.json")
    arguments = parser.parse_args()
    if arguments.main_tree and not (arguments.main_tree / "forum" / "__init__.py").is_file():
        parser.error(f"--main-tree {arguments.main_tree}: not a Forum tree (no forum/__init__.py)")
    results = asyncio.run(main(arguments))
    arguments.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results["medians"]))
