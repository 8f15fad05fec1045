"""Plain writes against writes with options (ttl and priority), through a
real ``forum serve`` node, over the stream and over HTTP, in one run.

Usage: ``python bench/write_options_bench.py [--writes 3000] [--clients 16]
[--repeats 3] [--fsync never] [--out PATH]``

Each transport writes ``--writes`` tuples with ``--clients`` in flight, plain
and with ``ttl=3600, priority=5`` in turn, ``--repeats`` times; the median
rate of each is kept. Prints a table (and the ratio options / plain per
transport) and writes JSON (``bench/results/write_options_bench.json``).
The node is started here on a free loopback port and stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from forum.node.client.remote import ForumClient, Transport

OUT = Path(__file__).resolve().parent / "results" / "write_options_bench.json"
OPTIONS: dict[str, dict[str, Any]] = {"plain": {}, "ttl+priority": {"ttl": 3600.0, "priority": 5}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _rate(client: ForumClient, writes: int, clients: int, options: dict[str, Any]) -> float:
    room = asyncio.Semaphore(clients)

    async def one(i: int) -> None:
        async with room:
            await client.write(b"job/%d" % i, **options)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(writes)))
    return writes / (time.perf_counter() - started)


async def measure(url: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    report: dict[str, dict[str, float]] = {}
    transports: tuple[Transport, ...] = ("stream", "http")
    for transport in transports:
        async with ForumClient(url, transport=transport) as client:
            await _rate(client, args.writes // 5, args.clients, {})  # warm up
            rates: dict[str, list[float]] = {name: [] for name in OPTIONS}
            for _ in range(args.repeats):
                for name, options in OPTIONS.items():
                    rates[name].append(await _rate(client, args.writes, args.clients, options))
        report[transport] = {name: statistics.median(r) for name, r in rates.items()}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fsync", choices=("always", "interval", "never"), default="never")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    port = _free_port()
    with tempfile.TemporaryDirectory() as data:
        node = subprocess.Popen(
            [sys.executable, "-m", "forum", "serve", "--listen", f"127.0.0.1:{port}",
             "--data-dir", data, "--fsync", args.fsync, "--node-id", "bench"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            assert node.stdout is not None
            node.stdout.readline()  # "forum: node listening on ..."
            report = asyncio.run(measure(f"http://127.0.0.1:{port}", args))
        finally:
            node.terminate()
            node.wait(timeout=30)
    print(f"{'transport':10} {'writes':14} {'median/s':>10}")
    for transport, rates in report.items():
        for name, rate in rates.items():
            print(f"{transport:10} {name:14} {rate:10.0f}")
        print(f"{transport:10} {'options/plain':14} {rates['ttl+priority'] / rates['plain']:10.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    args.out.write_text(json.dumps({"settings": settings, "rates": report}, indent=1) + "\n")


if __name__ == "__main__":
    main()
