"""What the dashboard remembers: a small ring of status samples per node.

Every ``interval`` seconds the sampler takes this node's status (in process,
as ``GET /v1/status`` builds it) and each peer's (over HTTP, ``GET
/v1/status`` with this node's token: the nodes of a cluster share one), and
keeps the last ``keep`` of each node's samples in memory: enough for the
sparklines of the last minutes, nothing on disk. Peers are asked only while
someone looks (a page served in the last ``keep`` intervals): a node nobody
watches makes no calls for its dashboard, and takes its own samples alone
(an in-process copy of its figures). A peer that does not answer
keeps its older samples and its last error; the Peers panel says what this
node's replication knows of it anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

import aiohttp

from forum.node.api.status import NodeStatus
from forum.node.core.resource import in_background

#: Seconds between two samples, and how many are kept (five minutes' worth).
INTERVAL = 2.0
KEEP = 150


@dataclass(frozen=True, slots=True)
class Sample:
    """One node's status at one moment (``at``: monotonic seconds, so a step
    of the wall clock makes no rate up)."""

    at: float
    status: NodeStatus


@dataclass(slots=True)
class NodeHistory:
    """The samples of one node, oldest first, and why the last look failed."""

    url: str
    samples: deque[Sample]
    error: str | None = None

    @property
    def latest(self) -> NodeStatus | None:
        return self.samples[-1].status if self.samples else None

    def rates(self, figure: Callable[[NodeStatus], int]) -> list[float]:
        """Per second between consecutive samples, of a counter such as writes
        (a restart, whose counter starts again, counts as 0)."""
        pairs = zip(self.samples, list(self.samples)[1:], strict=False)
        return [
            max(0.0, (figure(b.status) - figure(a.status)) / (b.at - a.at))
            for a, b in pairs
            if b.at > a.at
        ]

    def per_minute(self, figure: Callable[[NodeStatus], int]) -> int:
        """How much a counter grew over the last minute of samples."""
        if not self.samples:
            return 0
        latest = self.samples[-1]
        first = next(s for s in self.samples if s.at >= latest.at - 60)
        return max(0, figure(latest.status) - figure(first.status))


@dataclass(slots=True)
class Sampler:
    """The rings of samples of this node and its peers (see the module docstring)."""

    #: This node's status, taken in process.
    local: Callable[[], NodeStatus]
    #: The URLs of the peers to ask, as this node's replication knows them now
    #: (and, with a cluster map, the other groups' members: forum.dashboard.groups).
    peers: Callable[[], Iterable[str]]
    token: str | None
    interval: float = INTERVAL
    keep: int = KEEP
    histories: dict[str, NodeHistory] = field(default_factory=dict)
    #: Monotonic time until which the peers are sampled (see :meth:`viewed`).
    watched_until: float = 0.0

    def viewed(self) -> None:
        """A page was served: sample the peers for the next ``keep`` intervals."""
        self.watched_until = time.monotonic() + self.keep * self.interval

    def history(self, url: str) -> NodeHistory:
        found = self.histories.get(url)
        if found is None:
            found = self.histories[url] = NodeHistory(url, deque(maxlen=self.keep))
        return found

    async def sample_once(self, session: aiohttp.ClientSession) -> None:
        """One round: this node now, and every peer within one interval."""
        status = self.local()
        self.history(status.advertise).samples.append(Sample(time.monotonic(), status))
        watched = time.monotonic() < self.watched_until
        urls = [url for url in self.peers() if url != status.advertise] if watched else []
        await asyncio.gather(*(self._ask(session, url) for url in urls))

    async def _ask(self, session: aiohttp.ClientSession, url: str) -> None:
        history = self.history(url)
        headers = {} if self.token is None else {"Authorization": f"Bearer {self.token}"}
        try:
            async with asyncio.timeout(self.interval):
                async with session.get(f"{url}/v1/status", headers=headers) as answer:
                    if answer.status != 200:
                        history.error = f"status {answer.status}"
                        return
                    document = await answer.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            history.error = str(exc) or type(exc).__name__
            return
        history.samples.append(Sample(time.monotonic(), NodeStatus.from_document(document)))
        history.error = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Sample in the background while the block runs; the loop and its
        session end with it."""
        async with (
            aiohttp.ClientSession() as session,
            in_background(self._loop(session), "dashboard sampler"),
        ):
            yield

    async def _loop(self, session: aiohttp.ClientSession) -> None:
        while True:
            await self.sample_once(session)
            await asyncio.sleep(self.interval)
