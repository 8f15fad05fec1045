"""Compaction: a churned cluster's Strands stay the size of the backlog.

Usage: ``python bench/compaction_bench.py [--jobs 1000000] [--backlog 10000]
[--rounds 3] [--ops 100000] [--out PATH]``

Three ``forum serve`` nodes peered with each other (``fsync always``,
compaction on its defaults). Measured:

size        ``--jobs`` jobs of 1 KiB written (batches of 100, spread over the
            nodes) and taken (batches of 100, from any node), so that
            ``--backlog`` stay live at the end. Once the cluster converged,
            each node is asked for one pass (``POST /v1/compact``, as the
            background compactor would do by itself); per node, its Strand's
            bytes against the bytes of the backlog's entries (one Write record
            each), and against the target: 2x the backlog plus one segment.
restart     one node stopped (SIGTERM) and started again: seconds from the
            process start to ``/readyz`` 200, with the compacted Strand (and,
            with ``--uncompacted``, the same for a cluster that churned the
            same jobs with compaction off: the history replayed in full).
throughput  write+take pairs per second (16 clients, batches of 100) on a
            cluster whose compactor looks every 0.5 s at a 10% dead share,
            so that it runs all the while, against the same cluster with
            compaction off; ``--rounds`` alternated rounds of ``--ops`` pairs,
            medians.

Targets (issue 12): Strand <= 2x the backlog's bytes plus one segment; restart
<= 1 s; throughput with compaction running >= 0.9x without. Prints a table;
writes JSON to ``bench/results/compaction_bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forum.deploy.processes import NodeService  # noqa: E402
from forum.node.client.remote import ForumClient  # noqa: E402
from forum.node.core.codec import encode_entry  # noqa: E402
from forum.node.core.entries import (  # noqa: E402
    EntryId,
    Write,
)
from forum.node.core.space import Pattern  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "compaction_bench.json"
PAYLOAD = 1024
SEGMENT = 64 * 1024 * 1024
JOBS = Pattern(b"job/")


class Cluster:
    """Three peered ``forum serve`` nodes under ``root``, with ``args`` each."""

    def __init__(self, root: Path, args: Sequence[str]) -> None:
        self.nodes = [NodeService(name, root, args) for name in "abc"]
        self.clients: list[ForumClient] = []

    async def __aenter__(self) -> Cluster:
        for node in self.nodes:
            node.args += [f"--peer={p.url}" for p in self.nodes if p is not node]
        async with asyncio.TaskGroup() as group:
            for node in self.nodes:
                group.create_task(node.start())
        self.clients = [ForumClient(n.url, timeout=120, pool_size=64) for n in self.nodes]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for client in self.clients:
            await client.aclose()
        async with asyncio.TaskGroup() as group:
            for node in self.nodes:
                group.create_task(node.stop())

    async def converged(self, deadline: float = 300.0) -> None:
        started = time.monotonic()
        while True:
            statuses = [await c.status() for c in self.clients]
            vectors = {tuple(sorted(s.vector.items())) for s in statuses}
            if len({s.live for s in statuses}) == 1 and len(vectors) == 1:
                return
            if time.monotonic() - started > deadline:
                raise TimeoutError(f"not converged in {deadline} s")
            await asyncio.sleep(0.2)

    async def compact(self) -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as http:
            reports = []
            for node in self.nodes:
                async with http.post(f"{node.url}/v1/compact") as response:
                    response.raise_for_status()
                    reports.append(await response.json())
            return reports


async def churn(cluster: Cluster, jobs: int, backlog: int, clients: int = 16) -> None:
    """Write ``jobs`` jobs and take all but ``backlog`` of them, 16 clients at once."""
    body = b"x" * (PAYLOAD - 16)
    to_take = jobs - backlog
    written = 0
    # By id: a tuple two nodes both handed out (a double take) is taken once.
    taken_ids: set[EntryId] = set()
    rng = random.Random(7)

    async def one(worker: int) -> None:
        nonlocal written
        while written < jobs or len(taken_ids) < to_take:
            taken = len(taken_ids)
            client = cluster.clients[rng.randrange(3)]
            if written < jobs and written - taken < backlog + 5000:
                n = min(100, jobs - written)
                written += n
                await client.write_many([b"job/%012d" % (written - i) + body for i in range(n)])
            elif taken < to_take:
                n = min(100, to_take - taken)
                got = await client.take_many(JOBS, n)
                taken_ids.update(t.id for t in got)
                if not got:
                    await asyncio.sleep(0.01)  # the writes are on another node yet
            else:
                return

    await asyncio.gather(*(one(i) for i in range(clients)))


def entry_bytes() -> int:
    """A backlog tuple's Write record on disk: frame (8) + its msgpack body."""
    return 8 + len(encode_entry(Write(EntryId("a-12345678", 10**6), b"j" * PAYLOAD)))


async def restart_seconds(node: NodeService) -> float:
    await node.stop()
    started = time.perf_counter()
    await node.start(deadline=600)  # an uncompacted Strand replays its whole history
    return time.perf_counter() - started


async def size_and_restart(
    root: Path, jobs: int, backlog: int, uncompacted: bool
) -> dict[str, Any]:
    async with Cluster(root / "size", []) as cluster:
        await churn(cluster, jobs, backlog)
        await cluster.converged()
        before = [await c.status() for c in cluster.clients]
        reports = await cluster.compact()
        after = [await c.status() for c in cluster.clients]
        restart = await restart_seconds(cluster.nodes[0])
    plain_bytes = plain_restart = None
    if uncompacted:
        # The same backlog, never compacted: the full history replayed at start.
        async with Cluster(root / "plain", ["--compact-interval=0"]) as plain:
            await churn(plain, jobs, backlog)
            await plain.converged()
            plain_bytes = (await plain.clients[0].status()).strand_bytes
            plain_restart = await restart_seconds(plain.nodes[0])
    # The backlog as it is at the end (live on every node, the same once converged).
    backlog_bytes = after[0].live * entry_bytes()
    return {
        "backlog": after[0].live,
        "backlog_bytes": backlog_bytes,
        "target_bytes": 2 * backlog_bytes + SEGMENT,
        "nodes": [
            {
                "strand_bytes_before": b.strand_bytes,
                "strand_bytes_after": a.strand_bytes,
                "entries_after": a.entries,
                "live": a.live,
                "vs_backlog": a.strand_bytes / backlog_bytes,
                "pass": r,
            }
            for b, a, r in zip(before, after, reports, strict=True)
        ],
        "restart_seconds": restart,
        "uncompacted_strand_bytes": plain_bytes,
        "uncompacted_restart_seconds": plain_restart,
    }


async def pairs_per_second(cluster: Cluster, ops: int, clients: int = 16) -> float:
    body = b"y" * (PAYLOAD - 16)
    per = ops // clients // 100

    async def one(worker: int) -> None:
        client = cluster.clients[worker % 3]
        for i in range(per):
            await client.write_many([b"job/t%d/%d/%d" % (worker, i, k) + body for k in range(100)])
            got = 0
            while got < 100:
                got += len(await client.take_many(JOBS, 100 - got))

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(clients)))
    return per * clients * 100 / (time.perf_counter() - started)


async def throughput(root: Path, rounds: int, ops: int) -> dict[str, Any]:
    busy = ["--compact-interval=0.5", "--compact-dead-ratio=0.1"]
    samples: dict[str, list[float]] = {"compacting": [], "off": []}
    async with (
        Cluster(root / "busy", busy) as compacting,
        Cluster(root / "off", ["--compact-interval=0"]) as off,
    ):
        for _ in range(rounds):
            for name, cluster in (("compacting", compacting), ("off", off)):
                samples[name].append(await pairs_per_second(cluster, ops))
        passes = [(await c.status()).compactions for c in compacting.clients]
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {
        **medians,
        "ratio": medians["compacting"] / medians["off"],
        "samples": samples,
        "passes_while_measured": passes,
    }


@contextlib.asynccontextmanager
async def workdir() -> AsyncIterator[Path]:
    with tempfile.TemporaryDirectory(prefix="compaction-bench-") as directory:
        yield Path(directory)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "bench": "compaction_bench",
        "python": platform.python_version(),
        "jobs": args.jobs,
        "backlog": args.backlog,
        "payload": PAYLOAD,
        "load_average_at_start": os.getloadavg()[0],
    }
    async with workdir() as root:
        report["size"] = await size_and_restart(root, args.jobs, args.backlog, args.uncompacted)
        args.out.write_text(json.dumps(report, indent=2) + "\n")  # kept should the rest fail
        report["throughput"] = await throughput(root, args.rounds, args.ops)
    report["load_average_at_end"] = os.getloadavg()[0]
    return report


def print_table(report: dict[str, Any]) -> None:
    size = report["size"]
    print(
        f"{report['jobs']} jobs of {report['payload']} B, backlog {size['backlog']} "
        f"({size['backlog_bytes']} B of entries); target <= {size['target_bytes']} B"
    )
    print(f"{'node':>4}  {'before':>12}  {'after':>10}  {'x backlog':>9}  {'dropped':>9}")
    for name, node in zip("abc", size["nodes"], strict=True):
        print(
            f"{name:>4}  {node['strand_bytes_before']:>12}  {node['strand_bytes_after']:>10}  "
            f"{node['vs_backlog']:>8.2f}x  {node['pass']['entries_dropped']:>9}"
        )
    restart = f"restart to /readyz: {size['restart_seconds']:.2f} s compacted"
    if size["uncompacted_restart_seconds"] is not None:
        restart += (
            f", {size['uncompacted_restart_seconds']:.2f} s for the uncompacted Strand "
            f"({size['uncompacted_strand_bytes']} B)"
        )
    print(restart)
    t = report["throughput"]
    print(
        f"write+take pairs/s, 16 clients: {t['compacting']:.0f} compacting, {t['off']:.0f} off "
        f"= {t['ratio']:.2f}x (passes meanwhile: {t['passes_while_measured']})"
    )
    print(
        f"load average {report['load_average_at_start']:.2f} at start, "
        f"{report['load_average_at_end']:.2f} at end"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=100_000, help="pairs per throughput sample")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--uncompacted",
        action="store_true",
        help="also churn a cluster with compaction off and time its restart (twice as long)",
    )
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(main(args))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
