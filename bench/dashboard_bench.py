"""What the dashboard costs, two ways (``--mode``):

``pages`` (issue 32's bench): a real redis-server's Lens filled with
``--jobs`` task jobs (100k, 1M) in a mix of states and tasks, written
through the Lens's own scripts (producers' records in batches, claims,
completions, failures, cancels: so the job index is what a cluster would
have), a real ``forum serve --lens-url`` node, and every ``/ui`` page of
the route table (so pages added later are measured too), the Jobs page's
searches (``SEARCHES``) and a page ``DEEP_PAGES`` deep, fetched over HTTP
with the token, ``--requests`` times each: p50 and p99 per page. The fill
runs in ``--workers`` processes (its cost is the client's Python: 1M jobs
in about 8 minutes on 2 shared cores). With
``--baseline DIR`` (another checkout, ``git -C main archive HEAD | tar -x
-C DIR``), a node of that tree on the same Redis is timed too (fewer
requests: its listing reads every job), so the listing before the index is
compared in the same run. The issue's bar: p99 of each page <= 200 ms at
100k and 1M jobs.

``groups``: the Prefixes panel's ``LiveIndex.groups`` (a bisection per
group, B) against counting every live tuple's group (A, a scan), in one
process, at ``--live`` tuples over each ``--groups`` count.

Usage::

    python bench/dashboard_bench.py --mode pages --jobs 100000 [--requests 30]
        [--workers 6] [--baseline /tmp/main] [--out PATH]
    python bench/dashboard_bench.py --mode groups [--live 1000000] [--groups 10 100]

Prints a table; writes JSON to ``bench/results/dashboard_bench.json`` (pages:
``dashboard_pages_<jobs>.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import multiprocessing
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from redis import Redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import trees  # noqa: E402

from forum.coordinator import Failed, Lens  # noqa: E402
from forum.coordinator.claim import Claim  # noqa: E402
from forum.coordinator.records import NewRecord  # noqa: E402
from forum.dashboard.pages import ROUTES  # noqa: E402
from forum.deploy.processes import NodeService  # noqa: E402
from forum.node.core.entries import EntryId, Tuple  # noqa: E402
from forum.node.space.index import LiveIndex  # noqa: E402
from tests.fixtures.redis_server import RedisServer  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SEPARATOR = b"/"
TOKEN = "bench-token"
TASKS = ("resize", "email", "report", "sync", "notify")
#: The mix of states, by share of the jobs (a day of a busy app: most done).
MIX = (
    ("done", 0.70), ("queued", 0.10), ("delayed", 0.05), ("dead", 0.04), ("retrying", 0.04),
    ("cancelled", 0.04), ("running", 0.03),
)  # fmt: skip
#: Routes that are no page to time (the token form, the cookie, an action).
NOT_PAGES = ("/login", "/session", "/purge")
#: The Jobs page's searches timed besides the route table's plain page (issue 32:
#: by task, by state, both, a text search, a key prefix); and how many "next"
#: pages deep the deep page is (followed from the first, then timed).
SEARCHES = ("task=resize", "state=dead", "task=email&state=done", "text=image-0042",
            "prefix=report:0000")  # fmt: skip
DEEP_PAGES = 20
NEXT_LINK = re.compile(r'id="page-next" href="([^"]+)"')
BATCH = 5000


# -- groups: LiveIndex.groups against a scan ---------------------------------------------


def filled(live: int, groups: int) -> LiveIndex:
    index = LiveIndex()
    index.bulk_load(
        [Tuple(EntryId("bench", i + 1), b"g%03d/item/%08d" % (i % groups, i)) for i in range(live)]
    )
    return index


def by_scan(index: LiveIndex) -> dict[bytes, int]:
    """Every live tuple looked at: its group counted."""
    counts: Counter[bytes] = Counter()
    for _, item in index.iter_matching(b""):
        cut = item.payload.find(SEPARATOR)
        counts[item.payload if cut < 0 else item.payload[: cut + 1]] += 1
    return dict(counts)


def timed(call: Callable[[], object], rounds: int) -> float:
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def groups_mode(args: argparse.Namespace) -> None:
    rows = []
    for groups in args.groups:
        index = filled(args.live, groups)
        assert index.groups(SEPARATOR, 500) == by_scan(index)  # the same answer both ways
        scan = timed(lambda index=index: by_scan(index), args.rounds)
        bisect = timed(lambda index=index: index.groups(SEPARATOR, 500), args.rounds)
        rows.append({"live": args.live, "groups": groups, "scan_s": scan, "groups_s": bisect})
    print(f"{'live':>10} {'groups':>7} {'A scan s':>10} {'B groups s':>11} {'A/B':>8}")
    for row in rows:
        ratio = row["scan_s"] / row["groups_s"]
        print(
            f"{row['live']:>10} {row['groups']:>7} {row['scan_s']:>10.4f} "
            f"{row['groups_s']:>11.6f} {ratio:>7.0f}x"
        )
    report = {"python": platform.python_version(), "rounds": args.rounds, "rows": rows}
    write(args.out or RESULTS / "dashboard_bench.json", report)


# -- pages: every /ui page over a filled Lens --------------------------------------------


def plan(jobs: int) -> dict[str, list[str]]:
    """Each state's keys: ``MIX`` shares of ``jobs``, tasks in turn."""
    keys: dict[str, list[str]] = {}
    start = 0
    for i, (state, share) in enumerate(MIX):
        count = jobs - start if i == len(MIX) - 1 else round(jobs * share)
        keys[state] = [f"{TASKS[n % len(TASKS)]}:{n:08d}" for n in range(start, start + count)]
        start += count
    return keys


def fill(url: str, keys: dict[str, list[str]], workers: int) -> dict[str, float]:
    """Write every job through the Lens's scripts, each of ``workers``
    processes (its own Lens, its own connection) a stripe of every state's
    keys, in pipelined batches; the seconds each phase took (the slowest
    worker's, from the start) and ``fill_s``, the whole.

    Processes, not one process's tasks: the fill is bound by the client's
    Python (building the calls, parsing replies: ~0.4 ms a claim), not by
    Redis (~0.06 ms of its CPU a claim), so one process left Redis idle
    most of the time (issue 32's 100k took 262 s)."""
    started = time.perf_counter()
    now = time.time()  # one clock for every stripe: the index orders jobs by it
    stripes = [{state: of[w::workers] for state, of in keys.items()} for w in range(workers)]
    context = multiprocessing.get_context("spawn")  # no fork of a running event loop
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        phases = list(pool.map(fill_stripe, [url] * workers, stripes, [now] * workers))
    report = {phase: max(of[phase] for of in phases) for phase in phases[0]}
    report["fill_s"] = time.perf_counter() - started
    return report


def fill_stripe(url: str, keys: dict[str, list[str]], now: float) -> dict[str, float]:
    """One worker process's part of :func:`fill`, on uvloop (as ``forum``
    runs): less of the client's time in the event loop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_fill_stripe(url, keys, now))


async def _fill_stripe(url: str, keys: dict[str, list[str]], now: float) -> dict[str, float]:
    started = time.perf_counter()
    phases: dict[str, float] = {}
    async with Lens.from_url(url) as lens:
        every = [(state, key) for state, of in keys.items() for key in of]
        for i in range(0, len(every), BATCH):
            records = []
            for state, key in every[i : i + BATCH]:
                task = key.split(":", 1)[0]
                due = now + 3600 if state == "delayed" else now
                fields = {
                    "state": "enqueued",
                    "task": task,
                    "due": due,
                    "updated": now,
                    "enqueued": now,
                    "args": f"({key.split(':')[1]!r}, 'image-{key[-4:]}.png')",
                }
                records.append(NewRecord(key, fields, 2 * 86400))  # fmt: skip
            await lens.record_enqueued_many(records)
        phases["records_s"] = time.perf_counter() - started
        claimed = [key for state in ("done", "dead", "retrying", "running", "cancelled")
                   for key in keys[state]]  # fmt: skip
        claims: dict[str, Claim] = {}
        for i in range(0, len(claimed), BATCH):
            batch = claimed[i : i + BATCH]
            outcomes = await lens.claim_many([(k, None) for k in batch], "bench-worker", 3600)
            for key, outcome in zip(batch, outcomes, strict=True):
                assert isinstance(outcome, Claim), outcome
                claims[key] = outcome
        phases["claims_s"] = time.perf_counter() - started
        done = [claims[key] for key in keys["done"]]
        for i in range(0, len(done), BATCH):
            await lens.complete_many(done[i : i + BATCH])
        phases["completions_s"] = time.perf_counter() - started
        await _each(keys["dead"], lambda key: _failed(lens, claims[key], None))
        await _each(keys["retrying"], lambda key: _failed(lens, claims[key], 600.0))
        await _each(keys["cancelled"], lens.cancel)
        phases["failures_cancels_s"] = time.perf_counter() - started
    return phases


async def _failed(lens: Lens, claim: Claim, delay: float | None) -> None:
    state = "dead" if delay is None else "retrying"
    fields: dict[str, Any] = {"state": state, "error": "OSError: backend down",
                              "due": time.time() + (delay or 0)}  # fmt: skip
    await lens.record(claim, fields, 86400)
    await claim.release(Failed(delay))


async def _each(keys: Sequence[str], call: Callable[[str], Any]) -> None:
    for i in range(0, len(keys), 500):  # concurrent calls go in pipelines (Scripts.run)
        await asyncio.gather(*(call(key) for key in keys[i : i + 500]))


def pages(sample_key: str) -> list[str]:
    """Every page of the route table, as a GET path (the job page with a key)."""
    found = []
    for path in ROUTES:
        if path.endswith(NOT_PAGES):
            continue
        found.append(f"{path}?key={sample_key}" if path.endswith("/job") else path)
        if path.endswith("/jobs"):
            found += [f"{path}?{query}" for query in SEARCHES]
    return found


async def deep_page(session: aiohttp.ClientSession, url: str, path: str) -> list[str]:
    """The Jobs page ``DEEP_PAGES`` "next" links after the first, as a path
    (none if a page has no "next": a tree without paging, a small fill)."""
    for _ in range(DEEP_PAGES):
        async with session.get(url + path) as answer:
            link = NEXT_LINK.search(await answer.text())
        if link is None:
            return []
        path = html.unescape(link.group(1))
    return [path]


async def time_pages(url: str, paths: list[str], requests: int) -> dict[str, dict[str, float]]:
    """p50 and p99 (ms) of ``requests`` GETs of each page, one at a time."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    timings: dict[str, dict[str, float]] = {}
    async with aiohttp.ClientSession(headers=headers) as session:
        jobs = next(path for path in paths if path.endswith("/jobs"))
        for path in [*paths, *await deep_page(session, url, jobs)]:
            async with session.get(url + path) as first:  # opens the Lens, warms up
                status = first.status
                await first.read()
            seconds = []
            for _ in range(requests):
                started = time.perf_counter()
                async with session.get(url + path) as answer:
                    await answer.read()
                seconds.append(time.perf_counter() - started)
            seconds.sort()
            p99 = seconds[min(len(seconds) - 1, round(0.99 * (len(seconds) - 1)))]
            timings[path] = {"status": status, "p50_ms": statistics.median(seconds) * 1000,
                             "p99_ms": p99 * 1000, "requests": requests}  # fmt: skip
    return timings


async def pages_mode(args: argparse.Namespace) -> None:
    load_start = os.getloadavg()  # the machine may be shared: its load goes in the report
    with tempfile.TemporaryDirectory(prefix="dashboard-bench-") as directory:
        root = Path(directory)
        redis = RedisServer(root / "redis")
        redis.start()
        nodes: list[NodeService] = []
        try:
            keys = plan(args.jobs)
            phases = fill(redis.url, keys, args.workers)
            fill_s = phases["fill_s"]
            print("  " + ", ".join(f"{phase} {seconds:.1f}" for phase, seconds in phases.items()))
            async with Lens.from_url(redis.url) as lens:
                counts = await lens.job_counts()
            with Redis.from_url(redis.url) as client:
                memory = int(client.info("memory")["used_memory"])
            print(f"filled {args.jobs:,} jobs in {fill_s:.1f} s: {counts.by_state()}; "
                  f"Redis used_memory {memory / 2**20:.0f} MiB")  # fmt: skip
            paths = pages(keys["done"][0])
            runs: dict[str, Any] = {}
            trees_to_run = [("this", None)] + (
                [("baseline", args.baseline)] if args.baseline else []
            )
            for label, tree in trees_to_run:
                env = {} if tree is None else {"PYTHONPATH": trees.pythonpath(tree)}
                node = NodeService(label, root / "nodes", ["--token", TOKEN, "--lens-url",
                                                           redis.url], env)  # fmt: skip
                nodes.append(node)
                await node.start()
                requests = args.requests if tree is None else max(3, args.requests // 10)
                runs[label] = await time_pages(node.url, paths, requests)
                await node.stop()
        finally:
            for node in nodes:
                await node.stop()
            redis.stop()
    print(f"{'page':<40} " + " ".join(f"{label + ' p50':>14} {label + ' p99':>14}"
                                       for label in runs))  # fmt: skip
    for path in runs["this"]:
        cells = [f"{runs[label][path]['p50_ms']:>11.1f} ms {runs[label][path]['p99_ms']:>11.1f} ms"
                 if path in runs[label] else f"{'-':>14} {'-':>14}" for label in runs]  # fmt: skip
        print(f"{path:<40} " + " ".join(cells))
    report = {
        "python": platform.python_version(), "jobs": args.jobs, "mix": dict(MIX),
        "tasks": list(TASKS), "fill_s": fill_s, "fill_workers": args.workers,
        "fill_phases_s": phases, "redis_used_memory": memory,
        "counts": counts.by_state(), "cpus": os.cpu_count(), "runs": runs,
        "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
    }  # fmt: skip
    write(args.out or RESULTS / f"dashboard_pages_{args.jobs}.json", report)


def write(out: Path, report: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("pages", "groups"), default="pages")
    parser.add_argument("--jobs", type=int, default=100_000, help="pages: task jobs (100000)")
    parser.add_argument("--requests", type=int, default=30, help="pages: GETs per page (30)")
    parser.add_argument("--workers", type=int, default=6,
                        help="pages: processes filling the Lens (6)")  # fmt: skip
    parser.add_argument("--baseline", type=Path, help="pages: another checkout, timed too")
    parser.add_argument("--live", type=int, default=1_000_000, help="groups: live tuples")
    parser.add_argument("--groups", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--rounds", type=int, default=5, help="groups: rounds (median)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.mode == "groups":
        groups_mode(args)
    else:
        asyncio.run(pages_mode(args))


if __name__ == "__main__":
    main()
