"""Forum against SAQ, streaq, taskiq and arq: no-op jobs end to end, one run.

Each system runs the same job: enqueue N no-op jobs from C concurrent
producers, then run one worker with C slots until its N-th completion;
throughput is N / (first enqueue .. N-th completion). bench/noop_jobs.py does
one such run, and says exactly what is timed and how each system is driven.
Forum is the real thing: a ``forum serve --fsync always`` process (a fresh
one, with its own data directory, for each run) + ``ForumClient`` + Lens +
``Worker``, twice: ``forum`` writes raw tuples for a raw ``Worker``;
``forum-tasks`` runs the same jobs through the task layer (``App.enqueue`` of
an ``@app.task`` returning ``None``, ``app.worker(...)``). The report gives
forum-tasks' ratio to forum (:data:`TARGETS`: the task layer within 0.8x of
the raw ``Worker``), to each peer and to the fastest peer (target 2x).

All share one redis-server started here, durable as the Lens needs it
(``appendonly yes``, ``appendfsync always``): each system has a database of
its own (:data:`DATABASES`), flushed before each of its runs. For C in 1 and
8 (``--concurrency``), the systems take turns round by round (``--rounds``;
the machine may be shared, so none gets a quiet or busy stretch to itself)
and the medians are reported, with Forum's ratio to each peer.

Each run is a child process in a process group of its own, given
``--run-timeout`` seconds (default 120) from its start: one that overruns is
sent SIGUSR1 (bench/noop_jobs.py then prints its asyncio tasks' stacks to
stderr), then its whole group is killed, and it is reported as a timeout
(the system, slots and round, in the table and under ``timeouts`` in the
JSON); the medians are of the runs that finished, and the benchmark goes on.
Each run's result is printed to stderr as it finishes.

The peers pin redis-py in ways that exclude each other and the tests'
environment, so each system runs as a child process of its own virtualenv's
Python (scripts/bench-env makes them)::

    forum, forum-tasks      this script's Python (.venv-bench's, or .venv's)
    streaq, taskiq          .venv-bench/bin/python
    saq                     .venv-bench-saq/bin/python
    arq                     .venv-bench-arq/bin/python

(``--venvs DIR``: the peers' venvs of another checkout, e.g. a worktree's
bench run from its ``.venv`` with ``--no-plot`` and the main checkout's
peers; Forum's systems always run this script's Python, this tree's code.)

    scripts/bench-env
    .venv-bench/bin/python bench/peers_bench.py [--jobs 2000] [--rounds 3]
        [--systems forum forum-tasks saq ...] [--python saq=/path/to/python] [--no-plot]
        [--venvs DIR]
        [--concurrency 1 8] [--run-timeout 120] [--profile DIR]

Prints a table; writes bench/results/peers_bench.json and
bench/results/peers_bench.png (jobs/s by concurrency, Forum against each peer).
``--profile DIR`` runs each system's process under cProfile (slower: for
where the time goes, not for figures) and leaves one pstats file per run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from http_bench import forum_node, redis_server

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
NOOP_JOBS = ROOT / "bench" / "noop_jobs.py"
SYSTEMS = ("forum", "forum-tasks", "saq", "streaq", "taskiq", "arq")
#: Forum's systems: each run in this script's Python against a fresh forum serve.
FORUMS = ("forum", "forum-tasks")
#: The issue's targets for the task layer (issue 15): forum-tasks / forum, and
#: forum-tasks / the fastest peer, at least these.
TARGETS = {"tasks_vs_forum_min": 0.8, "tasks_vs_fastest_peer_min": 2.0}
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
    "forum-tasks": ("forum", "redis", "hiredis"),
    "saq": ("saq", "redis", "hiredis"),
    "streaq": ("streaq", "coredis"),
    "taskiq": ("taskiq", "taskiq-redis", "redis", "hiredis"),
    "arq": ("arq", "redis", "hiredis"),
}
RUN_TIMEOUT = 120.0  # s: the default --run-timeout, for one run, all of it
VERSIONS_TIMEOUT = 60.0  # s for a system's Python to say its versions
DUMP_GRACE = 1.0  # s between SIGUSR1 (the child dumps its tasks) and SIGKILL

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


class RunTimeout(BenchError):
    """A run overran its deadline (it was killed, its whole process group)."""


@dataclass(frozen=True)
class Run:
    """Which run: the system, its slots (= producers) and the round."""

    system: str
    slots: int
    round: int

    def __str__(self) -> str:
        slots = f"{self.slots} slot{'s' if self.slots != 1 else ''}"
        return f"{self.system}, {slots}, round {self.round}"


def pythons(systems: list[str], overrides: list[str], venvs: Path = ROOT) -> dict[str, str]:
    """Each system's Python: this one for Forum's, else its venv's under
    ``venvs``, else the ``--python SYSTEM=PATH`` given."""
    chosen = {
        name: sys.executable
        if name in FORUMS
        else str(venvs.resolve() / VENVS[name] / "bin" / "python")
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


async def child(python: str, *argv: str, deadline: float) -> str:
    """Run ``python argv...`` in a process group of its own; its stdout, or a
    BenchError with its exit code, or a RunTimeout once ``deadline`` s passed."""
    proc = await asyncio.create_subprocess_exec(
        python, *argv, cwd=ROOT, stdout=asyncio.subprocess.PIPE, start_new_session=True
    )
    try:
        async with asyncio.timeout(deadline):
            out, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGUSR1)  # noop_jobs: its tasks' stacks to stderr
            await asyncio.sleep(DUMP_GRACE)
        raise RunTimeout(f"{' '.join(argv[:2])} did not finish in {deadline:g} s") from None
    finally:
        # The whole group, even after a clean exit: nothing it started outlives it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(argv[:2])} exited with {proc.returncode} (its error above)")
    return out.decode()


async def versions(python: str, system: str) -> dict[str, str | None]:
    argv = ("-I", "-c", VERSIONS, PACKAGES[system][0], *PACKAGES[system])
    try:
        out = await child(python, *argv, deadline=VERSIONS_TIMEOUT)
    except RunTimeout:
        raise BenchError(f"{system}: {python} did not say its versions in "
                         f"{VERSIONS_TIMEOUT:g} s") from None  # fmt: skip
    found: dict[str, str | None] = json.loads(out)
    return found


async def one_run(
    which: Run, python: str, redis_base: str, args: argparse.Namespace
) -> dict[str, float]:
    """One timed run (bench/noop_jobs.py); a RunTimeout past ``--run-timeout``."""
    system = which.system
    url = f"{redis_base}/{DATABASES[system]}"
    async with aioredis.from_url(url) as client:
        await client.flushdb()
    argv = [str(NOOP_JOBS), system, "--redis-url", url, "--jobs", str(args.jobs)]
    argv += ["--concurrency", str(which.slots)]
    if args.profile is not None:
        argv += ["--profile", str(args.profile / f"{system}-c{which.slots}-r{which.round}.pstats")]
    if system not in FORUMS:
        return dict(json.loads(await child(python, *argv, deadline=args.run_timeout)))
    with tempfile.TemporaryDirectory(prefix="peers-bench-forum-") as data:
        async with forum_node(Path(data), "always") as (forum_url, _):
            argv += ["--forum-url", forum_url]
            return dict(json.loads(await child(python, *argv, deadline=args.run_timeout)))


def progress(line: str) -> None:
    print(f"peers_bench: {line}", file=sys.stderr, flush=True)


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
        "forum-tasks": "forum's, through the task layer: App.enqueue + app.worker, a no-op task",
        "targets": TARGETS,
        "redis": "one redis-server, appendonly yes, appendfsync always; a database per system",
        "run_timeout": args.run_timeout,
        "profiled": args.profile is not None,
        "versions": {name: await versions(python, name) for name, python in chosen.items()},
        "concurrency": {},
        "timeouts": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="peers-bench-redis-") as data:
        async with redis_server(Path(data), "always") as (redis_url, _):
            base = redis_url.rsplit("/", 1)[0]
            for concurrency in args.concurrency:
                runs: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
                for round_ in range(1, args.rounds + 1):
                    for name, python in chosen.items():
                        which = Run(name, concurrency, round_)
                        if (run := await timed_run(which, python, base, args)) is None:
                            report["timeouts"].append(asdict(which))
                        else:
                            runs[name].append(run)
                report["concurrency"][str(concurrency)] = summary(runs)
    return report


async def timed_run(
    which: Run, python: str, redis_base: str, args: argparse.Namespace
) -> dict[str, float] | None:
    """One run, its result said on stderr as it ends; None if it timed out."""
    try:
        run = await one_run(which, python, redis_base, args)
    except RunTimeout:
        progress(f"{which}: timeout (killed after {args.run_timeout:g} s)")
        return None
    progress(f"{which}: {run['jobs_per_s']:,.0f} jobs/s ({run['seconds']:.2f} s)")
    return run


def summary(runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Per system, the medians of its finished runs (``jobs_per_s`` None if
    none finished); Forum's ratio to each peer (``forum_vs``); and the task
    layer's to Forum, to each peer and to the fastest, against
    :data:`TARGETS` (``tasks``). A ratio is None unless both sides have a
    figure (a pass too: unknown)."""
    row: dict[str, Any] = {
        name: {key: statistics.median(s[key] for s in samples) for key in samples[0]}
        | {"jobs_per_s_samples": [s["jobs_per_s"] for s in samples]}
        if samples
        else {"jobs_per_s": None, "jobs_per_s_samples": []}
        for name, samples in runs.items()
    }
    rate = {name: row[name]["jobs_per_s"] for name in runs}
    peers = [name for name in runs if name not in FORUMS]
    if "forum" in row:
        row["forum_vs"] = {name: ratio(rate["forum"], rate[name]) for name in peers}
    if "forum-tasks" in row:
        row["tasks"] = tasks_ratios(row, peers)
    return row


def tasks_ratios(row: dict[str, Any], peers: list[str]) -> dict[str, Any]:
    """forum-tasks' ratios (to forum, each peer, the fastest peer) and their
    passes; and, to tell where a gap is, its phases' rates to forum's."""
    tasks = row["forum-tasks"]["jobs_per_s"]
    forum = row.get("forum", {})
    finished = [row[name]["jobs_per_s"] for name in peers if row[name]["jobs_per_s"] is not None]
    vs_forum = ratio(tasks, forum.get("jobs_per_s"))
    vs_fastest = ratio(tasks, max(finished, default=None))
    return {
        "vs_forum": vs_forum,
        "vs": {name: ratio(tasks, row[name]["jobs_per_s"]) for name in peers},
        "vs_fastest_peer": vs_fastest,
        "pass_vs_forum": at_least(vs_forum, TARGETS["tasks_vs_forum_min"]),
        "pass_vs_fastest_peer": at_least(vs_fastest, TARGETS["tasks_vs_fastest_peer_min"]),
        "phases_vs_forum": {
            phase: ratio(row["forum-tasks"].get(f"{phase}_per_s"), forum.get(f"{phase}_per_s"))
            for phase in ("enqueue", "process")
        },
    }


def ratio(of: float | None, to: float | None) -> float | None:
    return None if of is None or to is None else of / to


def at_least(value: float | None, target: float) -> bool | None:
    return None if value is None else value >= target


# -- report -----------------------------------------------------------------------------


def table(report: dict[str, Any]) -> str:
    systems = list(report["versions"])
    peers = [name for name in systems if name not in FORUMS]
    lines = [
        f"{report['jobs']} no-op jobs: enqueued by c producers, then run by one worker "
        f"with c slots; jobs/s (first enqueue .. last completion), median of "
        f"{report['rounds']}; ratio = forum / peer",
        f"{'c':>3}  " + "  ".join(f"{name:>{wide(name)}}" for name in systems)
        + "  " + "  ".join(f"{'/' + name:>8}" for name in peers if "forum" in systems),
    ]  # fmt: skip
    for concurrency, row in report["concurrency"].items():
        rates = "  ".join(
            shown(row[name]["jobs_per_s"], f"{{:>{wide(name)},.0f}}") for name in systems
        )
        ratios = "  ".join(shown(r, "{:>7.2f}x") for r in row.get("forum_vs", {}).values())
        lines.append(f"{concurrency:>3}  {rates}  {ratios}")
    if "forum-tasks" in systems:
        lines += tasks_table(report, peers)
    if report["timeouts"]:
        lines.append(
            f"timed out (killed after {report['run_timeout']:g} s; the medians are of the "
            "runs that finished): " + "; ".join(str(Run(**t)) for t in report["timeouts"])
        )
    return "\n".join(lines)


def wide(name: str) -> int:
    """A table column's width for system ``name``."""
    return max(8, len(name))


def tasks_table(report: dict[str, Any], peers: list[str]) -> list[str]:
    """The task layer's rows: forum-tasks / forum and its enqueue and process
    phases / forum's (when forum ran), / each peer and / the fastest peer
    (when a peer ran)."""
    targets = report["targets"]
    forum = "forum" in report["versions"]
    columns = ["/forum", "enqueue", "process"] if forum else []
    columns += [f"/{name}" for name in peers] + (["/fastest"] if peers else [])
    lines = [
        f"forum-tasks (App.enqueue + app.worker): / forum (raw Worker), target >= "
        f"{targets['tasks_vs_forum_min']:.2f}x (and each phase's rate / forum's); "
        f"/ each peer; / the fastest peer, target >= "
        f"{targets['tasks_vs_fastest_peer_min']:.2f}x",
        f"{'c':>3}  " + "  ".join(f"{column:>8}" for column in columns),
    ]
    for concurrency, row in report["concurrency"].items():
        tasks = row["tasks"]
        cells = [tasks["vs_forum"], *tasks["phases_vs_forum"].values()] if forum else []
        cells += [*tasks["vs"].values()] + ([tasks["vs_fastest_peer"]] if peers else [])
        lines.append(f"{concurrency:>3}  " + "  ".join(shown(r, "{:>7.2f}x") for r in cells))
    return lines


def shown(value: float | None, form: str) -> str:
    """``value`` in ``form``, or "timeout" as wide: no run of it finished."""
    return form.format(value) if value is not None else f"{'timeout':>{len(form.format(0))}}"


def plot(report: dict[str, Any], path: Path) -> None:
    import plots  # noqa: PLC0415 (matplotlib: in .venv-bench only)

    systems = list(report["versions"])
    rows = report["concurrency"]
    # A system none of whose runs finished: a bar of 0, noted "timeout".
    series = {name: [row[name]["jobs_per_s"] or 0.0 for row in rows.values()] for name in systems}
    notes = {name: [bar_note(name, row) for row in rows.values()] for name in systems}
    plots.grouped_bars(
        path,
        f"No-op jobs end to end, {report['jobs']} jobs, median of {report['rounds']}; "
        f"under each peer: forum / peer, forum-tasks / peer\n(one Redis, appendfsync always; "
        f"forum: forum serve --fsync always + ForumClient + Lens + Worker;\n"
        f"forum-tasks: the same through App.enqueue + app.worker, under it: / forum)",
        [f"{c} slot{'s' if c != '1' else ''}" for c in rows],
        series,
        "jobs/s",
        notes,
    )


def bar_note(name: str, row: dict[str, Any]) -> str:
    """What a bar says under its figure: the ratios of Forum's systems to it
    (a peer's), or the task layer's to the raw Worker (forum-tasks')."""
    if row[name]["jobs_per_s"] is None:
        return "timeout"
    if name == "forum-tasks":
        return shown(row["tasks"]["vs_forum"], "{:.2f}x forum").strip()
    if name == "forum":
        return ""
    ratios = [row["forum_vs"][name]] if "forum_vs" in row else []
    ratios += [row["tasks"]["vs"][name]] if "tasks" in row else []
    return " / ".join(shown(r, "{:.2f}x").strip() for r in ratios)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per run (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--python", action="append", default=[], metavar="SYSTEM=PATH",
                        help="run SYSTEM with this Python instead of its venv's")  # fmt: skip
    parser.add_argument("--venvs", type=Path, default=ROOT, metavar="DIR",
                        help="the peers' .venv-bench* are in DIR (default: this checkout; "
                             "another's serve: the peers run none of its code)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS / "peers_bench.json")
    parser.add_argument("--plot", type=Path, default=RESULTS / "peers_bench.png")
    parser.add_argument("--no-plot", action="store_true", help="draw no PNG (no matplotlib)")
    parser.add_argument("--run-timeout", type=float, default=RUN_TIMEOUT, metavar="S",
                        help=f"kill a run not done in S s; reported as a timeout, "
                             f"the bench goes on (default {RUN_TIMEOUT:g})")  # fmt: skip
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="cProfile each run's process (its figures then are not "
                             "comparable): DIR/SYSTEM-cSLOTS-rROUND.pstats")  # fmt: skip
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    if args.jobs < 1 or args.rounds < 1 or min(args.concurrency) < 1:
        parser.error("--jobs, --rounds and --concurrency must be at least 1")
    if not args.run_timeout > 0:
        parser.error("--run-timeout must be more than 0")
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("matplotlib is not installed here: run from .venv-bench, or --no-plot")
    try:
        chosen = pythons(list(dict.fromkeys(args.systems)), args.python, args.venvs)
        report = await measure(args, chosen)
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
