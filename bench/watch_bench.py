"""What watching costs the node's write path, how fast events reach a
watcher, and what watchers that read nothing cost a real node.

One in-process Forum (fsync never, so the figures are the node's CPU, not the
disk), written in batches with, in turn (rounds interleaved, so all share
the machine's state):

    plain       no watch hub
    hub         a hub listening (the ring), no watcher
    hub+10      a hub and 10 watchers following every event

and then one node's app on a loopback port with one ``ForumClient.watch``
consumer: how many write events per second reach it over HTTP (SSE).

Then **stalled watchers**: a real ``forum serve`` (``--fsync never``), fresh
for each round, with ``--stalled`` (1,000) ``GET /v1/watch`` streams on
sockets with a 4 KiB receive buffer that read the stream's head and
``ready`` and then nothing, or with none (rounds alternated); then a burst
of ``--burst`` (10,000) single writes over the stream, 64 in flight. Per
case, medians of: the burst's seconds and the node's CPU seconds in it
(the steadier figure on a shared machine), the node's RSS (``VmRSS``) before the
watchers, with them open, and its peak (``VmHWM``) by the end of the burst;
and how many stalled watchers, reading nothing for ``--told-after`` (12) s
after the burst (past the node's stall bound, 10 s) and then reading, got
``overflow`` and the end of their stream within ``--told-within`` (10) s.
With ``--baseline REF`` the same runs on that commit too (``git archive``),
in its own rounds (``--baseline-rounds``).

    python bench/watch_bench.py --writes 100000 --rounds 3 \
        --baseline 219bc77 --out bench/results/watch_bench.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import tempfile
import time
from contextlib import AsyncExitStack, aclosing
from pathlib import Path
from typing import Any

from aiohttp import web
from memory_bench import ROOT, rss_bytes
from trees import export, pythonpath

from forum.deploy.processes import NodeService
from forum.node.client.remote import ForumClient
from forum.node.config.node import NodeConfig
from forum.node.core.space import Pattern
from forum.node.http.app import build_app
from forum.node.http.server import NodeRunner
from forum.node.space.forum import Forum
from forum.node.space.watch import Subscription, WatchHub
from forum.node.storage.strand import Strand, StrandConfig

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


def cpu_seconds(pid: int) -> float:
    """The CPU time ``pid`` used so far (user and system): steadier than a
    wall clock on a machine others share."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


async def stalled_watch(url: str) -> socket.socket:
    """A ``GET /v1/watch`` that reads the answer's head and ``ready``, then
    nothing: a 4 KiB receive buffer, never read again."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, int(port)))
    await loop.sock_sendall(sock, f"GET /v1/watch HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head = b""
    async with asyncio.timeout(30):
        while b"event: ready" not in head:
            head += await loop.sock_recv(sock, 4096)
    return sock


async def told(sock: socket.socket, within: float) -> bool:
    """Whether the stream ends with ``overflow`` (read now, to its end)
    within ``within`` s."""
    loop = asyncio.get_running_loop()
    tail = b""
    try:
        async with asyncio.timeout(within):
            while chunk := await loop.sock_recv(sock, 1 << 16):
                tail = (tail + chunk)[-600:]
    except (TimeoutError, ConnectionError):
        return False
    finally:
        sock.close()
    return b"event: overflow" in tail


async def burst(url: str, writes: int, in_flight: int = 64) -> float:
    """Seconds for ``writes`` single writes over the stream, ``in_flight`` at a time."""
    async with ForumClient(url, timeout=600) as client:
        await client.write(PAYLOAD)  # the stream open before the clock starts
        left = iter(range(writes))

        async def writer() -> None:
            for _ in left:
                await client.write(PAYLOAD)

        started = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(in_flight)))
        return time.perf_counter() - started


async def stalled_round(
    source: Path, root: Path, name: str, stalled: int, writes: int, after: float, within: float
) -> dict[str, Any]:
    """One fresh node from ``source``, ``stalled`` watchers, one burst."""
    node = NodeService(name, root, ["--fsync", "never"], env={"PYTHONPATH": pythonpath(source)})
    await node.start()
    socks: list[socket.socket] = []
    try:
        assert node.pid is not None
        rss_before = rss_bytes(node.pid)
        for _ in range(stalled):
            socks.append(await stalled_watch(node.url))
        rss_watched = rss_bytes(node.pid)
        cpu = cpu_seconds(node.pid)
        seconds = await burst(node.url, writes)
        cpu = cpu_seconds(node.pid) - cpu
        peak_burst = peak_rss(node.pid)
        rss_burst = rss_bytes(node.pid)
        # Told and closed: still reading nothing past the node's stall
        # bound (10 s), then each socket read to its end, all at once.
        if socks:
            await asyncio.sleep(after)
        results = await asyncio.gather(*(told(s, within) for s in socks))
        peak = peak_rss(node.pid)
        return {
            "burst_s": seconds,
            "burst_cpu_s": cpu,
            "rss_before": rss_before,
            "rss_watched": rss_watched,
            "rss_after_burst": rss_burst,
            "rss_peak_burst": peak_burst,
            "rss_peak": peak,
            "told_overflow": sum(results),
        }
    finally:
        for sock in socks:
            sock.close()
        await node.stop()


async def stalled_cases(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    sources = {"this": (ROOT, args.rounds)}
    if args.baseline:
        sources["baseline"] = (export(args.baseline, root), args.baseline_rounds)
    runs: dict[str, list[dict[str, Any]]] = {}
    for source_name, (source, rounds) in sources.items():
        for round_ in range(rounds):
            for stalled in (0, args.stalled):  # alternated: each round has both
                case = f"{source_name} {stalled} stalled"
                result = await stalled_round(
                    source, root, f"{source_name}-{stalled}-{round_}".replace(" ", ""),
                    stalled, args.burst, args.told_after, args.told_within,
                )  # fmt: skip
                print(case, {k: round(v, 3) for k, v in result.items()}, flush=True)
                runs.setdefault(case, []).append(result)
    medians = {
        case: {key: statistics.median(r[key] for r in results) for key in results[0]}
        for case, results in runs.items()
    }
    for source_name in sources:
        alone, stalled = (
            medians[f"{source_name} 0 stalled"],
            medians[f"{source_name} {args.stalled} stalled"],
        )
        stalled["burst_vs_none"] = stalled["burst_s"] / alone["burst_s"]
        stalled["cpu_vs_none"] = stalled["burst_cpu_s"] / alone["burst_cpu_s"]
        stalled["peak_vs_none_mib"] = (stalled["rss_peak"] - alone["rss_peak"]) / 2**20
    print(f"\n{'case':<24} {'burst s':>8} {'x none':>7} {'CPU s':>6} {'x none':>7} "
          f"{'RSS MiB before':>15} {'watched':>8} {'peak':>7} {'peak+ MiB':>10} "
          f"{'told':>6}")  # fmt: skip
    for case, row in medians.items():
        print(
            f"{case:<24} {row['burst_s']:>8.2f} {row.get('burst_vs_none', 1.0):>7.2f} "
            f"{row['burst_cpu_s']:>6.2f} {row.get('cpu_vs_none', 1.0):>7.2f} "
            f"{row['rss_before'] / 2**20:>15.0f} {row['rss_watched'] / 2**20:>8.0f} "
            f"{row['rss_peak'] / 2**20:>7.0f} {row.get('peak_vs_none_mib', 0.0):>10.1f} "
            f"{row['told_overflow']:>6.0f}"
        )
    return {
        "stalled": args.stalled,
        "burst_writes": args.burst,
        "told_after_s": args.told_after,
        "told_within_s": args.told_within,
        "baseline": args.baseline,
        "runs": runs,
        "medians": medians,
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    if args.only_stalled:
        with tempfile.TemporaryDirectory() as tmp:
            return {"stalled_watchers": await stalled_cases(args, Path(tmp))}
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
    with tempfile.TemporaryDirectory() as tmp:
        report["stalled_watchers"] = await stalled_cases(args, Path(tmp))
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stalled", type=int, default=1000, help="watchers that read nothing")
    parser.add_argument("--burst", type=int, default=10_000, help="single writes in the burst")
    parser.add_argument("--told-after", type=float, default=12.0, metavar="S")
    parser.add_argument("--told-within", type=float, default=10.0, metavar="S")
    parser.add_argument("--baseline", default=None, metavar="REF", help="a commit to compare")
    parser.add_argument("--baseline-rounds", type=int, default=1)
    parser.add_argument("--only-stalled", action="store_true", help="the stalled watchers alone")
    parser.add_argument("--out", type=Path, default=None)
    arguments = parser.parse_args()
    result = asyncio.run(main(arguments))
    if arguments.out is not None:
        arguments.out.write_text(json.dumps(result, indent=2) + "\n")
