"""Prometheus metrics of one node, in the app's own registry.

Request counts and latencies are recorded by a middleware, labelled by route
(the route's pattern, such as ``/v1/take``: never the raw path, whose
cardinality a client controls). The Forum's figures are read from
``forum.stats()`` at scrape time, so they cost nothing between scrapes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from forum.node.http.keys import SCRAPE_REFRESH
from forum.node.http.longpoll import LongPolls
from forum.node.space.applying import LONGEST_PREFIX, MOST_PREFIXES
from forum.node.space.compactor import Compactor
from forum.node.space.forum import Forum

_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
)
_FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1)


class ForumCollector(Collector):
    """The Forum's own figures, read when Prometheus scrapes."""

    def __init__(self, forum: Forum, long_polls: LongPolls, compactor: Compactor) -> None:
        self._forum = forum
        self._long_polls = long_polls
        self._compactor = compactor

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self._forum.stats()
        gauges = (
            ("forum_live_tuples", "Live tuples on this node.", stats.live),
            ("forum_strand_entries", "Entries (writes and takes) in the Strand.", stats.entries),
            ("forum_strand_bytes", "Bytes of the Strand on disk.", stats.strand_bytes),
            ("forum_strand_segments", "Segment files of the Strand.", stats.segments),
            (
                "forum_waiting_takers",
                "Takes waiting in the Forum for a match.",
                stats.waiting_takers,
            ),
            (
                "forum_reserved_tuples",
                "Tuples reserved (out of reach until acked, released or their lease ends).",
                stats.reserved,
            ),
            ("forum_http_long_polls", "Requests waiting in a long poll.", self._long_polls.waiting),
            ("forum_delayed_tuples", "Tuples written but not due yet.", stats.delayed),
            ("forum_paused_prefixes", "Prefixes whose takes are paused.", len(stats.paused)),
        )
        for name, documentation, value in gauges:
            yield GaugeMetricFamily(name, documentation, value=value)
        counters = (
            ("forum_writes", "Tuples written on this node.", stats.writes),
            ("forum_takes", "Tuples taken on this node.", stats.takes),
            ("forum_double_takes", "Tuples seen taken twice (by two nodes).", stats.double_takes),
            (
                "forum_strand_tails_cut",
                "Torn log tails cut off when the Strand opened.",
                stats.tails_cut,
            ),
            (
                "forum_expired",
                "Tuples that expired on this node (their ttl ran out).",
                stats.expired,
            ),
            ("forum_compactions", "Compaction passes run.", stats.compactions),
            (
                "forum_compaction_bytes_reclaimed",
                "Strand bytes compaction gave back.",
                stats.bytes_reclaimed,
            ),
            (
                "forum_compaction_entries_dropped",
                "Entries compaction dropped from the Strand (dead everywhere).",
                stats.entries_dropped,
            ),
        )
        for name, documentation, value in counters:
            yield CounterMetricFamily(name, documentation, value=value)
        horizon = GaugeMetricFamily(
            "forum_compaction_horizon",
            "Per origin, the seq up to which every member holds every entry.",
            labels=["origin"],
        )
        for origin, seq in sorted(self._compactor.horizon().items()):
            horizon.add_metric([origin], seq)
        yield horizon
        fill = GaugeMetricFamily(
            "forum_prefix_fill",
            "Per limited prefix, the tuples it holds here (what its limit counts).",
            labels=["prefix"],
        )
        limit = GaugeMetricFamily(
            "forum_prefix_limit", "Per limited prefix, its limit.", labels=["prefix"]
        )
        for prefix, (held, most) in sorted(stats.limits.items()):
            fill.add_metric([prefix], held)
            limit.add_metric([prefix], most)
        yield fill
        yield limit
        doubles = CounterMetricFamily(
            "forum_double_takes_by_prefix",
            "Per prefix (a payload up to its first /), tuples handed out here that a peer "
            f"took too (at most {MOST_PREFIXES} prefixes, the first met, of up to "
            f"{LONGEST_PREFIX} bytes).",
            labels=["prefix"],
        )
        for prefix, n in sorted(stats.double_takes_by_prefix.items()):
            doubles.add_metric([prefix], n)
        yield doubles
        yield from self._queues()

    def _queues(self) -> Iterator[GaugeMetricFamily]:
        """Per prefix (a payload up to and including its first ``/``, as
        ``GET /v1/prefixes?separator=/`` groups them; at most
        :data:`MOST_PREFIXES`, the first in byte order), what an autoscaler
        scales on: the live, delayed and reserved tuples here, and the age of
        the oldest live one. A bisection per prefix (LiveIndex.groups), not a
        look at every tuple. Payloads without a ``/`` are left out: each would
        be a series of its own."""
        groups = self._forum.groups(b"/", MOST_PREFIXES)
        queues = {prefix: counts for prefix, counts in groups.items() if prefix.endswith(b"/")}
        families = [GaugeMetricFamily(name, text, labels=["prefix"]) for name, text in _QUEUES]
        for prefix, counts in queues.items():
            for family, value in zip(families, counts, strict=True):
                family.add_metric([_label(prefix)], value)
        oldest = GaugeMetricFamily(
            "forum_prefix_oldest_age_seconds",
            "Per prefix, how long its oldest live tuple here has waited (from when this "
            "node came to hold it; none for a prefix with no live tuple).",
            labels=["prefix"],
        )
        for prefix, age in sorted(self._forum.oldest_ages(list(queues)).items()):
            oldest.add_metric([_label(prefix)], age)
        yield from families
        yield oldest


#: The per-prefix depth gauges, in the order ``Forum.groups`` counts them.
_QUEUES = (
    ("forum_prefix_live", "Per prefix, its live tuples here: the queue's depth."),
    ("forum_prefix_delayed", "Per prefix, its tuples here not due yet."),
    ("forum_prefix_reserved", "Per prefix, its tuples reserved here: in flight."),
)


def _label(prefix: bytes) -> str:
    return prefix.decode("utf-8", "backslashreplace")


class NodeMetrics:
    """The node's metrics: HTTP requests, fsync latency, and the Forum's figures."""

    def __init__(
        self,
        registry: CollectorRegistry,
        forum: Forum,
        long_polls: LongPolls,
        compactor: Compactor,
    ) -> None:
        self.registry = registry
        self.requests = Counter(
            "forum_http_requests",
            "HTTP requests answered, by route, method and status.",
            ["route", "method", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "forum_http_request_duration_seconds",
            "Time to answer an HTTP request, by route and method (long polls included).",
            ["route", "method"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.fsync = Histogram(
            "forum_strand_fsync_duration_seconds",
            "Time of one fsync of the Strand (one fsync may cover many appends).",
            buckets=_FSYNC_BUCKETS,
            registry=registry,
        )
        self._counts: dict[tuple[str, str, int], Any] = {}
        self._timers: dict[tuple[str, str], Any] = {}
        registry.register(ForumCollector(forum, long_polls, compactor))
        forum.strand.add_fsync_observer(self.fsync.observe)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = 499  # the client went away first (nginx's convention)
            raise
        finally:
            route = route_label(request)
            self._count(route, request.method, status).inc()
            self._timer(route, request.method).observe(time.perf_counter() - started)

    # labels() parses and hashes its arguments on every call; the children are
    # few (route x method x status), so keep them at hand.

    def _count(self, route: str, method: str, status: int) -> Any:
        key = (route, method, status)
        child = self._counts.get(key)
        if child is None:
            child = self._counts[key] = self.requests.labels(route, method, str(status))
        return child

    def _timer(self, route: str, method: str) -> Any:
        key = (route, method)
        child = self._timers.get(key)
        if child is None:
            child = self._timers[key] = self.latency.labels(route, method)
        return child

    async def handle(self, request: web.Request) -> web.Response:
        """``GET /metrics``: the Prometheus text format (an extension's
        figures read first: :data:`SCRAPE_REFRESH`)."""
        refresh = request.app.get(SCRAPE_REFRESH)
        if refresh is not None:
            await refresh()
        response = web.Response(body=generate_latest(self.registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response


def route_label(request: web.Request) -> str:
    """The request's route as its path template (``/v1/write``), else ``unmatched``."""
    info = request.match_info
    if info.http_exception is not None:
        return "unmatched"
    canonical = info.route.resource.canonical if info.route.resource else None
    return canonical or "unmatched"
