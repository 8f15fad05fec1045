"""What watching costs the node's write path, and how fast events reach a watcher.

One in-process Forum (fsync never, so the figures are the node's CPU, not the
disk), written in batches with, in turn (rounds interleaved, so all share
the machine's state):

    plain       no watch hub
    hub         a hub listening (the ring and the payload map), no watcher
    hub+10      a hub and 10 watchers draining their queues

and then one node's app on a loopback port with one ``ForumClient.watch``
consumer: how many write events per second reach it over HTTP (SSE).

    python bench/watch_bench.py --writes 100000 --rounds 3 --out bench/results/watch_bench.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from contextlib import AsyncExitStack, aclosing
from pathlib import Path

from aiohttp import web

from node import Forum, Pattern, Strand, StrandConfig
from node.client import ForumClient
from node.config import NodeConfig
from node.watch import Subscription, WatchHub
from node.web_app import build_app
from node.web_server import NodeRunner

BATCH = 100
PAYLOAD = b"job-" + b"x" * 60


async def open_forum(root: Path, name: str) -> Forum:
    config = StrandConfig(fsync="never").with_storage(root / name).with_node_name("bench")
    return Forum(await Strand.open(config))


async def drain(watcher: Subscription) -> None:
    while not watcher.closed:
        await watcher.next_batch(1.0)


async def write_rate(root: Path, name: str, writes: int, watchers: int | None) -> float:
    """Writes per second, in batches of :data:`BATCH`; ``watchers`` None: no hub."""
    forum = await open_forum(root, name)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(forum.aclose)
        tasks = []
        if watchers is not None:
            hub = await stack.enter_async_context(WatchHub(forum, queue=100_000))
            for _ in range(watchers):
                watcher, _, _ = hub.subscribe(b"job-")
                tasks.append(asyncio.create_task(drain(watcher)))
        started = time.perf_counter()
        for _ in range(writes // BATCH):
            await forum.write_many([PAYLOAD] * BATCH)
        elapsed = time.perf_counter() - started
        if watchers is not None:
            hub.close()
        await asyncio.gather(*tasks)
    return writes / elapsed


async def delivery_rate(root: Path, writes: int) -> float:
    """Write events per second that reach one ``ForumClient.watch`` over HTTP."""
    forum = await open_forum(root, "http")
    config = NodeConfig(listen="127.0.0.1:0", watch_queue=writes + 1)
    runner = NodeRunner(build_app(forum, config), config)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with ForumClient(url) as client, aclosing(client.watch(Pattern(b"job-"))) as events:
            async for event in events:
                if event.kind == "ready":
                    break
            started = time.perf_counter()
            for _ in range(writes // BATCH):
                await forum.write_many([PAYLOAD] * BATCH)
            seen = 0
            async for event in events:
                seen += event.kind == "write"
                if seen == writes // BATCH * BATCH:
                    break
            return seen / (time.perf_counter() - started)
    finally:
        await runner.cleanup()
        await forum.aclose()


async def main(args: argparse.Namespace) -> dict[str, object]:
    cases = {"plain": None, "hub": 0, "hub+10": 10}
    rates: dict[str, list[float]] = {case: [] for case in cases}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for round_ in range(args.rounds):
            for case, watchers in cases.items():
                name = f"{case}-{round_}".replace("+", "p")
                rates[case].append(await write_rate(root, name, args.writes, watchers))
        delivered = await delivery_rate(root, args.writes)
    plain = statistics.median(rates["plain"])
    report: dict[str, object] = {
        "writes": args.writes,
        "batch": BATCH,
        "rounds": args.rounds,
        "writes_per_s": {case: round(statistics.median(r)) for case, r in rates.items()},
        "vs_plain": {case: round(statistics.median(r) / plain, 3) for case, r in rates.items()},
        "http_events_per_s": round(delivered),
    }
    print(f"{'case':<10} {'writes/s':>12} {'vs plain':>9}")
    for case in cases:
        print(
            f"{case:<10} {report['writes_per_s'][case]:>12,} "  # type: ignore[index]
            f"{report['vs_plain'][case]:>9.3f}"  # type: ignore[index]
        )
    print(f"one HTTP watcher: {report['http_events_per_s']:,} write events/s")
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    arguments = parser.parse_args()
    result = asyncio.run(main(arguments))
    if arguments.out is not None:
        arguments.out.write_text(json.dumps(result, indent=2) + "\n")
