"""The Lens's cluster-wide counts in the node's ``/metrics``, read at scrape.

With ``forum serve --lens-url`` the node's ``/metrics`` adds what the
Lens's scripts counted (forum.coordinator.tallies), the same figures as
the Guarantees page: double takes caught, stale completions refused and
re-offers after lost workers, over every worker that ever ran, dead or
alive. They are read when Prometheus scrapes (one ``HMGET`` per shard,
pipelined, before the node renders the page: ``SCRAPE_REFRESH``), so they
cost nothing between scrapes; a scrape while Redis does not answer within
:data:`WITHIN` seconds shows none of them rather than stale ones (a
counter that vanishes is a gap in Prometheus, one that stands still would
read as "nothing happened").

====================================  =========================================
series                                what
====================================  =========================================
``forum_lens_double_takes_total``     copies of jobs turned away by the Lens
``forum_lens_claims_lost_total``      completions refused: their claim was lost
``forum_lens_reoffers_total``         jobs of lost workers offered again
====================================  =========================================

Only with ``--lens-url``: loaded then, as the Lens pages are (a node-only
install has no Redis client).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from forum.coordinator.tallies import Tallies, read_tallies
from forum.dashboard.lensview import FAILURES, LensView
from forum.node.http.keys import METRICS_REGISTRY, SCRAPE_REFRESH

#: The longest a scrape waits for the Lens's counts before it goes without them.
WITHIN = 1.0
#: Each series: (name without ``_total``, help, the :class:`Tallies` field).
SERIES = (
    ("forum_lens_double_takes", "Copies of jobs the Lens turned away (cluster-wide).",
     "double_takes"),
    ("forum_lens_claims_lost", "Completions the Lens refused: their claim was lost.",
     "claims_lost"),
    ("forum_lens_reoffers", "Jobs of lost workers offered again (cluster-wide).", "reoffered"),
)  # fmt: skip


class LensCounts(Collector):
    """The counts ``read`` at the last scrape (``None``: not read, shown as none)."""

    def __init__(self, read: Callable[[], Awaitable[Tallies]]) -> None:
        self._read = read
        self.tallies: Tallies | None = None

    async def refresh(self) -> None:
        """Read the counts now, or forget them when the Lens does not answer."""
        try:
            async with asyncio.timeout(WITHIN):
                self.tallies = await self._read()
        except (*FAILURES, TimeoutError):
            self.tallies = None

    def collect(self) -> Iterator[CounterMetricFamily]:
        tallies = self.tallies
        if tallies is None:
            return
        for name, text, field in SERIES:
            yield CounterMetricFamily(name, text, value=getattr(tallies, field))


def install(app: web.Application, view: LensView) -> None:
    """Register the counts in the node's registry, read before each scrape."""
    counts = LensCounts(lambda: read_tallies(view.lens))
    app[METRICS_REGISTRY].register(counts)
    app[SCRAPE_REFRESH] = counts.refresh
