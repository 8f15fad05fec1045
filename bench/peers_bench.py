"""Forum against SAQ, streaq, taskiq and arq: no-op jobs end to end, one run.

Each system runs the same job: enqueue N no-op jobs from C concurrent
producers, then run one worker with C slots until its N-th completion;
throughput is N / (first enqueue .. N-th completion). bench/noop_jobs.py does
one such run, and says exactly what is timed and how each system is driven.
Forum is the real thing: a ``forum serve --fsync always`` process (a fresh
one, with its own data directory, for each run) + ``ForumClient`` + Lens +
``Worker``.

All share one redis-server started here, durable as the Lens needs it
(``appendonly yes``, ``appendfsync always``): each system has a database of
its own (:data:`DATABASES`), flushed before each of its runs. For C in 1 and
8 (``--concurrency``), the systems take turns round by round (``--rounds``;
the machine may be shared, so none gets a quiet or busy stretch to itself)
and the medians are reported, with Forum's ratio to each peer.

The peers pin redis-py in ways that exclude each other and the tests'
environment, so each system runs as a child process of its own virtualenv's
Python (scripts/bench-env makes them)::

    forum, streaq, taskiq   .venv-bench/bin/python  (Forum: this script's Python)
    saq                     .venv-bench-saq/bin/python
    arq                     .venv-bench-arq/bin/python

    scripts/bench-env
    .venv-bench/bin/python bench/peers_bench.py [--jobs 2000] [--rounds 3]
        [--systems forum saq ...] [--python saq=/path/to/python] [--no-plot]

Prints a table; writes bench/results/peers_bench.json and
bench/results/peers_bench.png (jobs/s by concurrency, Forum against each peer).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from http_bench import forum_node, redis_server

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
NOOP_JOBS = ROOT / "bench" / "noop_jobs.py"
SYSTEMS = ("forum", "saq", "streaq", "taskiq", "arq")
#: Each system's own Redis database (flushed before each of its runs).
DATABASES = {name: db for db, name in enumerate(SYSTEMS)}
#: The virtualenv each system runs in (scripts/bench-env); Forum's is this Python.
VENVS = {
    "saq": ".venv-bench-saq",
    "streaq": ".venv-bench",
    "taskiq": ".venv-bench",
    "arq": ".venv-bench-arq",
}
#: What to report the versions of, per system.
PACKAGES = {
    "forum": ("forum", "redis", "hiredis"),
    "saq": ("saq", "redis", "hiredis"),
    "streaq": ("streaq", "coredis"),
    "taskiq": ("taskiq", "taskiq-redis", "redis", "hiredis"),
    "arq": ("arq", "redis", "hiredis"),
}
CHILD_DEADLINE = 900.0  # s for one run, all of it (the child's own wait is 600 s)

#: Run in each system's Python before anything is measured: the versions it
#: has, so a missing environment fails at once, in one line.
VERSIONS = """
import json, sys
from importlib import metadata
found = {}
for name in sys.argv[2:]:
    try:
        found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        found[name] = None
if found[sys.argv[1]] is None:
    sys.exit(f"{sys.argv[1]} is not installed in {sys.executable}")
print(json.dumps(found))
"""


class BenchError(Exception):
    """A run could not be done: said in one line, no traceback."""


def pythons(systems: list[str], overrides: list[str]) -> dict[str, str]:
    chosen = {
        name: sys.executable if name == "forum" else str(ROOT / VENVS[name] / "bin" / "python")
        for name in systems
    }
    for item in overrides:
        name, _, path = item.partition("=")
        if name not in chosen or not path:
            raise BenchError(f"--python {item!r}: want SYSTEM=PATH, SYSTEM one of {systems}")
        chosen[name] = path
    for name, path in chosen.items():
        if not Path(path).is_file():
            raise BenchError(f"{name}: no Python at {path} (run scripts/bench-env)")
    return chosen


async def child(python: str, *argv: str) -> str:
    """Run ``python argv...``; its stdout, or a BenchError with its exit code."""
    proc = await asyncio.create_subprocess_exec(
        python, *argv, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    try:
        async with asyncio.timeout(CHILD_DEADLINE):
            out, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(argv[:2])} exited with {proc.returncode} (its error above)")
    return out.decode()


async def versions(python: str, system: str) -> dict[str, str | None]:
    out = await child(python, "-I", "-c", VERSIONS, PACKAGES[system][0], *PACKAGES[system])
    found: dict[str, str | None] = json.loads(out)
    return found


async def one_run(
    system: str, python: str, redis_base: str, jobs: int, concurrency: int
) -> dict[str, float]:
    url = f"{redis_base}/{DATABASES[system]}"
    async with aioredis.from_url(url) as client:
        await client.flushdb()
    argv = [str(NOOP_JOBS), system, "--redis-url", url, "--jobs", str(jobs)]
    argv += ["--concurrency", str(concurrency)]
    if system != "forum":
        return dict(json.loads(await child(python, *argv)))
    with tempfile.TemporaryDirectory(prefix="peers-bench-forum-") as data:
        async with forum_node(Path(data), "always") as forum_url:
            return dict(json.loads(await child(python, *argv, "--forum-url", forum_url)))


async def measure(args: argparse.Namespace, chosen: dict[str, str]) -> dict[str, Any]:
    report: dict[str, Any] = {
        "bench": "peers_bench",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "load_average_at_start": os.getloadavg()[0],
        "jobs": args.jobs,
        "rounds": args.rounds,
        "timed": "N / (first enqueue .. N-th completion); see bench/noop_jobs.py",
        "forum": "forum serve --fsync always (fresh per run) + ForumClient + Lens + Worker",
        "redis": "one redis-server, appendonly yes, appendfsync always; a database per system",
        "versions": {name: await versions(python, name) for name, python in chosen.items()},
        "concurrency": {},
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="peers-bench-redis-") as data:
        async with redis_server(Path(data), "always") as redis_url:
            base = redis_url.rsplit("/", 1)[0]
            for concurrency in args.concurrency:
                runs: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
                for _ in range(args.rounds):
                    for name, python in chosen.items():
                        runs[name].append(await one_run(name, python, base, args.jobs, concurrency))
                report["concurrency"][str(concurrency)] = summary(runs)
    return report


def summary(runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    row: dict[str, Any] = {
        name: {key: statistics.median(s[key] for s in samples) for key in samples[0]}
        | {"jobs_per_s_samples": [s["jobs_per_s"] for s in samples]}
        for name, samples in runs.items()
    }
    if "forum" in row:
        forum = row["forum"]["jobs_per_s"]
        row["forum_vs"] = {
            name: forum / row[name]["jobs_per_s"] for name in runs if name != "forum"
        }
    return row


# -- report -----------------------------------------------------------------------------


def table(report: dict[str, Any]) -> str:
    systems = list(report["versions"])
    peers = [name for name in systems if name != "forum"]
    lines = [
        f"{report['jobs']} no-op jobs: enqueued by c producers, then run by one worker "
        f"with c slots; jobs/s (first enqueue .. last completion), median of "
        f"{report['rounds']}; ratio = forum / peer",
        f"{'c':>3}  " + "  ".join(f"{name:>8}" for name in systems)
        + "  " + "  ".join(f"{'/' + name:>8}" for name in peers if "forum" in systems),
    ]  # fmt: skip
    for concurrency, row in report["concurrency"].items():
        rates = "  ".join(f"{row[name]['jobs_per_s']:>8,.0f}" for name in systems)
        ratios = "  ".join(f"{row['forum_vs'][name]:>7.2f}x" for name in row.get("forum_vs", {}))
        lines.append(f"{concurrency:>3}  {rates}  {ratios}")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import plots  # noqa: PLC0415 (matplotlib: in .venv-bench only)

    systems = list(report["versions"])
    rows = report["concurrency"]
    series = {name: [row[name]["jobs_per_s"] for row in rows.values()] for name in systems}
    notes = {
        name: [f"{row['forum_vs'][name]:.2f}x" for row in rows.values()]
        for name in systems
        if name != "forum" and "forum" in systems
    }
    plots.grouped_bars(
        path,
        f"No-op jobs end to end, {report['jobs']} jobs, median of {report['rounds']}; "
        f"under each peer: Forum / peer\n(one Redis, appendfsync always; "
        f"Forum: forum serve --fsync always + ForumClient + Lens + Worker)",
        [f"{c} slot{'s' if c != '1' else ''}" for c in rows],
        series,
        "jobs/s",
        notes,
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per run (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--python", action="append", default=[], metavar="SYSTEM=PATH",
                        help="run SYSTEM with this Python instead of its venv's")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS / "peers_bench.json")
    parser.add_argument("--plot", type=Path, default=RESULTS / "peers_bench.png")
    parser.add_argument("--no-plot", action="store_true", help="draw no PNG (no matplotlib)")
    args = parser.parse_args()
    if args.jobs < 1 or args.rounds < 1 or min(args.concurrency) < 1:
        parser.error("--jobs, --rounds and --concurrency must be at least 1")
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("matplotlib is not installed here: run from .venv-bench, or --no-plot")
    try:
        report = await measure(args, pythons(list(dict.fromkeys(args.systems)), args.python))
    except BenchError as exc:
        print(f"peers_bench: {exc}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    print(f"\nwritten to {args.out}")
    if not args.no_plot:
        plot(report, args.plot)
        print(f"drawn to {args.plot}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main()))
