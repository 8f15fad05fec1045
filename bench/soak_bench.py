"""A soak: a real cluster under steady load, its memory sampled until the end.

Usage: ``python bench/soak_bench.py [--nodes 3] [--rate 150] [--minutes 120]
[--warmup MINUTES] [--every 30] [--concurrency 16] [--forget-after SECONDS]
[--done-ttl SECONDS] [--history-ttl SECONDS] [--out PATH]``

Starts ``--nodes`` ``forum serve`` processes wired as peers, a
``redis-server`` for the Lens (AOF, ``appendfsync always``, as deploy/
starts it) and one ``forum worker`` per node (``forum.deploy.cluster.Cluster``)
whose handler does nothing (:func:`noop`, so Redis holds only the Lens's
keys). A producer writes ``--rate`` jobs a second, spread over the nodes in
turn, in a batch every 0.1 s; the workers keep the backlog near 0. Every
``--every`` seconds it samples:

* each node's and each worker's RSS (``VmRSS``), and each node's Strand
  (entries, bytes) and backlog (live tuples);
* the Lens's Redis: ``used_memory`` and the keys of its database 0;
* the jobs written and the jobs the workers completed
  (``forum_worker_jobs_total{outcome="done"}``).

It prints a row per sample, then per series the slope per hour after the
warm-up (least squares over the samples from ``--warmup`` minutes on;
default a quarter of the run, at most 20 minutes), and writes it all as JSON
(``bench/results/soak_bench.json`` unless ``--out``). Redis's slope divided
by the jobs completed per hour is the Lens's bytes per completed job at
steady load: while the run is shorter than the done markers' retention
(``forget_after`` + 1 h: a day and an hour by default) every job's marker is
still there, so Redis grows by that much per job; it levels off once the
run is longer than the retention (and, for the history, than
``history_ttl``, an hour). ``--forget-after`` (given to the nodes as
``$FORUM_FORGET_AFTER`` and to the workers), ``--done-ttl`` and
``--history-ttl`` (the workers') shorten them, so that a short run shows
Redis level off: once the retention is over, it holds the jobs of the last
retention only, and grows no more.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from redis.asyncio import Redis

from forum.coordinator import Job
from forum.coordinator.keys import HISTORY_TTL
from forum.deploy.cluster import Cluster, ClusterConfig
from forum.node.client.remote import ForumClient
from forum.node.config.node import FORGET_AFTER
from forum.node.core.cancellation import wait_event
from forum.node.core.space import Pattern

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "soak_bench.json"
PREFIX = "soak/"
#: The producer's tick: one batch per node in turn every TICK seconds.
TICK = 0.1
_DONE = re.compile(r'^forum_worker_jobs_total\{outcome="done"\} ([0-9.e+]+)$', re.M)


async def noop(job: Job) -> None:
    """The soak's handler (``--handler soak_bench:noop``): nothing to do."""


@dataclass(slots=True)
class Load:
    """The producer's count of jobs written."""

    written: int = 0
    errors: int = 0
    last_error: str = ""


@dataclass(slots=True)
class Soak:
    """The samples taken so far, one dict each."""

    samples: list[dict[str, Any]] = field(default_factory=list)


def rss(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


async def produce(cluster: Cluster, rate: float, load: Load, stop: asyncio.Event) -> None:
    """Write ``rate`` jobs a second, a batch per tick, to each node in turn."""
    clients = [ForumClient(node.url, timeout=30) for node in cluster.nodes]
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        turn = 0
        while not stop.is_set():
            due = int((loop.time() - started) * rate) - load.written
            if due > 0:
                batch = [f"{PREFIX}{load.written + i}".encode() for i in range(due)]
                client = clients[turn % len(clients)]
                turn += 1
                try:
                    await client.write_many(batch)
                except Exception as exc:  # a node busy or restarting: counted, retried
                    load.errors += 1
                    load.last_error = f"{type(exc).__name__}: {exc}"
                else:
                    load.written += len(batch)
            await wait_event(stop, TICK)
    finally:
        for client in clients:
            await client.aclose()


async def completed(session: aiohttp.ClientSession, cluster: Cluster) -> int:
    """Jobs the workers completed, from their ``/metrics``."""
    total = 0
    for worker in cluster.workers:
        async with session.get(f"http://127.0.0.1:{worker.port}/metrics") as response:
            found = _DONE.search(await response.text())
        total += int(float(found[1])) if found else 0
    return total


async def sample(
    cluster: Cluster, redis: Redis, session: aiohttp.ClientSession, load: Load, t0: float
) -> dict[str, Any]:
    row: dict[str, Any] = {"t": round(time.monotonic() - t0, 1), "written": load.written}
    row["done"] = await completed(session, cluster)
    for node in cluster.nodes:
        row[f"{node.name}_rss"] = rss(node.pid)
        async with ForumClient(node.url, timeout=10) as client:
            status = await client.status()
            row[f"{node.name}_entries"] = status.entries
            row[f"{node.name}_strand_bytes"] = status.strand_bytes
            row[f"{node.name}_backlog"] = await client.count(Pattern(PREFIX.encode()))
    for worker in cluster.workers:
        row[f"{worker.name}_rss"] = rss(worker.pid)
    memory = await redis.info("memory")
    row["redis_used_memory"] = memory["used_memory"]
    row["redis_keys"] = await redis.dbsize()
    return row


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """The least-squares slope of ``(seconds, value)`` points, per hour."""
    if len(points) < 2:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread * 3600


def summarize(samples: list[dict[str, Any]], warmup: float) -> dict[str, Any]:
    """Per series: first and last value after the warm-up, slope per hour."""
    steady = [row for row in samples if row["t"] >= warmup]
    series = [name for name in samples[0] if name != "t"] if samples else []
    summary: dict[str, Any] = {}
    for name in series:
        points = [(row["t"], row[name]) for row in steady if row.get(name) is not None]
        if not points:
            continue
        summary[name] = {
            "first": points[0][1],
            "last": points[-1][1],
            "per_hour": slope_per_hour(points),
        }
    done = summary.get("done", {}).get("per_hour")
    redis = summary.get("redis_used_memory", {}).get("per_hour")
    keys = summary.get("redis_keys", {}).get("per_hour")
    if done:
        summary["redis_bytes_per_job"] = None if redis is None else redis / done
        summary["redis_keys_per_job"] = None if keys is None else keys / done
    return summary


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    seconds = args.minutes * 60
    warmup = (args.warmup if args.warmup is not None else min(args.minutes / 4, 20)) * 60
    retention = ["--history-ttl", str(args.history_ttl)]
    if args.done_ttl is not None:
        retention += ["--done-ttl", str(args.done_ttl)]
    forget_after = {"FORUM_FORGET_AFTER": str(args.forget_after)}
    cfg = ClusterConfig(
        nodes=args.nodes,
        workers=1,
        prefix=PREFIX,
        handler="soak_bench:noop",
        concurrency=args.concurrency,
        node_env=forget_after,
        worker_args=("--app-dir", str(ROOT / "bench"), *retention),
        worker_env=forget_after,
    )
    load, result = Load(), Soak()
    async with Cluster(cfg) as cluster:
        print(cluster.describe(), flush=True)
        stop = asyncio.Event()
        async with (
            Redis.from_url(cluster.redis_url) as redis,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            asyncio.TaskGroup() as tasks,
        ):
            tasks.create_task(produce(cluster, args.rate, load, stop))
            # SIGTERM or SIGINT ends the soak early, the cluster stopped and
            # what was sampled reported (a signal that killed this process
            # would leave the cluster's processes running: they have sessions
            # of their own).
            ended = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, ended.set)
            t0 = time.monotonic()
            try:
                while True:
                    row = await sample(cluster, redis, session, load, t0)
                    result.samples.append(row)
                    print_row(row, cluster, header=len(result.samples) == 1)
                    left = seconds - (time.monotonic() - t0)
                    if left <= 0 or ended.is_set():
                        break
                    await wait_event(ended, min(args.every, left))
            finally:
                stop.set()
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(signum)
    return {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "head": _head(),
        "nodes": args.nodes,
        "rate": args.rate,
        "minutes": args.minutes,
        "warmup_seconds": warmup,
        "every": args.every,
        "concurrency": args.concurrency,
        "forget_after": args.forget_after,
        "done_ttl": args.done_ttl,
        "history_ttl": args.history_ttl,
        "write_errors": load.errors,
        "last_write_error": load.last_error,
        "samples": result.samples,
        "summary": summarize(result.samples, warmup),
    }


def _head() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    return out.stdout.strip()


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def print_row(row: dict[str, Any], cluster: Cluster, *, header: bool) -> None:
    nodes = [n.name for n in cluster.nodes]
    workers = [w.name for w in cluster.workers]
    if header:
        print(f"{'t s':>7} {'written':>9} {'done':>9} {'backlog':>8} "
              + " ".join(f"{n + ' MB':>12}" for n in nodes) + " "
              + " ".join(f"{w + ' MB':>14}" for w in workers)
              + f" {'redis MB':>9} {'keys':>9}", flush=True)  # fmt: skip
    backlog = max(row[f"{n}_backlog"] for n in nodes)
    print(f"{row['t']:>7.0f} {row['written']:>9} {row['done']:>9} {backlog:>8} "
          + " ".join(f"{_mb(row[f'{n}_rss']):>12}" for n in nodes) + " "
          + " ".join(f"{_mb(row[f'{w}_rss']):>14}" for w in workers)
          + f" {_mb(row['redis_used_memory']):>9} {row['redis_keys']:>9}", flush=True)  # fmt: skip


def print_summary(report: dict[str, Any]) -> None:
    summary = report["summary"]
    print(f"\nafter {report['warmup_seconds'] / 60:.0f} min of warm-up "
          f"({report['rate']:.0f} jobs/s, {report['minutes']:.0f} min):")  # fmt: skip
    print(f"  {'series':<26}{'first':>14}{'last':>14}{'per hour':>14}")
    for name, figures in summary.items():
        if not isinstance(figures, dict):
            continue
        per_hour = figures["per_hour"]
        shown = "-" if per_hour is None else f"{per_hour:,.0f}"
        print(f"  {name:<26}{figures['first']:>14,}{figures['last']:>14,}{shown:>14}")
    for name in ("redis_bytes_per_job", "redis_keys_per_job"):
        value = summary.get(name)
        if value is not None:
            print(f"  {name:<26}{value:>42.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--rate", type=float, default=150.0, help="jobs written a second")
    parser.add_argument("--minutes", type=float, default=120.0)
    parser.add_argument("--warmup", type=float, default=None, help="minutes (default: run/4, <=20)")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--concurrency", type=int, default=16, help="handler slots per worker")
    parser.add_argument(
        "--forget-after",
        type=float,
        default=FORGET_AFTER,
        help="seconds, the nodes' and the workers' (default a day)",
    )
    parser.add_argument(
        "--done-ttl",
        type=float,
        default=None,
        help="seconds a done marker lives (default forget-after + 1 h)",
    )
    parser.add_argument(
        "--history-ttl",
        type=float,
        default=HISTORY_TTL,
        help="seconds a history lives after its last event (default 1 h)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    arguments = parser.parse_args()
    if arguments.minutes <= 0 or arguments.rate <= 0 or arguments.every <= 0:
        parser.error("--minutes, --rate and --every must be positive")
    report = asyncio.run(soak(arguments))
    print_summary(report)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(report, indent=2))
    print(f"written to {arguments.out}")
