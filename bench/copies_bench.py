"""What ``copies`` costs: write latency and throughput at copies 1, 2 and 3 on
a cluster of three real ``forum serve`` nodes (a full mesh, fsync ``always``),
with 1 and 16 clients.

Usage: ``python bench/copies_bench.py [--seconds 1.5] [--rounds 3]
[--copies 1 2 3] [--fsync always] [--tree DIR] [--out PATH]``

Each client is a ``ForumClient`` of node A (over the stream) looping
``write(payload, copies=c)`` for ``--seconds``; each write's latency is
noted. Every round measures each cell (copies x clients) once, in an order
turned by one cell per round, so load that comes and goes on a shared machine
falls on every cell alike; a cell's figures are the medians over the rounds
of its p50, p99 and writes per second. Prints a table and writes JSON
(``bench/results/copies_bench.json``).

``--tree DIR`` runs the nodes from another checkout (``bench/trees.py``): on
one without ``copies`` (such as main before it) only copies 1 is measured,
which is today's write, to compare with this tree's copies 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from forum.deploy.processes import NodeService
from forum.node.client.remote import ForumClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import pythonpath

OUT = Path(__file__).resolve().parent / "results" / "copies_bench.json"
COPIES = (1, 2, 3)
CLIENTS = (1, 16)
#: A replication tuned as the tests tune it: rounds every 0.2 s, quick to see peers.
REPLICATION = {"FORUM_REPL_ANTI_ENTROPY_INTERVAL": "0.2", "FORUM_REPL_DEAD_AFTER": "2"}


async def _cell(url: str, copies: int, clients: int, seconds: float) -> dict[str, float]:
    """``clients`` clients writing with ``copies`` for ``seconds``: latency
    percentiles (ms) and writes per second."""
    latencies: list[float] = []
    options: dict[str, Any] = {} if copies == 1 else {"copies": copies}
    deadline = 0.0  # set once every client is warm: the warm-up is not the cell's time

    async def loop(client: ForumClient, n: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            await client.write(b"job/%d/%d" % (n, i), **options)
            latencies.append(time.perf_counter() - started)
            i += 1

    made = [ForumClient(url) for _ in range(clients)]
    try:
        for client in made:
            await client.write(b"warm", **options)  # the stream opened, not timed
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(*(loop(c, n) for n, c in enumerate(made)))
        elapsed = time.perf_counter() - started
    finally:
        for client in made:
            await client.aclose()
    ordered = sorted(latencies)
    return {
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "writes_per_s": len(latencies) / elapsed,
    }


async def _peers_alive(url: str, count: int) -> None:
    async with ForumClient(url) as client:
        for _ in range(400):
            peers = (await client.status()).peers
            if len(peers) == count and all(p.state == "alive" and p.origin for p in peers):
                return
            await asyncio.sleep(0.05)
    raise TimeoutError(f"{url} did not see its {count} peers alive")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    env = dict(REPLICATION)
    if args.tree is not None:
        env["PYTHONPATH"] = pythonpath(args.tree)
    copies = tuple(args.copies) if args.tree_has_copies else (1,)
    cells = [(c, k) for c in copies for k in CLIENTS]
    figures: dict[tuple[int, int], list[dict[str, float]]] = {cell: [] for cell in cells}
    with tempfile.TemporaryDirectory() as root:
        nodes = [NodeService(name, Path(root) / name, env=env) for name in "abc"]
        for node in nodes:
            node.args = ["--fsync", args.fsync]
            node.args += [a for peer in nodes if peer is not node for a in ("--peer", peer.url)]
        try:
            await asyncio.gather(*(node.start() for node in nodes))
            await _peers_alive(nodes[0].url, 2)
            await _cell(nodes[0].url, 1, 16, 0.5)  # warm up
            for round_ in range(args.rounds):
                turned = cells[round_ % len(cells) :] + cells[: round_ % len(cells)]
                for cell in turned:
                    figures[cell].append(await _cell(nodes[0].url, *cell, args.seconds))
        finally:
            for node in nodes:
                await node.stop()
    rows = []
    for (c, k), runs in figures.items():
        median = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
        rows.append({"copies": c, "clients": k, **{n: round(v, 3) for n, v in median.items()}})
    return {
        "nodes": 3,
        "fsync": args.fsync,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "tree": None if args.tree is None else str(args.tree),
        "machine": "shared (2 cores, other engineers' runs alongside): short runs, medians",
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="per cell and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fsync", choices=("always", "interval", "never"), default="always")
    parser.add_argument("--copies", type=int, nargs="+", default=list(COPIES))
    parser.add_argument("--tree", type=Path, default=None, help="run the nodes from this checkout")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.tree_has_copies = (
        args.tree is None
        or (args.tree / "node" / "forum" / "node" / "space" / "copies.py").is_file()
    )
    report = asyncio.run(run(args))
    print(f"{'copies':>6} {'clients':>7} {'p50 ms':>8} {'p99 ms':>8} {'writes/s':>9}")
    for row in report["rows"]:
        print(
            f"{row['copies']:>6} {row['clients']:>7} {row['p50_ms']:>8.2f} "
            f"{row['p99_ms']:>8.2f} {row['writes_per_s']:>9.0f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
