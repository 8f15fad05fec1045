"""The worker runtime on an in-process node, and the Lens against raw Redis, in one run.

* **end to end**: no-op jobs through an in-process ``Forum`` (``fsync=always``:
  durable before a write returns) + Lens + ``Worker``, with 1 and 8 slots:
  bench/noop_jobs.py's ``forum_jobs`` (what is timed is written there). No
  HTTP: bench/peers_bench.py runs the same function through a real
  ``forum serve`` against SAQ, streaq, taskiq and arq.
* **the Lens on its own**: claim+complete pairs per second, against the raw
  Redis commands a minimal lock-with-fence needs (``INCR`` + ``SET NX PX``),
  both sequential and with 8 concurrent callers. Fair by construction: the
  same Redis, the same durability, a pool of the same (unbounded) size on
  both sides, two calls per pair on both, each awaited by its caller (the
  Lens carries the calls that concurrent callers make in one turn of the
  loop in one pipeline, forum.coordinator.scripts; plain redis-py sends a command
  per call, which is what the raw side measures).
  The candidates take turns in ``--slices`` slices per round (a burst of
  load from elsewhere falls on all alike). ``--baseline DIR`` adds another
  checkout's Lens (``git -C main archive HEAD | tar -x -C DIR``) as one
  more candidate, run by a child process in the same run; ``--lens-only``
  skips the end-to-end half.

Candidates alternate for ``--rounds`` rounds and the medians are reported
(the machine may be shared). By default a redis-server is started on a free
port with the settings the Lens needs (``appendonly yes``, ``appendfsync
always``); ``--redis-url`` uses yours (its database is flushed). Prints a
table; writes bench/results/worker_bench.json. Needs only the test
environment (``.venv``).

    .venv/bin/python bench/worker_bench.py [--jobs 2000] [--lens-ops 3000]
    .venv/bin/python bench/worker_bench.py --lens-only --baseline /tmp/main
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from noop_jobs import concurrently, forum_jobs
from redis.asyncio import Redis
from trees import import_from_tree, pythonpath

ROOT = Path(__file__).resolve().parents[1]
#: Whose Lens this process runs: this checkout's, or (in the child that
#: ``--baseline`` starts) another's, of either layout.
_LENS_ROOT = Path(os.environ.get(BASELINE_ROOT := "WORKER_BENCH_LENS_ROOT", str(ROOT)))
sys.path[:0] = pythonpath(_LENS_ROOT).split(os.pathsep)
import_from_tree()

from forum.coordinator import Lens  # noqa: E402
from forum.node.space.forum import Forum  # noqa: E402
from forum.node.storage.strand import Strand, StrandConfig  # noqa: E402
from tests.fixtures.redis_server import RedisServer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "worker_bench.json"
CONCURRENCIES = (1, 8)
#: Each ratio in the Lens report: that candidate's pairs/s over the raw pair's.
RATIOS = {
    "lens_vs_raw": "lens_claim_complete",
    "lens_with_reoffer_vs_raw": "lens_claim_complete_with_reoffer",
    "baseline_vs_raw": "baseline_lens_claim_complete",
}


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


async def claim_complete(
    lens: Lens, prefix: str, pairs: int, callers: int, reoffer: bytes | None = None
) -> float:
    """Seconds for ``pairs`` claim+complete pairs on keys ``<prefix>:<i>``."""

    async def pair(i: int) -> None:
        claim = await lens.claim(f"{prefix}:{i}", owner="bench", lease=30, reoffer=reoffer)
        await claim.complete()

    return await timed(pairs, callers, pair)


async def timed(ops: int, callers: int, op: Callable[[int], Awaitable[None]]) -> float:
    """Seconds for ``ops`` operations (here: pairs of Redis calls) from ``callers`` tasks."""
    started = time.perf_counter()
    await concurrently(ops, callers, op)
    return time.perf_counter() - started


#: A candidate: ``run(pairs, callers, sample)`` -> seconds, with keys of ``sample``'s own.
Candidate = Callable[[int, int, int], Awaitable[float]]


async def lens_rates(
    url: str, ops: int, rounds: int, slices: int, baseline: Path | None = None
) -> dict[str, dict[str, float]]:
    """Pairs per second of each candidate, at each number of callers.

    The candidates take turns in slices of ``ops // slices`` pairs (each
    slice starting with another candidate), so a burst of load from
    elsewhere on the machine falls on all of them alike; a round's figure is
    its pairs over their summed time. Medians over ``rounds``; each ratio is
    the median of the rounds' ratios. With ``baseline``, the Lens of that
    checkout runs as one more candidate, in a child process, in its own
    namespace of the same Redis.
    """
    results: dict[str, dict[str, float]] = {}
    await flush(url)
    async with contextlib.AsyncExitStack() as stack:
        lens = await stack.enter_async_context(Lens.from_url(url))
        raw = await stack.enter_async_context(Redis.from_url(url))

        async def lens_pairs(pairs: int, callers: int, sample: int) -> float:
            return await claim_complete(lens, f"bench:{sample}", pairs, callers)

        async def lens_pairs_reoffer(pairs: int, callers: int, sample: int) -> float:
            return await claim_complete(lens, f"bench:{sample}", pairs, callers, b"job/x")

        async def raw_pairs(pairs: int, callers: int, sample: int) -> float:
            async def pair(i: int) -> None:
                await raw.incr("raw:fence")
                await raw.set(f"raw:claim:{sample}:{i}", 1, nx=True, px=30_000)

            return await timed(pairs, callers, pair)

        candidates: dict[str, Candidate] = {
            "raw_set_nx_px_incr": raw_pairs,
            "lens_claim_complete": lens_pairs,
            "lens_claim_complete_with_reoffer": lens_pairs_reoffer,
        }
        if baseline is not None:
            candidates["baseline_lens_claim_complete"] = await stack.enter_async_context(
                BaselineLens.start(baseline, url)
            )
        # Every slice claims keys of its own: no flush under a live Lens (it
        # would lose its state). The epoch markers are read, and the scripts
        # loaded, before the clock starts.
        samples = itertools.count()
        await lens_pairs(1, 1, next(samples))
        for callers in CONCURRENCIES:
            row = await lens_row(candidates, samples, ops, rounds, slices, callers)
            results[f"callers_{callers}"] = row
    return results


async def lens_row(
    candidates: dict[str, Candidate],
    sample: Iterator[int],
    ops: int,
    rounds: int,
    slices: int,
    callers: int,
) -> dict[str, float]:
    names = list(candidates)
    per_slice = max(1, ops // slices)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        seconds = dict.fromkeys(names, 0.0)
        for turn in range(slices):
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                seconds[name] += await candidates[name](per_slice, callers, next(sample))
        for name in names:
            samples[name].append(per_slice * slices / seconds[name])
    row = {name: statistics.median(values) for name, values in samples.items()}
    raw = samples["raw_set_nx_px_incr"]
    for ratio, name in RATIOS.items():
        if name in samples:
            row[ratio] = statistics.median(a / b for a, b in zip(samples[name], raw, strict=True))
    return row


class BaselineLens:
    """Another checkout's Lens as a candidate: a child process running this
    script with ``--serve-lens`` and that checkout first on ``sys.path``. It
    reads one line per slice (``pairs callers sample``) and answers the
    seconds the slice took."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, root: Path, url: str) -> AsyncIterator[BaselineLens]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve-lens", url,
            env={**os.environ, BASELINE_ROOT: str(root.resolve())},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            yield cls(process)
        finally:
            if process.stdin is not None:
                process.stdin.close()
            await process.wait()

    async def __call__(self, pairs: int, callers: int, sample: int) -> float:
        stdin, stdout = self._process.stdin, self._process.stdout
        if stdin is None or stdout is None:
            raise RuntimeError("the baseline's pipes are gone")
        stdin.write(f"{pairs} {callers} {sample}\n".encode())
        await stdin.drain()
        answer = await stdout.readline()
        if not answer:
            raise RuntimeError("the baseline Lens exited")
        return float(answer)


async def serve_lens(url: str) -> None:
    """The child of :class:`BaselineLens`: this process's Lens, slice by slice."""
    async with Lens.from_url(url, namespace="forum:baseline") as lens:
        await claim_complete(lens, "base:warm", 1, 1)  # epochs read, scripts loaded
        while line := await asyncio.to_thread(sys.stdin.readline):
            pairs, callers, sample = map(int, line.split())
            print(await claim_complete(lens, f"base:{sample}", pairs, callers), flush=True)


# -- main -------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "bench": "worker_bench",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "jobs": args.jobs,
        "rounds": args.rounds,
        "lens_ops": args.lens_ops,
        "slices": args.slices,
        "load_average_at_start": os.getloadavg()[0],
        "redis": "appendonly yes, appendfsync always" if args.redis_url is None else "given",
        "baseline": None if args.baseline is None else str(args.baseline),
        "end_to_end": {},
    }
    async with redis_for_bench(args.redis_url) as url:
        for concurrency in () if args.lens_only else CONCURRENCIES:
            samples = [await forum_run(url, args.jobs, concurrency) for _ in range(args.rounds)]
            report["end_to_end"][f"concurrency_{concurrency}"] = {"forum": medians(samples)}
        report["lens"] = await lens_rates(
            url, args.lens_ops, args.rounds, args.slices, args.baseline
        )
    return report


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def print_table(report: dict[str, Any]) -> None:
    if report["end_to_end"]:
        print_jobs(report)
    print(
        f"Lens claim+complete pairs/s vs raw INCR + SET NX PX pairs/s, {report['lens_ops']} "
        f"pairs each in {report['slices']} alternating slices, median of {report['rounds']}"
    )
    baseline = report["baseline"]
    head = f"{'callers':>7}  {'raw':>8}  {'lens':>8}  {'lens/raw':>8}  {'+reoffer':>8}  {'/raw':>6}"
    print(head + (f"  {'baseline':>8}  {'/raw':>6}" if baseline else ""))
    for name, row in report["lens"].items():
        line = (
            f"{name.split('_')[1]:>7}  {row['raw_set_nx_px_incr']:>8.0f}  "
            f"{row['lens_claim_complete']:>8.0f}  {row['lens_vs_raw']:>7.2f}x  "
            f"{row['lens_claim_complete_with_reoffer']:>8.0f}  "
            f"{row['lens_with_reoffer_vs_raw']:>5.2f}x"
        )
        if baseline:
            line += (
                f"  {row['baseline_lens_claim_complete']:>8.0f}  {row['baseline_vs_raw']:>5.2f}x"
            )
        print(line)
    if baseline:
        print(f"(baseline: the Lens of {baseline}, in a child process)")


def print_jobs(report: dict[str, Any]) -> None:
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per run (default 2000)")
    parser.add_argument("--lens-ops", type=int, default=3000, help="pairs per Lens rate")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure (median)")
    parser.add_argument("--slices", type=int, default=10, help="turns per Lens round")
    parser.add_argument("--lens-only", action="store_true", help="skip the end-to-end jobs")
    parser.add_argument(
        "--baseline", type=Path, help="also run the Lens of this checkout (e.g. main's)"
    )
    parser.add_argument("--serve-lens", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help="use this Redis (flushed!) instead of starting one")
    logging.basicConfig(level=logging.WARNING)
    arguments = parser.parse_args()
    if arguments.serve_lens:
        asyncio.run(serve_lens(arguments.serve_lens))
        sys.exit(0)
    report = asyncio.run(main(arguments))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")
