"""The cost of each guarantee: the Lens with ``WAIT`` and on a Cluster, and the
durable-until-complete worker against the ack-before-run one, in one run.

Two phases, each alternating its candidates round by round and reporting the
median of ``--rounds`` (the machine may be shared with other work, so no
candidate gets a quiet or a busy stretch to itself):

1. **Lens claim+complete pairs/s**, with 1 and 8 concurrent callers, on

   * ``single``: one redis-server (``appendonly yes``, ``appendfsync always``);
   * ``wait_replica``: the same plus one replica (``--replicaof``, also
     ``appendfsync always``), the Lens with ``wait_replicas=1``: each batch
     that writes ends with ``WAIT 1``;
   * ``cluster``: a 3-master Redis Cluster (``appendfsync always`` on each),
     the Lens through ``redis+cluster://``.

   Each is reported as a ratio to ``single``. Every sample uses keys of its
   own instead of a flush, so the Lens's epoch markers stay put.

   And ``WAITAOF`` (Redis 7.2+; here Valkey 8.0, as Debian 12's Redis is 7.0),
   ``--waitaof-ops`` pairs per sample, against one valkey-server alone:

   * ``waitaof_local``: ``wait_aof=True``, no replica: ``WAITAOF 1 0``;
   * ``waitaof_replica``: a Valkey primary + replica, ``wait_replicas=1,
     wait_aof=True``: ``WAITAOF 1 1``, the replica's AOF fsynced too.

2. **End-to-end no-op jobs/s** (in-process Forum node with ``fsync=always`` +
   Lens on the single Redis + Worker; concurrency 1 and 8): bench/worker_bench.py's
   ``forum_run`` of this tree (durable until complete: the node's reservation
   is held, and extended by the heartbeat, until the job is complete) and, with
   ``--compare-with DIR``, the same function of another checkout of Forum
   (e.g. ``c6e7856``, where the worker acked the take before the handler ran),
   each run as a child process of its own tree's Python.

The other tree needs a virtualenv with the bench's imports (that checkout's
own ``bench`` extra: its worker_bench imports arq; this tree's needs only
``.venv``)::

    mkdir /tmp/old-forum && git archive c6e7856 | tar -x -C /tmp/old-forum
    cd /tmp/old-forum && python3 -m venv .venv && .venv/bin/pip install -q -e '.[bench]' pytest

    .venv/bin/python bench/guarantee_bench.py [--compare-with /tmp/old-forum]
        [--lens-ops 2000] [--jobs 1000] [--rounds 3]

Prints a table; writes bench/results/guarantee_bench.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from worker_bench import CONCURRENCIES, medians, rate  # noqa: E402

from forum.coordinator import Lens  # noqa: E402
from tests.fixtures.redis_server import (  # noqa: E402
    RedisClusterServers,
    RedisServer,
    _link_up,
)

RESULTS = ROOT / "bench" / "results" / "guarantee_bench.json"
LINK_DEADLINE = 10.0

#: Run in a child process with a tree's own Python: that tree's
#: bench/worker_bench.py ``forum_run``, its timings printed as JSON.
CHILD = """
import asyncio, json, logging, sys
tree, url, jobs, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path[:0] = [tree + "/bench", tree]
# The epoch notices a fresh Redis earns each run are expected here.
logging.basicConfig(level=logging.ERROR)
import worker_bench
print(json.dumps(asyncio.run(worker_bench.forum_run(url, jobs, concurrency))))
"""


# -- the Redis topologies ---------------------------------------------------------------


def wait_for_link(replica: RedisServer) -> None:
    deadline = time.monotonic() + LINK_DEADLINE
    while not _link_up(replica):
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not connect to its primary in time")
        time.sleep(0.05)


@contextlib.contextmanager
def aof_topologies(directory: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """Valkey alone, and a Valkey primary + replica, each ``appendfsync always``."""
    alone = RedisServer(directory / "valkey", server="valkey-server")
    primary = RedisServer(directory / "vprimary", server="valkey-server")
    replica = RedisServer(
        directory / "vreplica",
        extra=("--replicaof", "127.0.0.1", str(primary.port)),
        server="valkey-server",
    )
    try:
        for server in (alone, primary, replica):
            server.start()
        wait_for_link(replica)
        # A replica reports its fsyncs about once a second: a batch may wait that long.
        slow = {"wait_timeout": 1.8, "timeout": 3.0}
        yield {
            "valkey": {"url": alone.url},
            "waitaof_local": {"url": alone.url, "wait_aof": True},
            "waitaof_replica": {"url": primary.url, "wait_replicas": 1, "wait_aof": True, **slow},
        }
    finally:
        for server in (replica, primary, alone):
            server.stop()


@contextlib.contextmanager
def topologies(directory: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """Start the three topologies; yield each one's Lens options (URL and more)."""
    single = RedisServer(directory / "single")
    primary = RedisServer(directory / "primary")
    replica = RedisServer(
        directory / "replica", extra=("--replicaof", "127.0.0.1", str(primary.port))
    )
    cluster = RedisClusterServers(directory / "cluster")
    for server in cluster.servers:
        server.persistent = True  # appendfsync always on each master, as on the single one
    try:
        for server in (single, primary, replica):
            server.start()
        wait_for_link(replica)
        cluster.start()
        yield {
            "single": {"url": single.url},
            "wait_replica": {"url": primary.url, "wait_replicas": 1},
            "cluster": {"url": cluster.url},
        }
    finally:
        cluster.kill()
        for server in (replica, primary, single):
            server.stop()


# -- phase 1: the Lens ------------------------------------------------------------------


async def lens_rates(
    options: dict[str, dict[str, Any]], ops: int, rounds: int, baseline: str = "single"
) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    async with contextlib.AsyncExitStack() as stack:
        lenses = {
            name: await stack.enter_async_context(Lens.from_url(**config))
            for name, config in options.items()
        }
        sample = 0
        for callers in CONCURRENCIES:
            samples: dict[str, list[float]] = {name: [] for name in lenses}
            for _ in range(rounds):
                for name, lens in lenses.items():
                    sample += 1
                    samples[name].append(await rate(ops, callers, pair(lens, sample)))
            row: dict[str, Any] = {
                name: statistics.median(values) for name, values in samples.items()
            }
            row["samples"] = samples  # each round's figure: how noisy the machine was
            for name in lenses:
                if name != baseline:
                    row[f"{name}_vs_{baseline}"] = row[name] / row[baseline]
                    row[f"{name}_vs_{baseline}_paired"] = paired(samples[name], samples[baseline])
            results[f"callers_{callers}"] = row
    return results


def pair(lens: Lens, sample: int) -> Any:
    async def claim_complete(i: int) -> None:
        claim = await lens.claim(f"bench:{sample}:{i}", owner="bench", lease=30)
        await claim.complete()

    return claim_complete


def paired(candidate: list[float], baseline: list[float]) -> float:
    """The median of each round's ratio: a round's two figures ran back to back,
    so a slow stretch of the shared machine weighs on both alike."""
    return statistics.median(c / b for c, b in zip(candidate, baseline, strict=True))


# -- phase 2: end to end, this tree against another -------------------------------------


async def forum_run_in(tree: Path, python: Path, url: str, jobs: int, concurrency: int) -> Any:
    child = await asyncio.create_subprocess_exec(
        str(python), "-c", CHILD, str(tree), url, str(jobs), str(concurrency),
        cwd=tree, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"the end-to-end run in {tree} exited with {child.returncode}")
    return json.loads(out.decode().strip().splitlines()[-1])


async def end_to_end(
    url: str, trees: dict[str, tuple[Path, Path]], jobs: int, rounds: int
) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for concurrency in CONCURRENCIES:
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(rounds):
            for name, (tree, python) in trees.items():
                runs[name].append(await forum_run_in(tree, python, url, jobs, concurrency))
        row: dict[str, Any] = {name: medians(samples) for name, samples in runs.items()}
        row["jobs_per_s_samples"] = {
            name: [sample["jobs_per_s"] for sample in samples] for name, samples in runs.items()
        }
        if "ack_before_run" in row:
            durable, old = row["durable"], row["ack_before_run"]
            row["durable_vs_ack_before_run"] = durable["jobs_per_s"] / old["jobs_per_s"]
            row["durable_vs_ack_before_run_processing"] = (
                durable["process_per_s"] / old["process_per_s"]
            )
            rates = row["jobs_per_s_samples"]
            row["durable_vs_ack_before_run_paired"] = paired(
                rates["durable"], rates["ack_before_run"]
            )
        results[f"concurrency_{concurrency}"] = row
    return results


# -- main -------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    trees = {"durable": (ROOT, Path(sys.executable))}
    if args.compare_with is not None:
        other = args.compare_with.resolve()
        trees["ack_before_run"] = (other, other / ".venv" / "bin" / "python")
    report: dict[str, Any] = {
        "bench": "guarantee_bench",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "lens_ops": args.lens_ops,
        "waitaof_ops": args.waitaof_ops,
        "jobs": args.jobs,
        "rounds": args.rounds,
        "compare_with": str(args.compare_with) if args.compare_with else None,
        "load_average_at_start": os.getloadavg()[0],
        "redis": "appendonly yes, appendfsync always on every server",
        "note": "the machine may be shared: candidates alternate each round, medians reported",
    }
    with (
        tempfile.TemporaryDirectory(prefix="guarantee-bench-") as directory,
        topologies(Path(directory)) as options,
    ):
        report["lens"] = await lens_rates(options, args.lens_ops, args.rounds)
        with aof_topologies(Path(directory)) as aof_options:
            report["waitaof"] = await lens_rates(
                aof_options, args.waitaof_ops, args.rounds, baseline="valkey"
            )
        report["end_to_end"] = await end_to_end(
            options["single"]["url"], trees, args.jobs, args.rounds
        )
    report["load_average_at_end"] = os.getloadavg()[0]
    return report


def print_table(report: dict[str, Any]) -> None:
    print(
        f"Lens claim+complete pairs/s ({report['lens_ops']} per sample), "
        f"median of {report['rounds']} alternated rounds"
    )
    print(
        f"{'callers':>7}  {'single':>7}  {'+WAIT 1':>7}  {'ratio':>6}  {'paired':>6}  "
        f"{'cluster':>7}  {'ratio':>6}  {'paired':>6}"
    )
    for name, row in report["lens"].items():
        print(
            f"{name.split('_')[1]:>7}  {row['single']:>7.0f}  {row['wait_replica']:>7.0f}  "
            f"{row['wait_replica_vs_single']:>5.2f}x  "
            f"{row['wait_replica_vs_single_paired']:>5.2f}x  {row['cluster']:>7.0f}  "
            f"{row['cluster_vs_single']:>5.2f}x  "
            f"{row['cluster_vs_single_paired']:>5.2f}x"
        )
    print(
        f"\nWAITAOF on Valkey 8.0 ({report['waitaof_ops']} pairs per sample), pairs/s, "
        f"median of {report['rounds']} alternated rounds"
    )
    print(f"{'callers':>7}  {'valkey':>7}  {'1 0':>7}  {'ratio':>6}  {'1 1':>7}  {'ratio':>6}")
    for name, row in report["waitaof"].items():
        print(
            f"{name.split('_')[1]:>7}  {row['valkey']:>7.0f}  {row['waitaof_local']:>7.0f}  "
            f"{row['waitaof_local_vs_valkey_paired']:>5.2f}x  {row['waitaof_replica']:>7.1f}  "
            f"{row['waitaof_replica_vs_valkey_paired']:>5.3f}x"
        )
    print()
    print(
        f"{report['jobs']} no-op jobs end to end (enqueue + run), jobs/s, "
        f"median of {report['rounds']} alternated rounds"
    )
    compared = report["compare_with"] is not None
    header = f"{'c':>3}  {'durable':>7}"
    if compared:
        header += f"  {'ack-first':>9}  {'ratio':>6}  {'paired':>6}  |  processing only: ratio"
    print(header)
    for name, row in report["end_to_end"].items():
        line = f"{name.split('_')[1]:>3}  {row['durable']['jobs_per_s']:>7.0f}"
        if compared:
            line += (
                f"  {row['ack_before_run']['jobs_per_s']:>9.0f}  "
                f"{row['durable_vs_ack_before_run']:>5.2f}x  "
                f"{row['durable_vs_ack_before_run_paired']:>5.2f}x  |  {'':>17}"
                f"{row['durable_vs_ack_before_run_processing']:>5.2f}x"
            )
        print(line)
    print(
        "\nratio: of the medians; paired: the median of each round's ratio."
        f"\nload average {report['load_average_at_start']:.2f} at start, "
        f"{report['load_average_at_end']:.2f} at end; {report['note']}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lens-ops", type=int, default=2000, help="pairs per Lens sample")
    parser.add_argument(
        "--waitaof-ops", type=int, default=24, help="pairs per WAITAOF sample (~1 s a batch)"
    )
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per end-to-end run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure (median)")
    parser.add_argument(
        "--compare-with",
        type=Path,
        help="another Forum checkout (with its own .venv) to run the end-to-end phase in too",
    )
    logging.basicConfig(level=logging.ERROR)
    report = asyncio.run(main(parser.parse_args()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")
