"""Prometheus metrics of a worker process, served on its own port.

A worker process has no node app to hang ``/metrics`` on, so ``forum worker
--metrics-port P`` serves ``http://host:P/metrics`` itself. The figures are
read from ``worker.stats()`` at scrape time, so they cost nothing between
scrapes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from coordinator.worker import WorkerStats

#: WorkerStats counters, and what each one counts.
_OUTCOMES = {
    "done": "completed",
    "retried": "failed and handed back for another attempt",
    "dead": "parked as dead letters after their last attempt",
    "double_takes": "taken but already claimed or done elsewhere: a double take caught",
    "claims_lost": "whose claim was lost (expired or taken over) before completion",
    "lens_unavailable": "put back because Redis was unreachable at the claim",
    "handed_back": "handed back unfinished by a drain",
    "reoffered": "written back by this worker's reaper (abandoned or delayed jobs)",
    "rescued": "written back by this worker because Redis forgot their claims while they ran",
}
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


def worker_registry(stats: Callable[[], WorkerStats]) -> CollectorRegistry:
    """A registry of its own (not the process-global one) holding a worker's metrics."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(WorkerCollector(stats))
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
