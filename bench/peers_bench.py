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

``--limited`` runs a limited task instead (:data:`SCENARIOS`), in Forum's
task layer, BullMQ and Celery (:data:`LIMITED`): ``keys``, 8 keys with at
most 2 running per key, each job sleeping 20 ms; ``rate``, 50 starts/s on
the task; and, when asked (``--scenarios``), ``free``: the keys' jobs
without the limit, for what the limit costs. Each run is two worker
processes of the system with 16 slots each (started, then ready, before the
clock), and its producer's ``--jobs`` jobs (default :data:`LIMITED_JOBS`);
every job logs its key, start and end (bench/limited_jobs.py says how, and
how each system is told the limits; bench/peers/bullmq/limited.mjs is
BullMQ's side). The report
says, per system: jobs/s (first enqueue .. last end) and the steady rate of
starts (medians of the rounds), the most running per key at any instant and
the most starts in any second (the worst round), each against its limit.
A run whose jobs have not all ended ``--limited-deadline`` s after the last
enqueue is reported on those that did, marked incomplete::

    .venv-bench/bin/python bench/peers_bench.py --limited [--systems forum-tasks bullmq celery]
        [--rounds 1] [--jobs N] [--scenarios keys rate free] [--limited-deadline 60]

It writes bench/results/peers_limits.json and peers_limits.txt (the table).
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
import signal
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from http_bench import forum_node, redis_server
from limited_jobs import Scenario, held, read_log

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
NOOP_JOBS = ROOT / "bench" / "noop_jobs.py"
SYSTEMS = ("forum", "forum-tasks", "saq", "streaq", "taskiq", "arq")
#: The systems of ``--limited``: Forum's task layer and the peers with limits.
LIMITED = ("forum-tasks", "bullmq", "celery")
#: Forum's systems: each run in this script's Python against a fresh forum serve.
FORUMS = ("forum", "forum-tasks")
#: The issue's targets for the task layer (issue 15): forum-tasks / forum, and
#: forum-tasks / the fastest peer, at least these.
TARGETS = {"tasks_vs_forum_min": 0.8, "tasks_vs_fastest_peer_min": 2.0}
#: Each system's own Redis database (flushed before each of its runs).
DATABASES = {name: db for db, name in enumerate(SYSTEMS + LIMITED[1:])}
#: The virtualenv each system runs in (scripts/bench-env); Forum's is this Python.
VENVS = {
    "saq": ".venv-bench-saq",
    "streaq": ".venv-bench",
    "taskiq": ".venv-bench",
    "arq": ".venv-bench-arq",
    "celery": ".venv-bench-celery",
}
#: BullMQ's side: a Node package, its node_modules made by scripts/bench-env.
BULLMQ = Path("bench") / "peers" / "bullmq"
#: What to report the versions of, per system.
PACKAGES = {
    "forum": ("forum", "redis", "hiredis"),
    "forum-tasks": ("forum", "redis", "hiredis"),
    "saq": ("saq", "redis", "hiredis"),
    "streaq": ("streaq", "coredis"),
    "taskiq": ("taskiq", "taskiq-redis", "redis", "hiredis"),
    "arq": ("arq", "redis", "hiredis"),
    "celery": ("celery", "kombu", "redis"),
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
        else shutil.which("node") or "node"
        if name == "bullmq"
        else str(venvs.resolve() / VENVS[name] / "bin" / "python")
        for name in systems
    }
    if "bullmq" in chosen and not (venvs / BULLMQ / "node_modules" / "bullmq").is_dir():
        raise BenchError(f"bullmq: no node_modules in {venvs / BULLMQ} (run scripts/bench-env)")
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


async def versions(python: str, system: str, venvs: Path = ROOT) -> dict[str, str | None]:
    if system == "bullmq":
        return await node_versions(python, venvs / BULLMQ / "node_modules")
    argv = ("-I", "-c", VERSIONS, PACKAGES[system][0], *PACKAGES[system])
    try:
        out = await child(python, *argv, deadline=VERSIONS_TIMEOUT)
    except RunTimeout:
        raise BenchError(f"{system}: {python} did not say its versions in "
                         f"{VERSIONS_TIMEOUT:g} s") from None  # fmt: skip
    found: dict[str, str | None] = json.loads(out)
    return found


async def node_versions(node: str, modules: Path) -> dict[str, str | None]:
    """Node's version and the installed bullmq's and ioredis's (their
    package.json files: what ``require`` would load)."""
    found = {"node": (await child(node, "--version", deadline=VERSIONS_TIMEOUT)).strip()}
    for name in ("bullmq", "ioredis"):
        found[name] = json.loads((modules / name / "package.json").read_text())["version"]
    return dict(found)


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


def report_head(bench: str, args: argparse.Namespace) -> dict[str, Any]:
    """What every report of this script begins with: the machine and the runs."""
    return {
        "bench": bench,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "load_average_at_start": os.getloadavg()[0],
        "rounds": args.rounds,
        "redis": "one redis-server, appendonly yes, appendfsync always; a database per system",
        "run_timeout": args.run_timeout,
    }  # fmt: skip


async def measure(args: argparse.Namespace, chosen: dict[str, str]) -> dict[str, Any]:
    report: dict[str, Any] = {
        **report_head("peers_bench", args),
        "jobs": args.jobs,
        "timed": "N / (first enqueue .. N-th completion); see bench/noop_jobs.py",
        "forum": "forum serve --fsync always (fresh per run) + ForumClient + Lens + Worker",
        "forum-tasks": "forum's, through the task layer: App.enqueue + app.worker, a no-op task",
        "targets": TARGETS,
        "profiled": args.profile is not None,
        "versions": {name: await versions(python, name) for name, python in chosen.items()},
        "concurrency": {},
        "timeouts": [],
    }  # fmt: skip

    async def noop(concurrency: int, name: str, round_: int, python: str, base: str) -> Any:
        which = Run(name, concurrency, round_)
        if (run := await timed_run(which, python, base, args)) is None:
            report["timeouts"].append(asdict(which))
        return run

    for concurrency, runs in (await in_turns(args.concurrency, args.rounds, chosen, noop)).items():
        report["concurrency"][str(concurrency)] = summary(runs)
    return report


async def in_turns(
    figures: list[Any],
    rounds: int,
    chosen: dict[str, str],
    run: Callable[[Any, str, int, str, str], Awaitable[dict[str, Any] | None]],
) -> dict[Any, dict[str, list[dict[str, Any]]]]:
    """Per figure (a concurrency, a scenario), each system's runs (None: not
    one), ``run(figure, system, round, python, redis_base)`` against one
    redis-server started here: the systems take turns round by round."""
    found: dict[Any, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="peers-bench-redis-") as data:
        async with redis_server(Path(data), "always") as (redis_url, _):
            base = redis_url.rsplit("/", 1)[0]
            for figure in figures:
                runs: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
                found[figure] = runs
                for round_ in range(1, rounds + 1):
                    for name, python in chosen.items():
                        if (result := await run(figure, name, round_, python, base)) is not None:
                            runs[name].append(result)
    return found


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


# -- --limited: a limited task ----------------------------------------------------------

#: The limited task's scenarios (bench/limited_jobs.py ``Scenario``).
SCENARIOS = {
    "keys": Scenario(keys=8, max_running=2, rate=0, sleep=0.02),
    "rate": Scenario(keys=1, max_running=0, rate=50, sleep=0),
    # keys' jobs without the limit: what the limit costs (only when asked).
    "free": Scenario(keys=8, max_running=0, rate=0, sleep=0.02),
}
#: The scenarios run unless --scenarios says otherwise.
DEFAULT_SCENARIOS = ["keys", "rate"]
#: Jobs per run of each scenario: the keys' ~2 s at the limit's most (8 x 2
#: running / 20 ms = 800/s), the rate's 12 s at 50/s.
LIMITED_JOBS = {"keys": 1600, "rate": 600, "free": 1600}
LIMITED_WORKERS = 2  # worker processes per run
LIMITED_SLOTS = 16  # slots per worker process: twice the 8 x 2 the keys allow
READY_TIMEOUT = 60.0  # s for a run's workers to be taking jobs
#: s from the last enqueue: a run not done by then is reported on the jobs
#: that ran (the default of --limited-deadline)
LIMITED_DEADLINE = 60.0
LIMITED_POLL = 0.05  # s between looks at the log
STOP_GRACE = 5.0  # s between SIGTERM to a worker and SIGKILL to its group
#: The systems that have no such limit, by scenario: they run it without.
UNENFORCED = {"keys": ("celery",), "free": LIMITED}
#: How each system is told the limits, for the report.
LIMITED_HOW = {
    "forum-tasks": "@app.task(limit_key=lambda key, i: key, max_running=2) / "
    "@app.task(rate_limit='50/s'): cluster-wide through the Lens; 2 app.worker "
    "processes of 16 slots, one forum serve --fsync always",
    "bullmq": "BullMQ OSS has no per-key limit (groups are BullMQ Pro): a queue per key, "
    "each setGlobalConcurrency(2) / Worker limiter {max: 50, duration: 1000} (global); "
    "2 Node processes, a Worker of 16 slots per queue",
    "celery": "no per-key limit in Celery: the keys run unlimited / "
    "@app.task(rate_limit='50/s'), per worker as documented; 2 celery worker "
    "processes, --concurrency 16 (prefork, its default), the Redis broker",
}


def limited_argv(system: str, role: str, venvs: Path) -> list[str]:
    """The script and its first arguments that run ``role`` of ``system``."""
    if system == "bullmq":
        return [str((venvs / BULLMQ / "limited.mjs").resolve()), role]
    return [str(ROOT / "bench" / "limited_jobs.py"), role, system]


async def limited_run(
    which: Run, scenario: str, executable: str, redis_base: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One run of ``scenario`` by ``which.system`` (the module docstring):
    what :func:`limited_jobs.held` says of its log."""
    system = which.system
    url = f"{redis_base}/{DATABASES[system]}"
    async with aioredis.from_url(url) as client:
        await client.flushdb()
    argv = [*SCENARIOS[scenario].argv(), "--redis-url", url]
    async with contextlib.AsyncExitStack() as stack:
        if system in FORUMS:
            data = stack.enter_context(tempfile.TemporaryDirectory(prefix="peers-limits-forum-"))
            forum_url, _ = await stack.enter_async_context(forum_node(Path(data), "always"))
            argv += ["--forum-url", forum_url]
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="peers-limits-")))
        log, ready = logs / "jobs.log", logs / "ready.log"
        log.touch()
        ready.touch()
        started = loop_time()
        workers = [
            await stack.enter_async_context(worker_process(
                executable, *limited_argv(system, "worker", args.venvs), *argv,
                "--log", str(log), "--ready", str(ready), "--slots", str(LIMITED_SLOTS),
            ))
            for _ in range(LIMITED_WORKERS)
        ]  # fmt: skip
        await until_lines(ready, LIMITED_WORKERS, workers, started + READY_TIMEOUT, "ready")
        produced = json.loads(await child(
            executable, *limited_argv(system, "produce", args.venvs), *argv,
            "--jobs", str(args.limited_jobs[scenario]), deadline=args.run_timeout,
        ))  # fmt: skip
        jobs = args.limited_jobs[scenario]
        try:
            await until_lines(log, jobs, workers, loop_time() + args.limited_deadline, "done")
        except RunTimeout as exc:  # the figures of the jobs that ran, marked incomplete
            if not log.read_bytes():
                raise
            progress(f"{scenario}: {which}: incomplete, {exc}")
        ran = read_log(log.read_text().splitlines())
    return held(ran, SCENARIOS[scenario], produced["enqueue_started"], jobs)


def loop_time() -> float:
    return asyncio.get_running_loop().time()


@contextlib.asynccontextmanager
async def worker_process(executable: str, *argv: str) -> Any:
    """A worker in a process group of its own: SIGTERM at the end, then, after
    :data:`STOP_GRACE` or at once once it exited, SIGKILL to its whole group."""
    proc = await asyncio.create_subprocess_exec(
        executable, *argv, cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, start_new_session=True
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_GRACE):
                await proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def until_lines(
    path: Path, lines: int, workers: list[Any], deadline: float, what: str
) -> None:
    """Until ``path`` holds ``lines`` lines; a RunTimeout past ``deadline``
    (the loop's clock), a BenchError once a worker has exited."""
    while path.read_bytes().count(b"\n") < lines:
        if any(proc.returncode is not None for proc in workers):
            raise BenchError(f"a worker exited (its error above) before {what}")
        if loop_time() > deadline:
            have = path.read_bytes().count(b"\n")
            raise RunTimeout(f"{have} of {lines} lines in {path.name} by the deadline ({what})")
        await asyncio.sleep(LIMITED_POLL)


async def measure_limited(args: argparse.Namespace, chosen: dict[str, str]) -> dict[str, Any]:
    report: dict[str, Any] = {
        **report_head("peers_limits", args),
        "workers": LIMITED_WORKERS,
        "slots_per_worker": LIMITED_SLOTS,
        "scenarios": {name: asdict(SCENARIOS[name]) | {"jobs": args.limited_jobs[name]}
                      for name in args.scenarios},
        "timed": "jobs / (first enqueue .. last job's end), the workers started and ready before",
        "how": {name: LIMITED_HOW[name] for name in chosen},
        "limited_deadline": args.limited_deadline,
        "versions": {name: await versions(python, name, args.venvs)
                     for name, python in chosen.items()},
        "results": {},
        "timeouts": [],
    }  # fmt: skip

    async def limited(scenario: str, name: str, round_: int, python: str, base: str) -> Any:
        which = Run(name, LIMITED_SLOTS, round_)
        try:
            run = await limited_run(which, scenario, python, base, args)
        except RunTimeout as exc:
            progress(f"{scenario}: {which}: timeout ({exc})")
            report["timeouts"].append(asdict(which) | {"scenario": scenario})
            return None
        progress(f"{scenario}: {which}: {limited_line(run)}")
        return run

    for scenario, runs in (await in_turns(args.scenarios, args.rounds, chosen, limited)).items():
        report["results"][scenario] = {
            name: limited_summary(samples) | {"enforced": name not in UNENFORCED.get(scenario, ())}
            for name, samples in runs.items()
        }
    return report


def limited_line(run: dict[str, Any]) -> str:
    return (f"{run['jobs']} jobs, {run['jobs_per_s']:,.1f} jobs/s, at most "
            f"{run['max_running_per_key']} running per key, steady "
            f"{shown(run['steady_rate_per_s'], '{:.1f}').strip()} starts/s")  # fmt: skip


def limited_summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A system's runs of a scenario: the medians of its rates and ratios,
    the worst (most) of its counts of running jobs, and every run."""
    if not samples:
        return {"jobs_per_s": None, "runs": []}
    medians = ("jobs_per_s", "steady_rate_per_s", "steady_rate_vs_limit")
    worst = ("max_running_per_key", "max_running", "max_running_per_key_vs_limit",
             "most_starts_in_1s", "most_starts_in_1s_vs_limit")  # fmt: skip
    return {
        "complete": all(s["complete"] for s in samples),
        **{key: median_of(s[key] for s in samples) for key in medians},
        **{key: max_of(s[key] for s in samples) for key in worst},
        "runs": samples,
    }


def incomplete(row: dict[str, Any]) -> str:
    """A table row's mark: "*" when a run's jobs did not all run in time."""
    return "*" if row.get("complete") is False else " "


def median_of(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def max_of(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def limited_table(report: dict[str, Any]) -> str:
    lines = [
        f"A limited task: {report['workers']} worker processes x {report['slots_per_worker']} "
        f"slots per system; jobs/s = jobs / (first enqueue .. last end), median of "
        f"{report['rounds']}; the most running per key and in any 1 s: the worst round "
        f"(load average at start {report['load_average_at_start']:.1f}, 2 cores, shared)"
    ]
    for scenario, rows in report["results"].items():
        spec = report["scenarios"][scenario]
        if scenario in ("keys", "free"):
            within = spec["keys"] * spec["max_running"] / spec["sleep"]
            lines += [
                f"\n{scenario}: {spec['keys']} keys, "
                + (f"at most {spec['max_running']} running per key" if within else "no limit")
                + f", each job {spec['sleep'] * 1000:g} ms, {spec['jobs']} jobs"
                + (f" (at most {within:,.0f} jobs/s within the limit)" if within else ""),
                f"{'system':>12}  {'jobs/s':>8}  {'max/key':>7}  {'/limit':>7}  {'max all':>7}",
            ]
            for name, row in rows.items():
                lines.append(f"{name:>12}{incomplete(row)} " + "  ".join([
                    shown(row["jobs_per_s"], "{:>8,.0f}"),
                    shown(row.get("max_running_per_key"), "{:>7.0f}"),
                    shown(row.get("max_running_per_key_vs_limit"), "{:>6.2f}x")
                    if row["enforced"] else f"{'(none)':>7}",
                    shown(row.get("max_running"), "{:>7.0f}"),
                ]))  # fmt: skip
        else:
            lines += [
                f"\nrate: {spec['rate']:g} starts/s on the task, {spec['jobs']} jobs; steady = "
                "the starts between the first and last 10 % of jobs",
                f"{'system':>12}  {'jobs/s':>8}  {'steady/s':>8}  {'/limit':>7}  "
                f"{'max in 1s':>9}  {'/limit':>7}",
            ]
            for name, row in rows.items():
                lines.append(f"{name:>12}{incomplete(row)} " + "  ".join([
                    shown(row["jobs_per_s"], "{:>8,.1f}"),
                    shown(row.get("steady_rate_per_s"), "{:>8.1f}"),
                    shown(row.get("steady_rate_vs_limit"), "{:>6.3f}x"),
                    shown(row.get("most_starts_in_1s"), "{:>9.0f}"),
                    shown(row.get("most_starts_in_1s_vs_limit"), "{:>6.2f}x"),
                ]))  # fmt: skip
    lines += ["", *(f"{name}: {how}" for name, how in report["how"].items())]
    rows = [row for rows in report["results"].values() for row in rows.values()]
    if any(incomplete(row) == "*" for row in rows):
        lines.append(f"* not every job ran by {report['limited_deadline']:g} s after the last "
                     "enqueue: the figures are of those that did (the JSON: how many)")  # fmt: skip
    if report["timeouts"]:
        lines.append("timed out: " + "; ".join(
            f"{t['scenario']}: {Run(t['system'], t['slots'], t['round'])}"
            for t in report["timeouts"]))  # fmt: skip
    return "\n".join(lines)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, help="jobs per run (default 2000; --limited: "
                        f"per scenario, {LIMITED_JOBS})")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS + LIMITED[1:],
                        help=f"default: {' '.join(SYSTEMS)}; "
                             f"--limited: {' '.join(LIMITED)}")  # fmt: skip
    parser.add_argument("--python", action="append", default=[], metavar="SYSTEM=PATH",
                        help="run SYSTEM with this Python instead of its venv's")  # fmt: skip
    parser.add_argument("--venvs", type=Path, default=ROOT, metavar="DIR",
                        help="the peers' .venv-bench* are in DIR (default: this checkout; "
                             "another's serve: the peers run none of its code)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="default: bench/results/peers_bench.json; "
                        "--limited: peers_limits.json, and the table beside it (.txt)")  # fmt: skip
    parser.add_argument("--plot", type=Path, default=RESULTS / "peers_bench.png")
    parser.add_argument("--no-plot", action="store_true", help="draw no PNG (no matplotlib)")
    parser.add_argument("--run-timeout", type=float, default=RUN_TIMEOUT, metavar="S",
                        help=f"kill a run not done in S s; reported as a timeout, "
                             f"the bench goes on (default {RUN_TIMEOUT:g})")  # fmt: skip
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="cProfile each run's process (its figures then are not "
                             "comparable): DIR/SYSTEM-cSLOTS-rROUND.pstats")  # fmt: skip
    parser.add_argument(
        "--limited",
        action="store_true",
        help="a limited task, in Forum, BullMQ and Celery (the docstring)",
    )
    parser.add_argument(
        "--limited-deadline",
        type=float,
        default=LIMITED_DEADLINE,
        metavar="S",
        help="--limited: a run's jobs not all done S s after the last enqueue: its figures "
        f"are of those that ran, marked incomplete (default {LIMITED_DEADLINE:g})",
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=list(SCENARIOS),
        default=DEFAULT_SCENARIOS,
        help=f"--limited: which (default: {' '.join(DEFAULT_SCENARIOS)}; free: keys' "
        "jobs unlimited, for what the limit costs)",
    )
    args = parser.parse_args()
    allowed = LIMITED if args.limited else SYSTEMS
    args.systems = args.systems or list(allowed)
    if unknown := [name for name in args.systems if name not in allowed]:
        parser.error(f"--systems {' '.join(unknown)}: not one of {' '.join(allowed)}")
    if args.limited:
        args.limited_jobs = {name: args.jobs or LIMITED_JOBS[name] for name in SCENARIOS}
        args.no_plot = True
    args.jobs = args.jobs or 2000
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    if args.jobs < 1 or args.rounds < 1 or min(args.concurrency) < 1:
        parser.error("--jobs, --rounds and --concurrency must be at least 1")
    if not args.run_timeout > 0:
        parser.error("--run-timeout must be more than 0")
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("matplotlib is not installed here: run from .venv-bench, or --no-plot")
    out = args.out or RESULTS / ("peers_limits.json" if args.limited else "peers_bench.json")
    try:
        chosen = pythons(list(dict.fromkeys(args.systems)), args.python, args.venvs)
        report = await (measure_limited if args.limited else measure)(args, chosen)
    except BenchError as exc:
        print(f"peers_bench: {exc}", file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    shown_table = limited_table(report) if args.limited else table(report)
    print(shown_table)
    if args.limited:
        out.with_suffix(".txt").write_text(shown_table + "\n")
    print(f"\nwritten to {out}")
    if not args.no_plot:
        plot(report, args.plot)
        print(f"drawn to {args.plot}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main()))
