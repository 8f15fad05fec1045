"""RSS over compaction passes at a backlog of 0, this checkout against a baseline.

Usage: ``python bench/compaction_memory_bench.py [--passes 6] [--writes 40000]
[--rounds 2] [--baseline main] [--out PATH]``

Issue 27's soak (3 nodes, 150 jobs/s, backlog 0) saw each node's RSS at
78 MB until the first compaction, then 186-213 MB, stepping up at later
passes while the Strand stayed under 9 MB. This is that shape in one
process, without the network: a Forum (``--fsync never``, 8 MiB segments)
is sent ``--writes`` 150-byte tuples, every one taken at once (the backlog
stays 0), then one compaction pass runs through the node's Compactor (the
current segment sealed first, as ``POST /v1/compact`` does); ``--passes``
times. The process's RSS (``VmRSS``) is read after each pass (and a
``gc.collect()``), and before the first.

The same through a real ``forum serve`` (``--fsync never``, background
compaction off): the writes and takes over the stream (``ForumClient``),
each pass by ``POST /v1/compact``, the node's RSS read once steady.

Each source runs in a process of its own, importing from its tree alone
(``bench/trees.py``): the baseline (``git archive`` of ``--baseline``), this
checkout, and this checkout with ``PYTHONMALLOC=malloc`` (Python's small
objects from glibc's allocator, which gives them back, rather than from
its own arenas, which a few survivors of a pass keep), alternated for
``--rounds`` rounds; the table shows each pass's median over the rounds,
and the seconds the writes and takes took (their cost). Prints a table; writes JSON to
``bench/results/compaction_memory_bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

# Run as a child (trees.run_child), ``forum`` is the source's under test.
from memory_bench import forum_file, rss_bytes, steady_rss  # noqa: E402
from trees import export, pythonpath, run_child  # noqa: E402

from forum.deploy.processes import NodeService  # noqa: E402
from forum.node.client.remote import ForumClient  # noqa: E402
from forum.node.core.space import Pattern  # noqa: E402
from forum.node.space.compactor import CompactionPolicy, Compactor  # noqa: E402
from forum.node.space.forum import Forum  # noqa: E402
from forum.node.storage.strand import Strand, StrandConfig  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "compaction_memory_bench.json"
#: What runs, and the environment it runs with (the baseline's source, or ours).
VARIANTS: dict[str, dict[str, str]] = {
    "baseline": {},
    "this": {},
    "this_malloc": {"PYTHONMALLOC": "malloc"},
}
PAYLOAD = 150
BATCH = 1000
MiB = 1024 * 1024


def batch(n: int) -> list[bytes]:
    """:data:`BATCH` unique payloads of :data:`PAYLOAD` bytes from number ``n``."""
    return [(b"task/%d/" % (n + i)).ljust(PAYLOAD, b"x") for i in range(BATCH)]


async def serve(
    source: Path, env: dict[str, str], root: Path, passes: int, writes: int
) -> dict[str, Any]:
    """A real ``forum serve`` from ``source``: its RSS before the first pass and after each."""
    args = ["--fsync", "never", "--compact-interval", "0"]
    service = NodeService("serve", root, args, env={"PYTHONPATH": pythonpath(source), **env})
    await service.start()
    try:
        if service.pid is None:
            raise RuntimeError("forum serve has no pid")
        async with ForumClient(service.url, timeout=120) as client:
            rss = [await steady_rss(service.pid)]
            dropped = []
            n = 0
            churn = 0.0
            for _ in range(passes):
                started = time.perf_counter()
                for _ in range(0, writes, BATCH):
                    await client.write_many(batch(n))
                    n += BATCH
                    taken = await client.take_many(Pattern(b"task/"), BATCH)
                    if len(taken) != BATCH:
                        raise RuntimeError(f"took {len(taken)} of {BATCH}")
                churn += time.perf_counter() - started
                dropped.append((await client.compact()).entries_dropped)
                rss.append(await steady_rss(service.pid))
            entries = (await client.status()).entries
    finally:
        await service.stop()
    return {"rss": rss, "dropped": dropped, "entries_left": entries, "churn_seconds": churn}


async def child(passes: int, writes: int) -> dict[str, Any]:
    """In the child: the RSS before the first pass and after each one."""
    pattern = Pattern(b"task/")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = (
            StrandConfig()
            .with_storage(Path(tmp))
            .with_node_name("bench")
            .with_fsync("never")
            .with_segment_bytes(8 * MiB)
        )
        async with Forum(await Strand.open(cfg), remote_delay=0) as forum:
            compactor = Compactor(forum, CompactionPolicy(interval=0))
            rss = [rss_bytes(os.getpid())]
            dropped = []
            n = 0
            churn = 0.0
            for _ in range(passes):
                started = time.perf_counter()
                for _ in range(0, writes, BATCH):
                    await forum.write_many(batch(n))
                    n += BATCH
                    taken = await forum.take_many(pattern, BATCH)
                    if len(taken) != BATCH:
                        raise RuntimeError(f"took {len(taken)} of {BATCH}")
                churn += time.perf_counter() - started
                report = await compactor.compact_now()
                dropped.append(report.entries_dropped)
                gc.collect()
                rss.append(rss_bytes(os.getpid()))
            entries = forum.strand.stats().entries
    return {
        "node": forum_file(),
        "rss": rss,
        "dropped": dropped,
        "entries_left": entries,
        "churn_seconds": churn,
    }


def main(args: argparse.Namespace) -> dict[str, Any]:
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    report: dict[str, Any] = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "baseline": args.baseline,
        "head": head,
        "passes": args.passes,
        "writes_per_pass": args.writes,
        "rounds": args.rounds,
        "runs": {way: {name: [] for name in VARIANTS} for way in ("in_process", "serve")},
    }
    with tempfile.TemporaryDirectory() as tmp:
        baseline = export(args.baseline, Path(tmp))
        for i in range(args.rounds):
            for name, env in VARIANTS.items():  # alternated: load drifts hit each
                source = baseline if name == "baseline" else ROOT
                runs = report["runs"]
                in_process = run_child(
                    Path(__file__), "child", source, [args.passes, args.writes], env
                )
                runs["in_process"][name].append(in_process)
                root = Path(tmp) / f"{name}-{i}"
                runs["serve"][name].append(
                    asyncio.run(serve(source, env, root, args.passes, args.writes))
                )
    for way, by_source in report["runs"].items():
        report[way] = {
            name: {
                "median_rss_mb": [
                    round(statistics.median(run["rss"][i] for run in runs) / MiB, 1)
                    for i in range(args.passes + 1)
                ],
                "entries_left": max(run["entries_left"] for run in runs),
                "median_churn_seconds": round(
                    statistics.median(run["churn_seconds"] for run in runs), 2
                ),
            }
            for name, runs in by_source.items()
        }
    return report


def print_table(report: dict[str, Any]) -> None:
    print(
        f"RSS (MB, median of {report['rounds']}) over compaction passes, "
        f"{report['writes_per_pass']} writes each taken per pass, backlog 0"
    )
    for way in ("in_process", "serve"):
        columns = [report[way][name] for name in VARIANTS]
        print(f"  {way:<16}" + "".join(f"{name:>14}" for name in VARIANTS))
        for i in range(report["passes"] + 1):
            label = "before any" if i == 0 else f"after pass {i}"
            print(f"  {label:<16}" + "".join(f"{c['median_rss_mb'][i]:>14.1f}" for c in columns))
        grown = [c["median_rss_mb"][-1] - c["median_rss_mb"][0] for c in columns]
        print(f"  {'last - first':<16}" + "".join(f"{g:>+14.1f}" for g in grown))
        churn = [c["median_churn_seconds"] for c in columns]
        print(f"  {'churn seconds':<16}" + "".join(f"{t:>14.2f}" for t in churn))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=6)
    parser.add_argument("--writes", type=int, default=40_000, help="writes (each taken) per pass")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", default="main", help="the git ref to compare against")
    parser.add_argument("--out", type=Path, default=RESULTS)
    arguments = parser.parse_args()
    result = main(arguments)
    print_table(result)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(result, indent=2) + "\n")
