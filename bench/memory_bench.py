"""Memory per live tuple in a real ``forum serve``, this checkout against a baseline.

Usage: ``python bench/memory_bench.py [--tuples 300000] [--live 1000000]
[--baseline main] [--out PATH]``

For each of two sources, the baseline (``git archive`` of ``--baseline``,
unpacked in a temporary directory) and this checkout, in the same run:

rss       a ``forum serve`` (``--fsync never``) run from that source
          (``PYTHONPATH``) is sent ``--tuples`` live 100-byte tuples through
          the HTTP API (``ForumClient.write_many``, batches of 1,000, 4
          clients). Its RSS (``VmRSS`` in ``/proc/<pid>/status``) before and
          after, once it is steady: the growth per tuple, less the 100 bytes
          of payload, is the figure (issue 13's target: <= 150 B).
where     in a child process on that source, the same writes into an
          in-process Forum under ``tracemalloc``: bytes per tuple by the line
          that allocated them (the top lines; Python's own sizes, before the
          allocator's rounding).
latency   in a child process on that source, take and read p50/p99 at
          ``--live`` live tuples (``node_bench.latency_at_scale``: the index
          step alone and the whole ``Forum.take``, three patterns).

Prints a table; writes JSON to ``bench/results/memory_bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

# Run as a child (trees.run_child), ``forum`` is the source's under test.
from node_bench import latency_at_scale  # noqa: E402
from trees import export, pythonpath, run_child, tree_of_forum  # noqa: E402

from forum.deploy.processes import NodeService  # noqa: E402
from forum.node.client.remote import ForumClient  # noqa: E402
from forum.node.core.space import Pattern  # noqa: E402
from forum.node.space.forum import Forum  # noqa: E402
from forum.node.storage.strand import Strand, StrandConfig  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "memory_bench.json"
PAYLOAD = 100
BATCH = 1000
CLIENTS = 4


def payloads(start: int, stop: int) -> list[bytes]:
    """Unique 100-byte payloads (``job/`` and a number, padded)."""
    return [(b"job/%010d/" % i).ljust(PAYLOAD, b"x") for i in range(start, stop)]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def steady_rss(pid: int, wait: float = 0.5, rounds: int = 20) -> int:
    """RSS once two readings ``wait`` s apart agree (the node is idle)."""
    last = rss_bytes(pid)
    for _ in range(rounds):
        await asyncio.sleep(wait)
        now = rss_bytes(pid)
        if now == last:
            return now
        last = now
    return last


async def measure_rss(source: Path, root: Path, tuples: int) -> dict[str, Any]:
    node = NodeService("rss", root, ["--fsync", "never"], env={"PYTHONPATH": pythonpath(source)})
    await node.start()
    try:
        assert node.pid is not None
        async with ForumClient(node.url, timeout=120) as client:
            # Warm up what is made once (connections, buffers, code paths).
            warm = payloads(-2 * BATCH, 0)
            await client.write_many(warm)
            await client.take_many(Pattern(b""), len(warm))
            await client.write_many(warm)
            await client.take_many(Pattern(b""), len(warm))
            before = await steady_rss(node.pid)
            started = time.perf_counter()
            next_batch = iter(range(0, tuples, BATCH))

            async def writer() -> None:
                for start in next_batch:
                    await client.write_many(payloads(start, min(tuples, start + BATCH)))

            await asyncio.gather(*(writer() for _ in range(CLIENTS)))
            seconds = time.perf_counter() - started
            after = await steady_rss(node.pid)
            live = (await client.status()).live
    finally:
        await node.stop()
    if live != tuples:
        raise RuntimeError(f"{live} live tuples, not {tuples}")
    return {
        "tuples": tuples,
        "rss_before": before,
        "rss_after": after,
        "bytes_per_tuple": (after - before) / tuples,
        "beyond_payload": (after - before) / tuples - PAYLOAD,
        "write_seconds": seconds,
    }


# -- the children: run with the source under test first on sys.path -----------


async def child_where(tuples: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = StrandConfig().with_storage(Path(tmp)).with_fsync("never").with_node_name("where")
        async with Forum(await Strand.open(cfg)) as forum:
            await forum.write_many(payloads(-BATCH, 0))
            await forum.take_many(Pattern(b""), BATCH)
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            for start in range(0, tuples, BATCH):
                await forum.write_many(payloads(start, min(tuples, start + BATCH)))
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
    stats = after.compare_to(before, "lineno")
    root = f"{tree_of_forum()}/"
    lines = [
        {
            "line": f"{s.traceback[0].filename.removeprefix(root)}:{s.traceback[0].lineno}",
            "bytes_per_tuple": s.size_diff / tuples,
            "objects_per_tuple": s.count_diff / tuples,
        }
        for s in stats[:8]
    ]
    total = sum(s.size_diff for s in stats) / tuples
    return {"node": forum_file(), "total_per_tuple": total, "top": lines}


async def child_latency(live: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        samples = max(10, min(2000, live // 400))
        return {"node": forum_file(), **await latency_at_scale(Path(tmp), live, samples)}


def forum_file() -> str:
    """The file this process's :class:`Forum` comes from (the source's)."""
    return str(sys.modules[Forum.__module__].__file__)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "payload": PAYLOAD,
        "baseline": args.baseline,
        "head": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"baseline": export(args.baseline, Path(tmp)), "this": ROOT}
        for name, source in sources.items():
            entry: dict[str, Any] = {"source": str(source)}
            entry["rss"] = await measure_rss(source, Path(tmp) / name, args.tuples)
            entry["where"] = run_child(Path(__file__), "child_where", source, [args.tuples])
            if args.live:
                entry["latency"] = run_child(Path(__file__), "child_latency", source, [args.live])
            report[name] = entry
    return report


def print_table(report: dict[str, Any]) -> None:
    base, this = report["baseline"], report["this"]
    print(f"RSS per live {PAYLOAD}-byte tuple beyond its payload ({base['rss']['tuples']} tuples)")
    print(f"  {'':<28}{'baseline':>12}{'this':>12}")
    for key, label in (("beyond_payload", "forum serve, RSS"),):
        print(f"  {label:<28}{base['rss'][key]:>12.0f}{this['rss'][key]:>12.0f}")
    label = "in-process, tracemalloc"
    base_t, this_t = base["where"]["total_per_tuple"], this["where"]["total_per_tuple"]
    print(f"  {label:<28}{base_t - PAYLOAD:>12.0f}{this_t - PAYLOAD:>12.0f}")
    for name in ("baseline", "this"):
        print(f"where the bytes go ({name}), per tuple:")
        for line in report[name]["where"]["top"]:
            print(f"  {line['bytes_per_tuple']:>7.1f} B {line['objects_per_tuple']:>5.2f} obj  "
                  f"{line['line']}")  # fmt: skip
    if "latency" in this:
        print("latency (microseconds)")
        print(f"  {'pattern / step':<28}{'baseline':>12}{'this':>12}")
        for pattern, figures in this["latency"].items():
            if pattern == "node":
                continue
            for key in sorted(figures):
                if key.endswith("p99_us"):
                    was = base["latency"][pattern][key]
                    print(f"  {pattern + ' ' + key:<28}{was:>12.1f}{figures[key]:>12.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tuples", type=int, default=300_000)
    parser.add_argument("--live", type=int, default=1_000_000, help="0: no latency phase")
    parser.add_argument("--baseline", default="main", help="the git ref to compare against")
    parser.add_argument("--out", type=Path, default=RESULTS)
    arguments = parser.parse_args()
    result = asyncio.run(main(arguments))
    print_table(result)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(result, indent=2))
