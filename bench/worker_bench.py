"""End-to-end job throughput: Forum + Lens against arq, on the same Redis, in one run.

Each job is a no-op. For each system and concurrency c (1 and 8), the bench
enqueues N jobs from c concurrent producers, then runs one worker with c
handler slots until all are done, and reports jobs/s over the whole
(enqueue + run) as well as for each phase. Systems alternate for ``--rounds``
rounds and the medians are reported (the machine may be shared):

* **forum**: ``Forum.write`` (in-process node, ``fsync=always``: durable before
  it returns) → ``Worker``: blocking take → Lens claim (with re-offer record)
  → handler → complete (done marker);
* **arq**: ``ArqRedis.enqueue_job`` → ``arq.Worker`` (burst mode,
  ``poll_delay`` 0.01 s so it is not idling; other settings arq's defaults).

It also measures the Lens on its own: claim+complete pairs per second, against
the raw Redis commands a minimal lock-with-fence needs (``INCR`` +
``SET NX PX``), both sequential and with 8 concurrent callers.

By default a redis-server is started on a free port with the settings the Lens
needs (``appendonly yes``, ``appendfsync always``); ``--redis-url`` uses yours
(its database is flushed). Prints a table; writes bench/results/worker_bench.json.

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

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker as ArqWorker
from redis.asyncio import Redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coordinator import Job, Lens, Worker  # noqa: E402
from node import Forum, Pattern, Strand, StrandConfig  # noqa: E402
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
    await flush(url)
    pattern = Pattern(b"job/")
    with tempfile.TemporaryDirectory(prefix="worker-bench-forum-") as directory:
        config = StrandConfig().with_storage(directory).with_fsync("always")
        async with Forum(await Strand.open(config)) as forum, Lens.from_url(url) as lens:

            async def noop(job: Job) -> None:
                return None

            worker = Worker(forum, lens, pattern, noop, concurrency=concurrency, take_wait=0.05)
            started = time.perf_counter()
            await concurrently(jobs, concurrency, lambda i: forum.write(b"job/%d" % i))
            enqueued = time.perf_counter()
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(worker.run())
                await until(lambda: worker.stats().done >= jobs)
                finished = time.perf_counter()
                worker.stop()
            if worker.stats().done != jobs or await forum.count(pattern):
                raise RuntimeError(f"forum run incomplete: {worker.stats()}")
    return timings(jobs, started, enqueued, finished)


# -- arq --------------------------------------------------------------------------------


async def arq_noop(ctx: dict[str, Any], i: int) -> None:
    return None


async def arq_run(url: str, jobs: int, concurrency: int) -> dict[str, float]:
    await flush(url)
    settings = RedisSettings.from_dsn(url)
    pool = await create_pool(settings)
    try:
        started = time.perf_counter()
        await concurrently(jobs, concurrency, lambda i: pool.enqueue_job("arq_noop", i))
        enqueued = time.perf_counter()
        worker = ArqWorker(
            functions=[arq_noop],
            redis_pool=pool,
            burst=True,
            max_jobs=concurrency,
            poll_delay=0.01,
            handle_signals=False,
            log_results=False,
        )
        await worker.main()
        finished = time.perf_counter()
        if worker.jobs_complete != jobs:
            raise RuntimeError(f"arq run incomplete: {worker.jobs_complete} of {jobs}")
        await worker.close()
    finally:
        await pool.aclose()
    return timings(jobs, started, enqueued, finished)


def timings(jobs: int, started: float, enqueued: float, finished: float) -> dict[str, float]:
    return {
        "jobs": jobs,
        "seconds": finished - started,
        "jobs_per_s": jobs / (finished - started),
        "enqueue_per_s": jobs / (enqueued - started),
        "process_per_s": jobs / (finished - enqueued),
    }


# -- the Lens on its own ----------------------------------------------------------------


async def concurrently(ops: int, callers: int, op: Callable[[int], Awaitable[object]]) -> None:
    """Call ``op(0) .. op(ops - 1)`` from ``callers`` tasks, each awaiting its own."""
    counter = iter(range(ops))

    async def caller() -> None:
        for i in counter:
            await op(i)

    async with asyncio.TaskGroup() as tasks:
        for _ in range(callers):
            tasks.create_task(caller())


async def rate(ops: int, callers: int, op: Callable[[int], Awaitable[None]]) -> float:
    """Operations (here: pairs of Redis calls) per second, from ``callers`` tasks."""
    started = time.perf_counter()
    await concurrently(ops, callers, op)
    return ops / (time.perf_counter() - started)


async def lens_rates(url: str, ops: int, rounds: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    async with Lens.from_url(url) as lens, Redis.from_url(url) as raw:

        async def lens_pair(i: int) -> None:
            claim = await lens.claim(f"bench:{i}", owner="bench", lease=30)
            await claim.complete()

        async def lens_pair_reoffer(i: int) -> None:
            claim = await lens.claim(f"bench:{i}", owner="bench", lease=30, reoffer=b"job/x")
            await claim.complete()

        async def raw_pair(i: int) -> None:
            await raw.incr("raw:fence")
            await raw.set(f"raw:claim:{i}", 1, nx=True, px=30_000)

        candidates = {
            "raw_set_nx_px_incr": raw_pair,
            "lens_claim_complete": lens_pair,
            "lens_claim_complete_with_reoffer": lens_pair_reoffer,
        }
        for callers in CONCURRENCIES:
            samples: dict[str, list[float]] = {name: [] for name in candidates}
            for _ in range(rounds):
                for name, op in candidates.items():
                    await flush(url)
                    samples[name].append(await rate(ops, callers, op))
            row = {name: statistics.median(values) for name, values in samples.items()}
            row["lens_vs_raw"] = row["lens_claim_complete"] / row["raw_set_nx_px_incr"]
            row["lens_with_reoffer_vs_raw"] = (
                row["lens_claim_complete_with_reoffer"] / row["raw_set_nx_px_incr"]
            )
            results[f"callers_{callers}"] = row
    return results


# -- main -------------------------------------------------------------------------------


async def until(predicate: Callable[[], bool], timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the run did not finish")
        await asyncio.sleep(0.005)


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
            runs: dict[str, list[dict[str, float]]] = {"forum": [], "arq": []}
            for _ in range(args.rounds):
                runs["forum"].append(await forum_run(url, args.jobs, concurrency))
                runs["arq"].append(await arq_run(url, args.jobs, concurrency))
            row: dict[str, Any] = {name: medians(samples) for name, samples in runs.items()}
            row["forum_vs_arq"] = row["forum"]["jobs_per_s"] / row["arq"]["jobs_per_s"]
            row["forum_vs_arq_processing"] = (
                row["forum"]["process_per_s"] / row["arq"]["process_per_s"]
            )
            report["end_to_end"][f"concurrency_{concurrency}"] = row
        report["lens"] = await lens_rates(url, args.lens_ops, args.rounds)
    return report


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def print_table(report: dict[str, Any]) -> None:
    print(
        f"{report['jobs']} no-op jobs: enqueued by c producers, then run by one worker "
        f"with c slots; jobs/s, median of {report['rounds']}"
    )
    print(
        f"{'c':>3}  {'forum':>7}  {'arq':>7}  {'ratio':>6}  |  processing only: "
        f"{'forum':>7}  {'arq':>7}  {'ratio':>6}"
    )
    for name, row in report["end_to_end"].items():
        forum, arq = row["forum"], row["arq"]
        print(
            f"{name.split('_')[1]:>3}  {forum['jobs_per_s']:>7.0f}  {arq['jobs_per_s']:>7.0f}  "
            f"{row['forum_vs_arq']:>5.2f}x  |  {'':>17}{forum['process_per_s']:>7.0f}  "
            f"{arq['process_per_s']:>7.0f}  {row['forum_vs_arq_processing']:>5.2f}x"
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
