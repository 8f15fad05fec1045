"""What comparing content costs an idle cluster: anti-entropy with digests against without.

Usage: ``.venv/bin/python bench/digest_bench.py --main-tree DIR [--backlogs 0,20000]
[--rounds 3] [--idle 10] [--out PATH]``

Each run starts three ``forum serve`` nodes in a mesh (``forum.deploy.cluster``,
no Redis used), writes ``backlog`` live tuples on each (so every node holds
3 x backlog entries above every floor: the digests cover all of them),
waits until the three vectors agree, then measures the nodes' CPU (user +
system, ``/proc/<pid>/stat``) over ``--idle`` seconds with nothing to do:
anti-entropy rounds every second with each peer, and membership. Variants:

digest   this tree: every first pull of a round carries the asker's digest
         of the peer's origin, which the peer compares with its own
         (:mod:`forum.replication.digest`: per-block XORs kept as entries arrive)
main     the tree in ``--main-tree DIR`` (e.g. ``git worktree add DIR
         <commit>``): its nodes run with ``PYTHONPATH=DIR``; vectors only

The variants alternate within a round (the order reversed every other
round), so both see the same machine. Medians over rounds. First, in this
process, what one entry's hash costs (``forum.replication.digest.entry_hash`` of a
Write of 104 bytes, median of 5 runs of 20,000): every node pays it for each
entry it comes to hold. Prints a table; writes
``bench/results/digest_bench.json``.

Target (issue 27): the digest does not make idle anti-entropy noticeably
dearer (incremental digests, not a rehash of the log each round).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import timeit
from dataclasses import asdict, dataclass
from pathlib import Path

from scaling_bench import cpu_seconds  # a sibling script: bench/ is on sys.path when run
from trees import pythonpath

from forum.deploy.cluster import Cluster, ClusterConfig
from forum.node.client.remote import ForumClient
from forum.node.core.entries import EntryId, Write
from forum.replication.digest import entry_hash

RESULTS = Path(__file__).parent / "results" / "digest_bench.json"
_BATCH = 1_000


@dataclass(frozen=True, slots=True)
class Run:
    variant: str
    backlog: int
    idle_node_cpu_ms_per_s: float


async def one_run(variant: str, backlog: int, idle: float, main_tree: Path | None) -> Run:
    tree = {"PYTHONPATH": pythonpath(main_tree)} if variant == "main" and main_tree else {}
    cfg = ClusterConfig(nodes=3, workers=0, node_env=tree)
    async with Cluster(cfg) as cluster:
        clients = [ForumClient(node.url, timeout=60) for node in cluster.nodes]
        try:
            for node, client in zip(cluster.nodes, clients, strict=True):
                for first in range(0, backlog, _BATCH):
                    count = min(_BATCH, backlog - first)
                    await client.write_many([b"job/%s-%d" % (node.name.encode(), first + i)
                                             for i in range(count)])  # fmt: skip
            await agreed(clients)
            await asyncio.sleep(2.0)  # the last rounds of the catch-up end
            before = cpu_seconds(cluster.nodes)
            await asyncio.sleep(idle)
            spent = cpu_seconds(cluster.nodes) - before
        finally:
            for client in clients:
                await client.aclose()
    return Run(variant, backlog, round(1000 * spent / idle, 2))


async def agreed(clients: list[ForumClient], deadline: float = 120.0) -> None:
    """Until the nodes' vectors are equal."""
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    while True:
        vectors = [(await c.status()).vector for c in clients]
        if all(v == vectors[0] for v in vectors):
            return
        if loop.time() > until:
            raise TimeoutError("the nodes' vectors did not agree")
        await asyncio.sleep(0.2)


def hash_cost_us() -> float:
    """Microseconds per ``entry_hash`` of a typical Write (median of 5 runs)."""
    write = Write(EntryId("node-a-1f2e3d4c", 123_456), b"job/" + b"x" * 100)
    runs = [timeit.timeit(lambda: entry_hash(write), number=20_000) for _ in range(5)]
    return round(statistics.median(runs) / 20_000 * 1e6, 2)


async def main(args: argparse.Namespace) -> dict[str, object]:
    hash_us = hash_cost_us()
    print(f"entry_hash: {hash_us} us per entry", file=sys.stderr)
    runs: list[Run] = []
    variants = ["digest", "main"]
    for round_ in range(args.rounds):
        order = variants if round_ % 2 == 0 else variants[::-1]
        for backlog in args.backlogs:
            for variant in order:
                run = await one_run(variant, backlog, args.idle, args.main_tree)
                runs.append(run)
                print(f"round {round_ + 1} backlog={backlog} {variant}: "
                      f"{run.idle_node_cpu_ms_per_s:.1f} ms/s", file=sys.stderr)  # fmt: skip
    summary = {
        str(backlog): {
            variant: statistics.median(
                [
                    r.idle_node_cpu_ms_per_s
                    for r in runs
                    if r.backlog == backlog and r.variant == variant
                ]
                or [0.0]
            )
            for variant in variants
        }
        for backlog in args.backlogs
    }
    return {
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
        "idle_s": args.idle,
        "main_tree": str(args.main_tree),
        "entry_hash_us": hash_us,
        "summary_idle_node_cpu_ms_per_s": summary,
        "runs": [asdict(r) for r in runs],
    }


def report(summary: dict[str, dict[str, float]]) -> None:
    print(f"{'backlog/node':>12} {'digest ms/s':>11} {'main ms/s':>9} {'ratio':>6}")
    for backlog, row in summary.items():
        ratio = row["digest"] / row["main"] if row["main"] else float("nan")
        print(f"{backlog:>12} {row['digest']:>11.1f} {row['main']:>9.1f} {ratio:>6.2f}")


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--main-tree", type=Path, required=True, help="the tree to compare with")
    parser.add_argument("--backlogs", type=_ints, default=[0, 20_000], help="live tuples per node")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds idle measured")
    parser.add_argument("--out", type=Path, default=RESULTS)
    arguments = parser.parse_args()
    if not (arguments.main_tree / "forum" / "__init__.py").is_file():
        parser.error(f"--main-tree {arguments.main_tree}: not a Forum tree (no forum/__init__.py)")
    results = asyncio.run(main(arguments))
    report(results["summary_idle_node_cpu_ms_per_s"])  # type: ignore[arg-type]
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {arguments.out}", file=sys.stderr)
