"""A limited task's workers and producer, one system at a time; and what held.

The part of ``bench/peers_bench.py --limited`` that runs inside a system's
own environment (Forum's: this checkout's Python; Celery's:
``.venv-bench-celery``; BullMQ's twin is ``bench/peers/bullmq/limited.mjs``,
run by Node). peers_bench starts two worker processes of a system, waits
until both are ready, runs its producer, and reads the log the jobs wrote::

    python bench/limited_jobs.py worker SYSTEM --redis-url URL [--forum-url URL]
        --log FILE --ready FILE --slots S SCENARIO...
    python bench/limited_jobs.py produce SYSTEM --redis-url URL [--forum-url URL]
        --jobs N SCENARIO...

``SCENARIO`` is ``--keys K --max-running M --rate R --sleep S`` (R 0: no
rate limit; M 0: no per-key limit): job ``i`` is ``limited(key, i)`` with
``key`` = ``k{i % K}``; it sleeps ``S`` seconds and then appends one line,
``KEY START END`` (wall-clock seconds, this machine's one clock), to the
log (``O_APPEND``: each line one ``write``, whole, from every process). A
worker appends ``ready PID`` to the ready file once it takes jobs. The
producer prints one JSON line: ``{"enqueue_started": T0, "enqueued": T1}``.
The workers run until peers_bench ends them (SIGTERM, then their group is
killed). Only the standard library is imported at the top, as only one
system is installed where this runs.

How each system is told the limits (each its own documented way):

* ``forum-tasks``: ``@app.task(limit_key=lambda key, i: key,
  max_running=M)`` and ``@app.task(rate_limit="R/s")``: cluster-wide, held
  by the Lens; each worker is ``app.worker(...)`` with ``S`` slots;
* ``celery``: ``@app.task(rate_limit="R/s")``, which Celery documents as a
  limit per worker instance, not global: with two workers the cluster may
  run at twice R, and the figure says how near it comes. Celery has no
  per-key concurrency limit (nor a cluster-wide one): the keys scenario runs
  unlimited, and the figure says what a user gets. Each worker is
  ``celery worker --concurrency S`` (prefork, its default pool), with the
  Redis broker, every other setting Celery's default.

:func:`held` turns the log into the figures (the same for every system).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

PRODUCERS = 8  # concurrent enqueue calls, where the system's call is async
STEADY_TRIM = 0.1  # the share of jobs left out at each end of the steady part
WINDOW = 1.0  # s: the sliding window of the burst figure
POOL = "prefork"  # Celery's worker pool (its default)


@dataclass(frozen=True)
class Scenario:
    """The limited task: K keys, at most M running per key (0: no limit), R
    starts per second for the task (0: no limit), each job sleeping S s."""

    keys: int
    max_running: int
    rate: float
    sleep: float

    def argv(self) -> list[str]:
        return ["--keys", str(self.keys), "--max-running", str(self.max_running),
                "--rate", f"{self.rate:g}", "--sleep", f"{self.sleep:g}"]  # fmt: skip

    def key(self, i: int) -> str:
        return f"k{i % self.keys}"


def scenario_of(args: argparse.Namespace) -> Scenario:
    return Scenario(args.keys, args.max_running, args.rate, args.sleep)


class Log:
    """The run's log, appended to by every job of every process."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(self, text: str) -> None:
        os.write(self.fd, f"{text}\n".encode())


# -- forum-tasks ------------------------------------------------------------------------


def forum_app(args: argparse.Namespace, log: Log | None) -> Any:
    """The app, its one task ``limited`` given the scenario's limits."""
    from forum.tasks import App, Context  # noqa: PLC0415 (each system: its own venv)

    scenario = scenario_of(args)
    options: dict[str, Any] = {}
    if scenario.max_running:
        options |= {"limit_key": lambda key, i: key, "max_running": scenario.max_running}
    if scenario.rate:
        options["rate_limit"] = f"{scenario.rate:g}/s"
    app = App(args.forum_url, args.redis_url)

    @app.task("limited", **options)
    async def limited(ctx: Context, key: str, i: int) -> None:
        started = time.time()
        await asyncio.sleep(scenario.sleep)
        if log is not None:
            log.line(f"{key} {started:.6f} {time.time():.6f}")

    return app


async def forum_worker(args: argparse.Namespace, log: Log, ready: Log) -> None:
    app = forum_app(args, log)
    async with app:
        worker = app.worker(app.space, app.lens, concurrency=args.slots)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(worker.run())
            ready.line(f"ready {os.getpid()}")


async def forum_produce(args: argparse.Namespace) -> dict[str, float]:
    app = forum_app(args, None)
    scenario = scenario_of(args)
    async with app:
        return await timed(args.jobs, PRODUCERS, lambda i: app.enqueue(
            "limited", scenario.key(i), i, _key=f"limited-{i}"))  # fmt: skip


async def timed(
    jobs: int, callers: int, op: Callable[[int], Awaitable[object]]
) -> dict[str, float]:
    """``op(0) .. op(jobs - 1)`` from ``callers`` tasks; when it began and ended."""
    counter = iter(range(jobs))

    async def caller() -> None:
        for i in counter:
            await op(i)

    started = time.time()
    async with asyncio.TaskGroup() as tasks:
        for _ in range(callers):
            tasks.create_task(caller())
    return {"enqueue_started": started, "enqueued": time.time()}


# -- celery -----------------------------------------------------------------------------


def celery_app(args: argparse.Namespace, log: Log | None) -> Any:
    from celery import Celery  # noqa: PLC0415

    scenario = scenario_of(args)
    app = Celery("limited", broker=args.redis_url)
    app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False)

    @app.task(name="limited", rate_limit=f"{scenario.rate:g}/s" if scenario.rate else None)
    def limited(key: str, i: int) -> None:
        started = time.time()
        time.sleep(scenario.sleep)
        if log is not None:
            log.line(f"{key} {started:.6f} {time.time():.6f}")

    return app


def celery_worker(args: argparse.Namespace, log: Log, ready: Log) -> None:
    from celery.signals import worker_ready  # noqa: PLC0415

    # Celery warns, at length, of a worker run as root (as everything is here).
    warnings.filterwarnings("ignore", message="You're running the worker with superuser")
    app = celery_app(args, log)
    worker_ready.connect(lambda **_: ready.line(f"ready {os.getpid()}"), weak=False)
    app.worker_main(["worker", "--pool", POOL, "--concurrency", str(args.slots),
                     "--loglevel", "WARNING", "--hostname", f"bench{os.getpid()}@%h"])  # fmt: skip


def celery_produce(args: argparse.Namespace) -> dict[str, float]:
    app = celery_app(args, None)
    scenario = scenario_of(args)
    started = time.time()
    for i in range(args.jobs):
        app.send_task("limited", (scenario.key(i), i))
    return {"enqueue_started": started, "enqueued": time.time()}


# -- what held --------------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    """One job as the log has it."""

    key: str
    start: float
    end: float


def read_log(lines: Iterable[str]) -> list[Ran]:
    ran = []
    for line in lines:
        key, start, end = line.split()
        ran.append(Ran(key, float(start), float(end)))
    return ran


def most_running(jobs: Sequence[Ran]) -> int:
    """The most of ``jobs`` running at any one instant (a job ending at the
    instant another starts is not counted with it)."""
    events = sorted([(job.start, 1) for job in jobs] + [(job.end, -1) for job in jobs])
    running = most = 0
    for _, step in events:  # at a tie, -1 sorts first: the end before the start
        running += step
        most = max(most, running)
    return most


def steady_rate(starts: Sequence[float]) -> float | None:
    """Starts per second between the first and last :data:`STEADY_TRIM` of
    the jobs (sorted starts): the rate once the first burst and before the
    tail; None for too few jobs."""
    lo = int(len(starts) * STEADY_TRIM)
    hi = len(starts) - 1 - lo
    if hi - lo < 2 or starts[hi] <= starts[lo]:
        return None
    return (hi - lo) / (starts[hi] - starts[lo])


def most_in_window(starts: Sequence[float], window: float = WINDOW) -> int:
    """The most starts in any ``window`` s (sorted starts): the burst."""
    most, lo = 0, 0
    for hi, start in enumerate(starts):
        while start - starts[lo] >= window:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


def held(
    ran: Sequence[Ran], scenario: Scenario, enqueue_started: float, enqueued: int
) -> dict[str, Any]:
    """What a run's log says: throughput (jobs / first enqueue .. last end);
    per key the most running at once (and overall); the steady rate of
    starts and the busiest :data:`WINDOW` s, each as a ratio to its limit;
    whether all ``enqueued`` jobs ran (else the figures are of those that did)."""
    by_key: dict[str, list[Ran]] = {}
    for job in ran:
        by_key.setdefault(job.key, []).append(job)
    starts = sorted(job.start for job in ran)
    seconds = max(job.end for job in ran) - enqueue_started
    per_key = {key: most_running(jobs) for key, jobs in sorted(by_key.items())}
    rate = steady_rate(starts)
    burst = most_in_window(starts)
    return {
        "jobs": len(ran),
        "complete": len(ran) == enqueued,
        "seconds": seconds,
        "jobs_per_s": len(ran) / seconds,
        "max_running_per_key": max(per_key.values()),
        "max_running_by_key": per_key,
        "max_running": most_running(ran),
        "max_running_per_key_vs_limit": (
            max(per_key.values()) / scenario.max_running if scenario.max_running else None
        ),
        "steady_rate_per_s": rate,
        "steady_rate_vs_limit": rate / scenario.rate if scenario.rate and rate else None,
        "most_starts_in_1s": burst,
        "most_starts_in_1s_vs_limit": burst / scenario.rate if scenario.rate else None,
    }


# -- the command ------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=("worker", "produce"))
    parser.add_argument("system", choices=("forum-tasks", "celery"))
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--forum-url")
    parser.add_argument("--log", help="worker: the jobs' log")
    parser.add_argument("--ready", help="worker: its readiness, a line")
    parser.add_argument("--slots", type=int, default=16, help="worker: its slots")
    parser.add_argument("--jobs", type=int, default=0, help="produce: how many")
    parser.add_argument("--keys", type=int, required=True)
    parser.add_argument("--max-running", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--sleep", type=float, required=True)
    args = parser.parse_args()
    # Celery logs each worker's start at WARNING; the Lens notes the fresh Redis.
    logging.basicConfig(level=logging.ERROR)
    if args.role == "produce":
        if args.system == "celery":
            print(json.dumps(celery_produce(args)))
        else:
            print(json.dumps(asyncio.run(forum_produce(args))))
        return
    if args.log is None or args.ready is None:
        parser.error("a worker needs --log and --ready")
    log, ready = Log(args.log), Log(args.ready)
    if args.system == "celery":
        celery_worker(args, log, ready)
    else:
        asyncio.run(forum_worker(args, log, ready))


if __name__ == "__main__":
    sys.exit(main())
