"""Forum over HTTP against a Redis reliable queue, side by side, in one run.

Usage: ``python bench/http_bench.py [--seconds 1.5] [--fsync always] [--out PATH]``

What is measured, each for a fixed time at 1 and at 16 concurrent clients
(``--clients``); the two queues take turns (``--repeats``), medians kept:

===========  ==========================================  ===================================
work         Forum (ForumClient -> forum serve)           Redis (redis-py -> redis-server)
===========  ==========================================  ===================================
write        POST /v1/tuples                              LPUSH queue
take         reserve + ack (drains a prefilled queue)     LMOVE queue processing + LREM
job          write, reserve, ack: the reliable job        LPUSH, LMOVE, LREM
batch job    write_many(N), reserve_many(N), ack_many     pipelined LPUSH(N) + N x (LMOVE+LREM)
===========  ==========================================  ===================================

LMOVE + LREM is the reliable-queue pattern: a taken job sits in a
processing list until it is acknowledged (LREM), so a crashed consumer does
not lose it. Forum's counterpart is a reservation (a lease: a holder that
dies lets it run out, and the tuple is live again) and its ack, so both
sides give the same guarantee. ``ForumClient`` is used with its defaults.
Both servers are started here on free loopback ports and stopped at the end.
Before each measurement both are settled, outside the clock: Forum compacts
its Strand (``POST /v1/compact``), Redis rewrites its AOF (``BGREWRITEAOF``),
so that none pays for the garbage an earlier one left (see :func:`measure`).
Durability is matched: ``--fsync always`` (the default) runs the node with
``--fsync always`` against Redis with ``appendonly yes, appendfsync always``;
``--fsync never`` against Redis without persistence; ``both`` runs the two.

Prints a table; writes JSON (``bench/results/http_bench.json``) and a plot
(``bench/results/http_bench.png``, ops/s of each work, Forum against Redis;
matplotlib, from ``.venv-bench``: scripts/bench-env; ``--no-plot`` without).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import redis.asyncio as aioredis
import uvloop

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern

ROOT = Path(__file__).resolve().parent.parent
BATCH = 1000
LEASE = 30.0  # s: a reservation's lease (it is acked long before)
AOF_REWRITE_DEADLINE = 120.0  # s for Redis to rewrite its AOF between two measurements
QUEUE, PROCESSING = "bench:queue", "bench:processing"


@dataclass
class Result:
    system: str
    work: str
    clients: int
    ops: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.ops / self.seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_until(check: Callable[[], Awaitable[bool]], what: str, deadline: float = 20) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    while not await check():
        if loop.time() > until:
            raise TimeoutError(f"{what} did not come up in {deadline} s")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def process(*command: str) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                async with asyncio.timeout(20):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


@contextlib.asynccontextmanager
async def forum_node(data: Path, fsync: str) -> AsyncIterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "forum", "serve", "--listen", f"127.0.0.1:{port}",
        "--data-dir", str(data), "--fsync", fsync, "--node-id", "bench", "--log-level", "WARNING",
    ]  # fmt: skip
    async with process(*command), ForumClient(url) as probe:
        await wait_until(probe.ready, "forum serve")
        yield url


@contextlib.asynccontextmanager
async def redis_server(data: Path, fsync: str) -> AsyncIterator[str]:
    port = free_port()
    persistence = (
        ["--appendonly", "yes", "--appendfsync", "always"]
        if fsync == "always"
        else ["--appendonly", "no"]
    )
    command = [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--dir", str(data), *persistence,
    ]  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    async with process(*command):
        client = aioredis.from_url(url)
        try:

            async def up() -> bool:
                try:
                    return bool(await client.ping())
                except (OSError, aioredis.ConnectionError):
                    return False

            await wait_until(up, "redis-server")
        finally:
            await client.aclose()
        yield url


async def run_for(
    seconds: float, clients: int, op: Callable[[], Awaitable[int]]
) -> tuple[int, float]:
    """Run ``op`` in ``clients`` concurrent loops for ``seconds``; ops done and time taken."""
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + seconds
    done = 0

    async def worker() -> None:
        nonlocal done
        while loop.time() < stop_at:
            # Not `done += await op()`: that reads `done` before the await and
            # loses the other workers' counts.
            n = await op()
            done += n

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(clients):
            group.create_task(worker())
    return done, time.perf_counter() - started


async def run_until_dry(clients: int, op: Callable[[], Awaitable[int]]) -> tuple[int, float]:
    """Run ``op`` in ``clients`` concurrent loops until it finds nothing (returns 0)."""
    done = 0

    async def worker() -> None:
        nonlocal done
        while n := await op():
            done += n  # (n is awaited first: see run_for)

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(clients):
            group.create_task(worker())
    return done, time.perf_counter() - started


# -- the two queues ----------------------------------------------------------------

PAYLOAD = b"job-" + b"x" * 60


class ForumQueue:
    """The work, through ForumClient against a ``forum serve``."""

    name = "forum"

    def __init__(self, client: ForumClient) -> None:
        self.c = client
        self.pattern = Pattern(b"job-")

    async def write(self) -> int:
        await self.c.write(PAYLOAD)
        return 1

    async def take(self) -> int:
        found = await self.c.reserve(self.pattern, LEASE)
        if found is None:
            return 0
        if not await self.c.ack(found.id):
            raise RuntimeError("a reservation ran out before its ack")
        return 1

    async def job(self) -> int:
        await self.c.write(PAYLOAD)
        if await self.take() == 0:
            raise RuntimeError("a job written was not there to reserve")
        return 1

    async def batch_job(self) -> int:
        await self.c.write_many([PAYLOAD] * BATCH)
        reserved = await self.c.reserve_many(self.pattern, LEASE, BATCH)
        if not all(await self.c.ack_many([r.id for r in reserved])):
            raise RuntimeError("a reservation ran out before its ack")
        return len(reserved)

    async def prefill(self, n: int) -> None:
        for start in range(0, n, BATCH):
            await self.c.write_many([PAYLOAD] * min(BATCH, n - start))

    async def drain(self) -> None:
        while await self.c.take_many(self.pattern, 10_000):
            pass  # (what is left is not reserved: each reservation was acked)

    async def settle(self) -> None:
        # POST /v1/compact waits for a background pass under way (passes run
        # one at a time), then drops whatever is dead.
        await self.c.compact()


class RedisQueue:
    """The same work on a Redis list: LPUSH, then LMOVE to a processing list and
    LREM from it once done (the reliable-queue pattern)."""

    name = "redis"

    def __init__(self, client: aioredis.Redis) -> None:
        self.r = client

    async def write(self) -> int:
        await self.r.lpush(QUEUE, PAYLOAD)
        return 1

    async def take(self) -> int:
        item = await self.r.lmove(QUEUE, PROCESSING, "RIGHT", "LEFT")
        if item is None:
            return 0
        await self.r.lrem(PROCESSING, 1, item)
        return 1

    async def job(self) -> int:
        await self.r.lpush(QUEUE, PAYLOAD)
        item = await self.r.lmove(QUEUE, PROCESSING, "RIGHT", "LEFT")
        if item is None:
            raise RuntimeError("a job written was not there to take")
        await self.r.lrem(PROCESSING, 1, item)
        return 1

    async def batch_job(self) -> int:
        await self.r.lpush(QUEUE, *([PAYLOAD] * BATCH))
        async with self.r.pipeline(transaction=False) as pipe:
            for _ in range(BATCH):
                pipe.lmove(QUEUE, PROCESSING, "RIGHT", "LEFT")
            items = await pipe.execute()
        async with self.r.pipeline(transaction=False) as pipe:
            for item in items:
                pipe.lrem(PROCESSING, 1, item)
            await pipe.execute()
        return len(items)

    async def prefill(self, n: int) -> None:
        for start in range(0, n, BATCH):
            await self.r.lpush(QUEUE, *([PAYLOAD] * min(BATCH, n - start)))

    async def drain(self) -> None:
        await self.r.delete(QUEUE, PROCESSING)

    async def settle(self) -> None:
        # Redis's compaction is the AOF rewrite (it runs by itself too, once
        # the file doubled): one now, waited for, as Forum's pass.
        if not (await self.r.info("persistence"))["aof_enabled"]:
            return
        await wait_until(self.rewritten, "Redis, a rewrite under way done,", AOF_REWRITE_DEADLINE)
        await self.r.bgrewriteaof()
        await wait_until(self.rewritten, "Redis, its AOF rewritten,", AOF_REWRITE_DEADLINE)

    async def rewritten(self) -> bool:
        info = await self.r.info("persistence")
        return not (info["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"])


Queue = ForumQueue | RedisQueue
WORKS = ("write", "take", "job", "batch job")


async def measure(queue: Queue, work: str, clients: int, seconds: float, prefill: int) -> Result:
    # Each measurement starts from a settled queue: the log compacted of what
    # the earlier ones left dead, no pass pending or under way (outside the
    # clock). The garbage a measurement makes is its own cost, not the next
    # one's: after the batch job, most of the Strand is dead, and the
    # background pass it sets off (every 10 s, once half is dead) ran during
    # the next measurement, which then read a quarter of its rate alone.
    # Settling rather than a fresh node per measurement: a node that has
    # caught up on compaction is the state a long-running one is in between
    # bursts, and each side stays one process for the whole run.
    await queue.settle()
    if work == "take":
        # Takes drain a prefilled queue: they are timed until it is empty.
        await queue.prefill(prefill)
        n, t = await run_until_dry(clients, queue.take)
    else:
        op = {"write": queue.write, "job": queue.job, "batch job": queue.batch_job}[work]
        n, t = await run_for(seconds, clients, op)
    await queue.drain()
    return Result(queue.name, work, clients, n, t)


async def compare(
    queues: tuple[Queue, Queue], clients: list[int], seconds: float, repeats: int, prefill: int
) -> list[Result]:
    """Each measurement ``repeats`` times, the two queues taking turns (so both
    see the same background load), and the median of each kept."""
    kept = []
    for n_clients in clients:
        for work in WORKS:
            runs: dict[str, list[Result]] = {q.name: [] for q in queues}
            for _ in range(repeats):
                for queue in queues:
                    runs[queue.name].append(await measure(queue, work, n_clients, seconds, prefill))
            for results in runs.values():
                kept.append(sorted(results, key=lambda r: r.rate)[len(results) // 2])
    return kept


# -- report ------------------------------------------------------------------------


def table(results: list[Result], fsync: str) -> str:
    redis_durability = "appendfsync always" if fsync == "always" else "no persistence"
    rows = [
        f"durability: forum fsync={fsync} vs redis {redis_durability}",
        "take: reserve + ack vs LMOVE + LREM; job: write, reserve, ack vs LPUSH, LMOVE, LREM",
        f"{'work':<10} {'clients':>7} {'forum /s':>12} {'redis /s':>12} {'ratio':>7}",
    ]
    by_key = {(r.system, r.work, r.clients): r for r in results}
    for work in ("write", "take", "job", "batch job"):
        for clients in sorted({r.clients for r in results}):
            f, r = by_key[("forum", work, clients)], by_key[("redis", work, clients)]
            rows.append(
                f"{work:<10} {clients:>7} {f.rate:>12,.0f} {r.rate:>12,.0f} {f.rate / r.rate:>7.2f}"
            )
    return "\n".join(rows)


def plot(results: list[Result], fsync: str, path: Path) -> None:
    import plots  # noqa: PLC0415 (matplotlib: in .venv-bench only)

    by_key = {(r.system, r.work, r.clients): r.rate for r in results}
    keys = [(w, c) for w in WORKS for c in sorted({r.clients for r in results})]
    ratios = [by_key[("forum", w, c)] / by_key[("redis", w, c)] for w, c in keys]
    plots.grouped_bars(
        path,
        f"ForumClient -> forum serve (fsync {fsync}) vs redis-py -> Redis "
        f"({'appendfsync always' if fsync == 'always' else 'no persistence'}), medians; "
        f"under Forum: Forum / Redis\ntake = reserve + ack vs LMOVE + LREM; "
        f"job = write, reserve, ack vs LPUSH, LMOVE, LREM",
        [f"{w}\n{c} client{'s' if c > 1 else ''}" for w, c in keys],
        {q: [by_key[(q, w, c)] for w, c in keys] for q in ("forum", "redis")},
        "operations/s (batch job: tuples/s), log scale",
        {"forum": [f"{x:.2f}x" for x in ratios]},
        log=True,
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="per measurement")
    parser.add_argument(
        "--fsync", choices=("never", "always", "both"), default="always",
        help="durability to compare at (default always)",
    )  # fmt: skip
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--repeats", type=int, default=3, help="median of this many runs")
    parser.add_argument("--prefill", type=int, default=4000, help="tuples to take, per run")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "http_bench.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "bench" / "results" / "http_bench.png")
    parser.add_argument("--no-plot", action="store_true", help="draw no PNG (no matplotlib)")
    args = parser.parse_args()
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("matplotlib is not installed here: run from .venv-bench, or --no-plot")
    if shutil.which("redis-server") is None:
        print("redis-server is not on PATH", file=sys.stderr)
        return 2
    report: dict[str, object] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "seconds_per_measurement": args.seconds,
        "repeats": args.repeats,
        "batch": BATCH,
        "runs": [],
    }  # fmt: skip
    for fsync in ("never", "always") if args.fsync == "both" else (args.fsync,):
        with tempfile.TemporaryDirectory(prefix="forum-bench-") as tmp:
            (Path(tmp) / "redis").mkdir()
            async with (
                forum_node(Path(tmp) / "forum", fsync) as forum_url,
                redis_server(Path(tmp) / "redis", fsync) as redis_url,
                ForumClient(forum_url) as client,
            ):
                r = aioredis.from_url(redis_url, max_connections=max(args.clients) + 4)
                try:
                    queues = (ForumQueue(client), RedisQueue(r))
                    results = await compare(
                        queues, args.clients, args.seconds, args.repeats, args.prefill
                    )
                finally:
                    await r.aclose()
        print(table(results, fsync), end="\n\n", flush=True)
        if not args.no_plot:
            # Each durability its own PNG when both run; the default name for "always".
            path = args.plot
            if args.fsync == "both" and fsync != "always":
                path = path.with_name(f"{path.stem}_{fsync}{path.suffix}")
            plot(results, fsync, path)
            print(f"drew {path}")
        jobs = {(r.system, r.clients): r.rate for r in results if r.work == "job"}
        batch = max(r.rate for r in results if r.system == "forum" and r.work == "batch job")
        runs = report["runs"]
        assert isinstance(runs, list)
        runs.append(
            {
                "fsync": fsync,
                "results": [asdict(r) | {"rate": r.rate} for r in results],
                "job_ratio": {
                    str(c): jobs[("forum", c)] / jobs[("redis", c)] for c in args.clients
                },
                "forum_batch_reserved_and_acked_per_second": batch,
            }
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        # uvloop on both sides: the node runs on it, and it is the same loop
        # for the Forum client and for redis-py.
        sys.exit(uvloop.run(main()))
