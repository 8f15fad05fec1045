"""Prometheus metrics of a worker process, served on its own port.

A worker process has no node app to hang ``/metrics`` on, so ``forum worker
--metrics-port P`` serves ``http://host:P/metrics`` itself. The figures are
read from ``worker.stats()`` at scrape time, so they cost nothing between
scrapes; so are a task worker's per-task run and wait histograms
(``forum_task_run_seconds{task}``, ``forum_task_wait_seconds{task}``), which
its task history keeps (forum.coordinator.taskhistory: the same buckets).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from forum.coordinator.errors import UNAVAILABLE
from forum.coordinator.stats import WorkerStats
from forum.coordinator.taskhistory import BUCKETS, Histogram

#: A task worker's per-task (run, wait) histograms (TaskWorker.task_times).
TaskTimes = Callable[[], Mapping[str, tuple[Histogram, Histogram]]]

#: WorkerStats counters, and what each one counts.
_OUTCOMES = {
    "done": "completed",
    "retried": "failed and handed back for another attempt",
    "dead": "parked as dead letters after their last attempt",
    "double_takes": "taken but already claimed, done or buried elsewhere: a double take caught",
    "claims_lost": "whose claim was lost (expired or taken over) before completion",
    "lens_unavailable": "put back because the Lens was unavailable at the claim",
    "handed_back": "handed back unfinished by a drain",
    "reoffered": "written back by this worker's reaper (abandoned or delayed jobs)",
    "rescued": "written back by this worker because Redis forgot their claims while they ran",
    "deferred": "retries reserved before they were due, put off on the node until then",
    "over_limit": "over a task's or a key's limit, put off on the node unclaimed (no attempt)",
}
#: Every reason label of forum_lens_unavailable, always all of them (a
#: series per reason, 1 for the one that holds): the Lens's own, and the pause.
_REASONS = (*UNAVAILABLE, "paused")
_JOBS_HELP = "Jobs by outcome: " + "; ".join(f"{k}: {v}" for k, v in _OUTCOMES.items()) + "."


class WorkerCollector(Collector):
    """One worker's counters, read when Prometheus scrapes."""

    def __init__(self, stats: Callable[[], WorkerStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        stats = self._stats()
        taken = CounterMetricFamily("forum_worker_taken", "Tuples taken from the space.")
        taken.add_metric([], stats.taken)
        yield taken
        jobs = CounterMetricFamily("forum_worker_jobs", _JOBS_HELP, labels=["outcome"])
        for outcome in _OUTCOMES:
            jobs.add_metric([outcome], getattr(stats, outcome))
        yield jobs
        losses = CounterMetricFamily(
            "forum_worker_lens_state_losses",
            "Times Redis was found to have lost the Lens's state (flushed, or restarted "
            "without persistence); each loss once. Any increase is an incident: see "
            "docs/coordination.md, 'A Redis that forgets'.",
        )
        losses.add_metric([], stats.lens_state_losses)
        yield losses
        yield GaugeMetricFamily(
            "forum_worker_running", "Handlers running now.", value=stats.running
        )
        yield GaugeMetricFamily(
            "forum_worker_lens_reachable",
            "1 while Redis answers, 0 while the worker fails closed "
            "(Redis unreachable, or the pause after a state loss).",
            value=int(stats.lens_reachable),
        )
        reason = stats.lens_unavailable_reason
        yield GaugeMetricFamily(
            "forum_lens_available",
            "1 while the Lens takes this worker's claims; 0 while the worker fails "
            "closed and backs off (forum_lens_unavailable says why).",
            value=int(reason is None),
        )
        why = GaugeMetricFamily(
            "forum_lens_unavailable",
            "1 for the reason the Lens is unavailable now, 0 for the others: "
            + ", ".join(_REASONS)
            + " (paused: the pause after a state loss).",
            labels=["reason"],
        )
        for each in _REASONS:
            why.add_metric([each], int(reason == each))
        yield why


class TaskTimesCollector(Collector):
    """A task worker's per-task run and wait histograms, read when Prometheus scrapes."""

    def __init__(self, times: TaskTimes) -> None:
        self._times = times

    def collect(self) -> Iterator[HistogramMetricFamily]:
        times = self._times()
        run = HistogramMetricFamily(
            "forum_task_run_seconds",
            "How long each attempt of a task ran, done or failed (seconds).",
            labels=["task"],
        )
        wait = HistogramMetricFamily(
            "forum_task_wait_seconds",
            "How long each attempt of a task waited: its start less max(enqueued, due) "
            "(seconds); attempts whose record was not read have no sample.",
            labels=["task"],
        )
        for task, (ran, waited) in sorted(times.items()):
            run.add_metric([task], _buckets(ran), ran.total)
            wait.add_metric([task], _buckets(waited), waited.total)
        yield run
        yield wait


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    """Prometheus's cumulative ``(le, count)`` pairs of ``histogram``."""
    out: list[tuple[str, float]] = []
    seen = 0
    for bound, n in zip(BUCKETS, histogram.counts, strict=True):
        seen += n
        out.append(("+Inf" if bound == float("inf") else repr(bound), seen))
    return out


def worker_registry(
    stats: Callable[[], WorkerStats], task_times: TaskTimes | None = None
) -> CollectorRegistry:
    """A registry of its own (not the process-global one) holding a worker's
    metrics, and a task worker's histograms (``task_times``; a raw worker's
    are described, with no series)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(WorkerCollector(stats))
    registry.register(TaskTimesCollector(task_times or dict))
    return registry


@asynccontextmanager
async def serve_metrics(
    registry: CollectorRegistry, host: str, port: int
) -> AsyncIterator[web.AppRunner]:
    """Serve ``/metrics`` for the body of the ``async with``."""

    async def metrics(request: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        yield runner
    finally:
        await asyncio.shield(runner.cleanup())
