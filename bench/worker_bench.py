"""The worker runtime on an in-process node, and the Lens against raw Redis, in one run.

* **end to end**: no-op jobs through an in-process ``Forum`` (``fsync=always``:
  durable before a write returns) + Lens + ``Worker``, with 1 and 8 slots:
  bench/noop_jobs.py's ``forum_jobs`` (what is timed is written there). No
  HTTP: bench/peers_bench.py runs the same function through a real
  ``forum serve`` against SAQ, streaq, taskiq and arq.
* **the Lens on its own**: claim+complete pairs per second, against the raw
  Redis commands a minimal lock-with-fence needs (``INCR`` + ``SET NX PX``),
  both sequential and with 8 concurrent callers.

Candidates alternate for ``--rounds`` rounds and the medians are reported
(the machine may be shared). By default a redis-server is started on a free
port with the settings the Lens needs (``appendonly yes``, ``appendfsync
always``); ``--redis-url`` uses yours (its database is flushed). Prints a
table; writes bench/results/worker_bench.json. Needs only the test
environment (``.venv``).

    .venv/bin/python bench/worker_bench.py [--jobs 2000] [--lens-ops 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from noop_jobs import concurrently, forum_jobs
from redis.asyncio import Redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coordinator import Lens  # noqa: E402
from node import Forum, Strand, StrandConfig  # noqa: E402
from tests.fixtures.redis_server import RedisServer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "worker_bench.json"
CONCURRENCIES = (1, 8)


@contextlib.asynccontextmanager
async def redis_for_bench(url: str | None) -> AsyncIterator[str]:
    if url is not None:
        async with Redis.from_url(url) as client:
            await client.flushdb()
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="worker-bench-redis-") as directory:
        server = RedisServer(Path(directory))
        await asyncio.to_thread(server.start)
        try:
            yield server.url
        finally:
            await asyncio.to_thread(server.stop)


async def flush(url: str) -> None:
    async with Redis.from_url(url) as client:
        await client.flushdb()


# -- forum ------------------------------------------------------------------------------


async def forum_run(url: str, jobs: int, concurrency: int) -> dict[str, float]:
    """No-op jobs through an in-process node (bench/noop_jobs.py ``forum_jobs``)."""
    await flush(url)
    with tempfile.TemporaryDirectory(prefix="worker-bench-forum-") as directory:
        config = StrandConfig().with_storage(directory).with_fsync("always")
        async with Forum(await Strand.open(config)) as forum:
            return await forum_jobs(forum, url, jobs, concurrency)


# -- the Lens on its own ----------------------------------------------------------------


async def rate(ops: int, callers: int, op: Callable[[int], Awaitable[None]]) -> float:
    """Operations (here: pairs of Redis calls) per second, from ``callers`` tasks."""
    started = time.perf_counter()
    await concurrently(ops, callers, op)
    return ops / (time.perf_counter() - started)


async def lens_rates(url: str, ops: int, rounds: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    # Every sample uses keys of its own (``sample``) instead of a flush: a
    # flush under a live Lens is a lost state (its epoch marker is gone).
    sample = 0
    await flush(url)
    async with Lens.from_url(url) as lens, Redis.from_url(url) as raw:

        async def lens_pair(i: int) -> None:
            claim = await lens.claim(f"bench:{sample}:{i}", owner="bench", lease=30)
            await claim.complete()

        async def lens_pair_reoffer(i: int) -> None:
            key = f"bench:{sample}:{i}"
            claim = await lens.claim(key, owner="bench", lease=30, reoffer=b"job/x")
            await claim.complete()

        async def raw_pair(i: int) -> None:
            await raw.incr("raw:fence")
            await raw.set(f"raw:claim:{sample}:{i}", 1, nx=True, px=30_000)

        candidates = {
            "raw_set_nx_px_incr": raw_pair,
            "lens_claim_complete": lens_pair,
            "lens_claim_complete_with_reoffer": lens_pair_reoffer,
        }
        for callers in CONCURRENCIES:
            samples: dict[str, list[float]] = {name: [] for name in candidates}
            for _ in range(rounds):
                for name, op in candidates.items():
                    sample += 1
                    samples[name].append(await rate(ops, callers, op))
            row = {name: statistics.median(values) for name, values in samples.items()}
            row["lens_vs_raw"] = row["lens_claim_complete"] / row["raw_set_nx_px_incr"]
            row["lens_with_reoffer_vs_raw"] = (
                row["lens_claim_complete_with_reoffer"] / row["raw_set_nx_px_incr"]
            )
            results[f"callers_{callers}"] = row
    return results


# -- main -------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "bench": "worker_bench",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "jobs": args.jobs,
        "rounds": args.rounds,
        "load_average_at_start": os.getloadavg()[0],
        "redis": "appendonly yes, appendfsync always" if args.redis_url is None else "given",
        "end_to_end": {},
    }
    async with redis_for_bench(args.redis_url) as url:
        for concurrency in CONCURRENCIES:
            samples = [await forum_run(url, args.jobs, concurrency) for _ in range(args.rounds)]
            report["end_to_end"][f"concurrency_{concurrency}"] = {"forum": medians(samples)}
        report["lens"] = await lens_rates(url, args.lens_ops, args.rounds)
    return report


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def print_table(report: dict[str, Any]) -> None:
    print(
        f"{report['jobs']} no-op jobs through an in-process node: written by c producers, "
        f"then run by one worker with c slots; jobs/s, median of {report['rounds']}"
    )
    print(f"{'c':>3}  {'jobs/s':>7}  {'write/s':>7}  {'run/s':>7}")
    for name, row in report["end_to_end"].items():
        forum = row["forum"]
        print(
            f"{name.split('_')[1]:>3}  {forum['jobs_per_s']:>7.0f}  "
            f"{forum['enqueue_per_s']:>7.0f}  {forum['process_per_s']:>7.0f}"
        )
    print()
    print("Lens claim+complete pairs/s vs raw INCR + SET NX PX pairs/s")
    print(f"{'callers':>7}  {'raw':>8}  {'lens':>8}  {'lens/raw':>8}  {'+reoffer':>8}  {'/raw':>6}")
    for name, row in report["lens"].items():
        print(
            f"{name.split('_')[1]:>7}  {row['raw_set_nx_px_incr']:>8.0f}  "
            f"{row['lens_claim_complete']:>8.0f}  {row['lens_vs_raw']:>7.2f}x  "
            f"{row['lens_claim_complete_with_reoffer']:>8.0f}  "
            f"{row['lens_with_reoffer_vs_raw']:>5.2f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per run (default 2000)")
    parser.add_argument("--lens-ops", type=int, default=3000, help="pairs per Lens rate")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure (median)")
    parser.add_argument("--redis-url", help="use this Redis (flushed!) instead of starting one")
    logging.basicConfig(level=logging.WARNING)
    report = asyncio.run(main(parser.parse_args()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")
