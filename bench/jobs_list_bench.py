"""What listing a task app's jobs costs: ``app.jobs()`` (B: the space
listed a page of tuples at a time, the Lens read a page of keys at a time
with ``inspect_many``) against working each job's status out by itself (A:
``app.status(key)`` per key, three reads each: what ``forum jobs list`` did
before), over the same jobs, in one run.

Usage: ``python bench/jobs_list_bench.py [--jobs 1000] [--rounds 3] [--out PATH]``

Starts a ``forum serve`` and a ``redis-server`` (fsync always, as in
production) in a temporary directory, enqueues ``--jobs`` no-op jobs (queued,
each with its ``enqueued`` record), then lists them both ways ``--rounds``
times, alternating. Prints the seconds per listing (median) and the ratio;
writes JSON to ``bench/results/jobs_list_bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from http_bench import forum_node, redis_server
from report import write_report

from forum.tasks import App, Context

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "jobs_list_bench.json"


async def measure(jobs: int, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="jobs-list-bench-") as root:
        node_dir, redis_dir = Path(root, "node"), Path(root, "redis")
        node_dir.mkdir()
        redis_dir.mkdir()
        async with (
            forum_node(node_dir, "always") as (url, _),
            redis_server(redis_dir, "always") as (redis, _),
        ):
            app = App(url, redis)

            @app.task
            async def noop(ctx: Context, n: int) -> None:
                return None

            async with app:
                for n in range(jobs):
                    await noop.enqueue(n)
            seconds: dict[str, list[float]] = {"A per key": [], "B batched": []}
            for _ in range(rounds):
                async with app:
                    started = time.perf_counter()
                    keys = [status.key async for status in app.jobs(limit=jobs * 2)]
                    seconds["B batched"].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    for key in keys:
                        await app.status(key)
                    seconds["A per key"].append(time.perf_counter() - started)
                if len(keys) != jobs:
                    raise SystemExit(f"listed {len(keys)} jobs of {jobs}")
            return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    seconds = asyncio.run(measure(args.jobs, args.rounds))
    medians = {way: statistics.median(values) for way, values in seconds.items()}
    print(f"{args.jobs} queued jobs listed, median of {args.rounds}")
    print(f"{'way':>10} {'s':>8} {'ms/job':>8}")
    for way, median in medians.items():
        print(f"{way:>10} {median:>8.3f} {median * 1000 / args.jobs:>8.3f}")
    print(f"A/B: {medians['A per key'] / medians['B batched']:.1f}x")
    report = {"jobs": args.jobs, "rounds": args.rounds, "seconds": seconds, "median": medians}
    write_report(args.out, report)


if __name__ == "__main__":
    main()
