"""What tracing costs a worker per job: ``Runner(job)`` on a no-op async task
returning ``None`` (no Lens call: a plain no-op job's handler), timed in
process, three ways:

* ``off``: no tracer provider set (opentelemetry installed or not, the
  path is the same ``tracer() is None`` check);
* ``on``: the SDK's ``TracerProvider`` with a batch processor whose
  exporter drops what it gets (the span's own cost, not the export's);
* ``before``: with ``--baseline FILE``, the Runner of another commit's
  tasks/forum/tasks/runner.py (``git show main:tasks/forum/tasks/runner.py
  > /tmp/runner.py``), on this checkout's other modules, alternated with
  ``off`` round by round: ``off - before`` is what tracing adds when off.

Usage: ``.venv/bin/python bench/otel_bench.py [--jobs N] [--rounds R]
[--baseline FILE]``; prints µs per job (the median of the rounds) as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from forum.coordinator import Job
from forum.node.core.entries import EntryId
from forum.tasks import App, Context
from forum.tasks.message import Message
from forum.tasks.runner import Runner


@dataclass(frozen=True)
class _Claim:
    """The claim a handler is given, without a Lens behind it (nothing is recorded)."""

    key: str
    attempt: int = 1
    lapsed: bool = False
    owner: str = "bench"
    token: int = 1
    lease: float = 30.0


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def _time(runner: Any, jobs: list[Job]) -> float:
    started = time.perf_counter()
    for job in jobs:
        await runner(job)
    return (time.perf_counter() - started) / len(jobs) * 1e6


def _baseline(path: str) -> Any:
    """The ``Runner`` class of the runner module at ``path``."""
    spec = importlib.util.spec_from_file_location("baseline_runner", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Runner


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", metavar="FILE", help="another commit's runner.py")
    args = parser.parse_args(argv)
    app = App(prefix=b"bench/")

    @app.task
    async def noop(ctx: Context) -> None:
        return None

    payload = Message("k", "noop").encode(app.prefix, app.serializer)
    lens: Any = None  # a None result and no progress: the runner calls no Lens
    runner = Runner(app, lens, ThreadPoolExecutor(1))
    jobs = [
        Job(payload, EntryId("b", i + 1), f"k{i}", 1, _Claim(f"k{i}"))  # type: ignore[arg-type]
        for i in range(args.jobs)
    ]
    runners = {"off": runner}
    if args.baseline:
        runners["before"] = _baseline(args.baseline)(app, lens, ThreadPoolExecutor(1))
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.rounds):  # alternated: a shared machine's load falls on both
        for name, samples in times.items():
            samples.append(await _time(runners[name], jobs))
    results = {name: statistics.median(samples) for name, samples in times.items()}
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop()))
    trace.set_tracer_provider(provider)
    results["on"] = statistics.median([await _time(runner, jobs) for _ in range(args.rounds)])
    provider.shutdown()
    print(json.dumps({k: round(v, 2) for k, v in results.items()} | {"unit": "us/job"}))


if __name__ == "__main__":
    asyncio.run(main())
