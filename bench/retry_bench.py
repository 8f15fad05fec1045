"""A retry's delay two ways, in one run: parked by the worker, or kept by the node.

Every job's handler fails its first ``--failures`` attempts; the worker's
backoff (``--backoff`` s, less up to half of it at random) decides when the
next is due. What happens to the next attempt until then:

* **parked** (what ``Worker`` does): the next attempt is written into the
  space at once, live, with ``not_before`` in its envelope trailer
  (forum.coordinator.envelope); a worker that reserves it before it is due
  extends the reservation to last past that time, holds it
  (forum.coordinator.holding ``Parked``) and releases it once due, and it is
  reserved again and claimed.
* **delayed**: the next attempt is written with the node's own delay
  (``space.write(payload, not_before=...)``, its trailer without
  ``not_before``): the node keeps it out of reach until it is due, so no
  worker reserves, parks or releases it. Done here by a subclass of the
  worker that overrides its write back (the library is not changed).

Both run the same jobs on a fresh node with ``fsync=never`` (the node's disk
is not what is compared): an in-process ``Forum``, or with ``--serve`` a
``forum serve`` process and a ``ForumClient``; a ``Lens`` on a redis-server
started on a free port (``appendfsync always``, as the Lens needs); one
``Worker`` with ``--concurrency`` slots. The jobs are written first, then
the worker runs them all. The variants
alternate for ``--rounds`` rounds (their order swapped each round) and each
figure is the median over rounds. Per variant:

* the node calls the worker made, per job: ``reserve``, ``reserve_many``
  and ``ack_reserve`` calls, tuples reserved, ``release`` calls,
  ``extend_many`` calls, ``write`` calls (its write backs), and retries
  parked (``WorkerStats.deferred``);
* the wall time from the worker's start to the last job done;
* CPU per job over that span: this process's (the worker, and an
  in-process node), and with ``--serve`` the ``forum serve`` process's;
* the lateness of each retry: when its handler started, past the time it
  was due (``not_before``), p50 / p99 / max in ms. A retry that falls due
  while every slot is busy is late by the queue too.

Prints a table; writes bench/results/retry_bench.json. Needs only the test
environment (``.venv``)::

    .venv/bin/python bench/retry_bench.py [--jobs 500] [--failures 1] [--backoff 0.5]
        [--concurrency 8] [--rounds 5] [--serve] [--out FILE]
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
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from http_bench import free_port, process, redis_server, wait_until  # noqa: E402
from noop_jobs import concurrently  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from forum.coordinator import Job, Lens, Worker  # noqa: E402
from forum.coordinator.envelope import Envelope  # noqa: E402
from forum.node.client.remote import ForumClient  # noqa: E402
from forum.node.core.backoff import Backoff  # noqa: E402
from forum.node.core.space import Pattern  # noqa: E402
from forum.node.space.forum import Forum  # noqa: E402
from forum.node.storage.strand import Strand, StrandConfig  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "retry_bench.json"
VARIANTS = ("parked", "delayed")
PATTERN = Pattern(b"job/")
#: The node calls counted, by the name they are reported under.
COUNTED = ("reserve", "reserve_many", "ack_reserve", "release", "extend_many", "ack_many", "write")


class TimedWorker(Worker):
    """A worker that notes when each retry it writes is due (``dues``, by
    claim key), the time its handler is to be measured against."""

    def __init__(self, *args: Any, dues: dict[str, float], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dues = dues

    def _due(self, data: bytes) -> Envelope:
        envelope = Envelope.open(data)
        if envelope.not_before is not None and envelope.key is not None:
            self.dues[envelope.key] = envelope.not_before
        return envelope

    async def _write_back(self, data: bytes) -> bool:
        self._due(data)
        return await super()._write_back(data)


class DelayingWorker(TimedWorker):
    """The "delayed" variant: a retry is written with the node's own delay
    (``not_before`` on the write, none in the trailer), so the node keeps it
    out of reach until it is due. One write, no outage retries: the bench's
    node does not fail."""

    async def _write_back(self, data: bytes) -> bool:
        envelope = self._due(data)
        if envelope.not_before is None:
            await self._space.write(data)
        else:
            bare = replace(envelope, not_before=None).seal()
            await self._space.write(bare, not_before=envelope.not_before)  # type: ignore[call-arg]
        return True


class CountingSpace:
    """``forum`` as the worker sees it, counting the worker's calls by name
    (the node's calls among its own methods are not counted), and in
    ``calls["reserved"]`` the tuples its reserves handed out. Both variants
    pay for the same wrapper."""

    def __init__(self, forum: Forum | ForumClient, calls: dict[str, int]) -> None:
        self._forum = forum
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._forum, name)
        return counted(name, method, self._calls) if name in COUNTED else method


def counted(
    name: str, method: Callable[..., Awaitable[Any]], calls: dict[str, int]
) -> Callable[..., Awaitable[Any]]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        result = await method(*args, **kwargs)
        if name == "reserve_many":
            calls["reserved"] += len(result)
        elif name == "ack_reserve":
            calls["reserved"] += len(result[1])
        elif name == "reserve" and result is not None:
            calls["reserved"] += 1
        return result

    return call


@contextlib.asynccontextmanager
async def node(serve: bool) -> AsyncIterator[tuple[Forum | ForumClient, int | None]]:
    """A fresh node, with ``fsync=never``: in this process (pid ``None``), or
    with ``serve`` a ``forum serve`` process (its pid) and a ``ForumClient``."""
    with tempfile.TemporaryDirectory(prefix="retry-bench-") as directory:
        if not serve:
            config = StrandConfig().with_storage(directory).with_fsync("never")
            async with Forum(await Strand.open(config)) as forum:
                yield forum, None
            return
        port = free_port()
        command = [
            sys.executable, "-m", "forum", "serve", "--listen", f"127.0.0.1:{port}",
            "--data-dir", directory, "--fsync", "never", "--node-id", "bench",
            "--log-level", "WARNING",
        ]  # fmt: skip
        async with process(*command) as child, ForumClient(f"http://127.0.0.1:{port}") as client:
            await wait_until(client.ready, "forum serve")
            yield client, child.pid


def cpu_of(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used; 0 for ``None``."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_run(variant: str, url: str, args: argparse.Namespace) -> dict[str, float]:
    """``args.jobs`` jobs, each failing ``args.failures`` times, through one worker."""
    jobs, failures = args.jobs, args.failures
    async with Redis.from_url(url) as client:
        await client.flushdb()
    calls = dict.fromkeys((*COUNTED, "reserved"), 0)
    dues: dict[str, float] = {}
    lateness: list[float] = []

    async def handler(job: Job) -> None:
        if job.attempt > 1:
            lateness.append(time.time() - dues[job.key])
        if job.attempt <= failures:
            raise RuntimeError("fails on purpose")

    kind = DelayingWorker if variant == "delayed" else TimedWorker
    async with node(args.serve) as (space, pid), Lens.from_url(url) as lens:
        await concurrently(jobs, args.concurrency, lambda i: space.write(b"job/%d" % i))
        worker = kind(
            CountingSpace(space, calls), lens, PATTERN, handler, concurrency=args.concurrency,
            max_attempts=failures + 1, backoff=Backoff(args.backoff, args.backoff, 0.5),
            take_wait=args.take_wait, seed=len(variant), dues=dues,
        )  # fmt: skip
        cpu, node_cpu, started = time.process_time(), cpu_of(pid), time.perf_counter()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(worker.run())
            while worker.stats().done < jobs:
                await asyncio.sleep(0.002)
            seconds = time.perf_counter() - started
            cpu, node_cpu = time.process_time() - cpu, cpu_of(pid) - node_cpu
            worker.stop()
        stats = worker.stats()
        left = await space.count(PATTERN)
    if stats.done != jobs or stats.retried != jobs * failures or left or stats.dead:
        raise RuntimeError(f"{variant} run incomplete: {stats}, {left} left")
    lateness.sort()
    return {
        "seconds": seconds,
        "cpu_ms_per_job": 1000 * cpu / jobs,
        "node_cpu_ms_per_job": 1000 * node_cpu / jobs,
        **{f"{name}_per_job": calls[name] / jobs for name in (*COUNTED, "reserved")},
        "deferred_per_job": stats.deferred / jobs,
        "late_ms_p50": 1000 * statistics.median(lateness),
        "late_ms_p99": 1000 * lateness[min(len(lateness) - 1, int(0.99 * len(lateness)))],
        "late_ms_max": 1000 * lateness[-1],
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    samples: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="retry-bench-redis-") as directory:
        async with redis_server(Path(directory), "always") as (url, _):
            for number in range(args.rounds):
                for variant in VARIANTS if number % 2 == 0 else VARIANTS[::-1]:
                    samples[variant].append(await one_run(variant, url, args))
    return {
        "bench": "retry_bench",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "load_average_at_start": os.getloadavg()[0],
        "jobs": args.jobs,
        "failures": args.failures,
        "concurrency": args.concurrency,
        "backoff": [args.backoff / 2, args.backoff],
        "take_wait": args.take_wait,
        "node": "forum serve (fsync never) + ForumClient" if args.serve else "in-process Forum",
        "rounds": args.rounds,
        "medians": {variant: medians(runs) for variant, runs in samples.items()},
        "runs": samples,
    }


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


#: The table's columns: heading, key, format.
COLUMNS = (
    ("reserve", "reserve_per_job", ".2f"),
    ("res_many", "reserve_many_per_job", ".2f"),
    ("ack_res", "ack_reserve_per_job", ".2f"),
    ("reserved", "reserved_per_job", ".2f"),
    ("release", "release_per_job", ".2f"),
    ("extend", "extend_many_per_job", ".2f"),
    ("write", "write_per_job", ".2f"),
    ("parked", "deferred_per_job", ".2f"),
    ("wall s", "seconds", ".2f"),
    ("cpu ms", "cpu_ms_per_job", ".3f"),
    ("node ms", "node_cpu_ms_per_job", ".3f"),
    ("late p50", "late_ms_p50", ".1f"),
    ("late p99", "late_ms_p99", ".1f"),
    ("max", "late_ms_max", ".1f"),
)


def print_table(report: dict[str, Any]) -> None:
    low, high = report["backoff"]
    print(
        f"{report['jobs']} jobs, each failing {report['failures']}x, backoff {low:g}-{high:g} s, "
        f"{report['concurrency']} slots, {report['node']}; per job: the worker's calls on the "
        f"node, CPU ms of this process (worker, and an in-process node) and of a forum serve; "
        f"a retry's lateness past its due time, ms; median of {report['rounds']}"
    )
    print(f"{'':>8}" + "".join(f"  {head:>8}" for head, _, _ in COLUMNS))
    for variant, row in report["medians"].items():
        print(f"{variant:>8}" + "".join(f"  {row[key]:>8{form}}" for _, key, form in COLUMNS))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500, help="jobs per run (default 500)")
    parser.add_argument("--failures", type=int, default=1, help="failed attempts per job")
    parser.add_argument("--concurrency", type=int, default=8, help="the worker's slots")
    parser.add_argument("--backoff", type=float, default=0.5, help="the backoff's base, s")
    parser.add_argument(
        "--take-wait", type=float, default=2.0, help="the worker's blocking reserve, s"
    )
    parser.add_argument(
        "--serve", action="store_true", help="a forum serve process + ForumClient as the node"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds per figure (median)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    logging.basicConfig(level=logging.WARNING)
    # Each run starts on a flushed Redis, which the Lens reports as new.
    logging.getLogger("forum.coordinator.lens").setLevel(logging.ERROR)
    arguments = parser.parse_args()
    report = asyncio.run(main(arguments))
    print_table(report)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(report, indent=2) + "\n")
