"""ForumClient over the stream against ForumClient over HTTP, side by side, in one run.

Usage: ``python bench/stream_bench.py [--seconds 1.5] [--repeats 3] [--clients 1 16]
[--fsync always] [--out PATH]``

One ``forum serve`` (``--fsync always`` by default: every write and ack waits
for its fsync) and two clients of it, one per transport; for each work and
each number of concurrent callers (tasks sharing one client, as a worker's
slots do), the two take turns, ``--repeats`` rounds each (who goes first
alternates), and the median of each is kept:

==========  ==============================================
work        each caller, in a loop
==========  ==============================================
job         write, reserve (lease 30 s), ack: a reliable job
write       one write
==========  ==============================================

Over the stream the callers' requests share one WebSocket, many in flight;
over HTTP each is a request of its own on a pool of kept-alive connections
(one per caller). Besides the rates, the CPU time per operation of the client
(this process) and of the node (from /proc): on a busy machine rates swing
with the load, CPU per operation much less. A table goes to stdout and
everything to JSON (``bench/results/stream_bench.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import uvloop
from http_bench import forum_node, run_for

from forum.node.client.remote import ForumClient, Transport
from forum.node.core.space import Pattern

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = b"job-" + b"x" * 60
PATTERN = Pattern(b"job-")
TRANSPORTS: tuple[Transport, ...] = ("stream", "http")


@dataclass
class Result:
    transport: str
    work: str
    clients: int
    #: Operations per second of each round, in the order run.
    rates: list[float]
    #: CPU microseconds per operation of each round, in this process (the
    #: client) and in the node: what a busy machine does not skew.
    client_cpu_us: list[float]
    node_cpu_us: list[float]

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu_us(self) -> tuple[float, float]:
        return statistics.median(self.client_cpu_us), statistics.median(self.node_cpu_us)


def node_cpu_seconds() -> float:
    """CPU time of this process's children (the one ``forum serve``), from /proc."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a process that ended meanwhile
        if int(fields[1]) == os.getpid():  # ppid; then utime and stime in ticks
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def works(client: ForumClient) -> dict[str, Callable[[], Awaitable[int]]]:
    async def job() -> int:
        await client.write(PAYLOAD)
        found = await client.reserve(PATTERN, lease=30)
        if found is None:
            return 0
        await client.ack(found.id)
        return 1

    async def write() -> int:
        await client.write(PAYLOAD)
        return 1

    return {"job": job, "write": write}


async def drain(client: ForumClient) -> None:
    """Take what a round left live, so each starts from an empty space."""
    while await client.take_many(PATTERN, 10_000):
        pass


async def compare(
    clients: dict[Transport, ForumClient], callers: list[int], seconds: float, repeats: int
) -> list[Result]:
    results = []
    for work in ("job", "write"):
        for n in callers:
            runs: dict[Transport, Result] = {t: Result(t, work, n, [], [], []) for t in TRANSPORTS}
            for round_ in range(repeats):
                order = TRANSPORTS if round_ % 2 == 0 else TRANSPORTS[::-1]
                for transport in order:
                    client_cpu, node_cpu = time.process_time(), node_cpu_seconds()
                    done, taken = await run_for(seconds, n, works(clients[transport])[work])
                    run = runs[transport]
                    run.rates.append(done / taken)
                    run.client_cpu_us.append((time.process_time() - client_cpu) / done * 1e6)
                    run.node_cpu_us.append((node_cpu_seconds() - node_cpu) / done * 1e6)
                    await drain(clients[transport])
            results += runs.values()
    return results


def table(results: list[Result], fsync: str) -> str:
    rows = [
        f"forum serve --fsync {fsync}; ForumClient, median of each",
        f"{'work':<6} {'callers':>7} {'stream /s':>11} {'http /s':>11} {'ratio':>7}"
        f"   {'CPU us/op, client + node: stream':>34} {'http':>15}",
    ]
    by_key = {(r.transport, r.work, r.clients): r for r in results}
    for work in ("job", "write"):
        for n in sorted({r.clients for r in results}):
            s, h = by_key["stream", work, n], by_key["http", work, n]
            (sc, sn), (hc, hn) = s.cpu_us, h.cpu_us
            rows.append(
                f"{work:<6} {n:>7} {s.rate:>11,.0f} {h.rate:>11,.0f} {s.rate / h.rate:>7.2f}"
                f"   {sc:>22,.0f} + {sn:>9,.0f} {hc:>7,.0f} + {hn:>5,.0f}"
            )
    return "\n".join(rows)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of each; the median kept")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16], help="callers")
    parser.add_argument("--fsync", choices=("always", "interval", "never"), default="always")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "stream_bench.json"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forum-stream-bench-") as tmp:
        async with (
            forum_node(Path(tmp) / "forum", args.fsync) as (url, _),
            contextlib.AsyncExitStack() as stack,
        ):
            clients = {
                t: await stack.enter_async_context(
                    ForumClient(url, transport=t, pool_size=max(args.clients))
                )
                for t in TRANSPORTS
            }
            results = await compare(clients, args.clients, args.seconds, args.repeats)
    print(table(results, args.fsync), flush=True)
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "load_average_at_end": os.getloadavg(),
        "fsync": args.fsync,
        "seconds_per_measurement": args.seconds,
        "repeats": args.repeats,
        "results": [asdict(r) | {"rate": r.rate, "cpu_us_client_node": r.cpu_us} for r in results],
        "ratio": {
            f"{r.work}/{r.clients}": r.rate
            / next(
                h.rate
                for h in results
                if (h.transport, h.work, h.clients) == ("http", r.work, r.clients)
            )
            for r in results
            if r.transport == "stream"
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(uvloop.run(main()))
