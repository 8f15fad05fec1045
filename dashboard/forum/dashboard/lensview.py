"""How the dashboard reaches the Lens: the task layer's :class:`~forum.tasks.App`
(jobs, their status, retry, cancel, purge, history) and a
:class:`~forum.coordinator.Lens` (workers' presence, durability, the demo's last
check), opened on first use against ``forum serve --lens-url``.

The node itself never talks to Redis; only these pages do. The app's node
is this node (its advertised URL, with its token): a job's payload and dead
letter are read, and an action's writes made, through the same API and
checks as ``forum jobs`` makes them. Without ``--lens-url`` there is no
:class:`LensView`, and the panels that need one say so.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from forum.coordinator import HistoryEvent, Lens, LensError
from forum.coordinator.availability import reason_of
from forum.coordinator.checks import CheckVerdict, last_check
from forum.coordinator.envelope import Envelope
from forum.coordinator.presence import Abandoned, WorkerPresence, awaiting, list_workers
from forum.coordinator.records import Holder
from forum.coordinator.redis_url import RedisTarget, redacted
from forum.coordinator.tallies import Tallies, read_tallies
from forum.node.core.errors import ForumError
from forum.node.core.space import Pattern
from forum.tasks import App, JobNotFound, JobState, JobStatus, TaskError
from forum.tasks.message import job_heads
from forum.tasks.queues import queues_of

#: How many looks at the workers' totals are kept (a minute at the page's 2 s refresh).
KEEP = 60
#: The most jobs one listing shows.
LISTED = 200


@dataclass(frozen=True, slots=True)
class JobPage:
    """Everything a task job's page shows."""

    status: JobStatus
    #: The job tuple's bytes: queued in the space, else its dead letter's.
    payload: bytes | None
    history: list[HistoryEvent]
    raw = False

    @property
    def payload_text(self) -> str | None:
        """The payload as text, ``None`` when it is not UTF-8 (shown as hex)."""
        if self.payload is None:
            return None
        try:
            return self.payload.decode()
        except UnicodeDecodeError:
            return None


@dataclass(frozen=True, slots=True)
class RawJobPage:
    """A job with no task record: a raw :class:`forum.coordinator.Worker`'s, known
    by its claim key (the tuple's entry id, or the key it was written with).
    The Lens keeps the same of any claim key, whoever claims it: the live
    claim, the done marker and the history (forum.coordinator.records)."""

    key: str
    claim: Holder | None
    done_token: int | None
    history: list[HistoryEvent]
    raw = True

    @property
    def state(self) -> str:
        """What the Lens says: running (a live claim), done (a done marker:
        every other copy is turned away), or neither now."""
        if self.claim is not None:
            return "running"
        return "done" if self.done_token is not None else "not claimed"


@dataclass(frozen=True, slots=True)
class LensFigures:
    """The Guarantees page's Lens part: whether the Lens takes claims (and
    why not), Redis's durability shortfalls, the workers' counters, the
    Lens's own cluster-wide counts, the demo's last check."""

    #: Why the Lens is unavailable, in Redis's words; ``None`` while it
    #: takes writes in every shard (``Lens.ping``).
    error: str | None
    durability: list[str]
    workers: list[WorkerPresence]
    check: CheckVerdict | None
    #: What the Lens's scripts counted (forum.coordinator.tallies): the
    #: page's totals, kept across workers' deaths.
    tallies: Tallies = field(default_factory=Tallies)
    #: Double takes caught in the last minute (as far as this node's samples
    #: of :attr:`tallies` reach back).
    double_takes_last_minute: int = 0
    #: The reason in one word (forum.coordinator.errors.UNAVAILABLE: full,
    #: read-only, unreachable, ...); ``None`` while available.
    reason: str | None = None
    #: Whether the rest was read: a Redis that is full or read-only still
    #: answers reads; one unreachable or refusing does not.
    read: bool = True


class LensView:
    """The dashboard's connections to the Lens (closed with the node)."""

    def __init__(self, url: str, token: str | None, node_url: Callable[[], str]) -> None:
        self.check_url(url)
        self.url = url
        self.where = redacted(url)
        self._token = token
        self._node_url = node_url
        self._app: App | None = None
        self._lens: Lens | None = None
        self._opening = asyncio.Lock()
        #: (time.monotonic(), the Lens's double takes count) at each look,
        #: for a per-minute rate; the last :data:`KEEP` looks.
        self._double_takes: deque[tuple[float, int]] = deque(maxlen=KEEP)

    @staticmethod
    def check_url(url: str) -> None:
        """``ValueError``, one line, for a URL that is no Redis's (before serving)."""
        RedisTarget.from_url(url)

    async def app(self) -> App:
        """The open task app on this node (opened at first use: the node's
        URL is known once it listens)."""
        async with self._opening:
            if self._app is None:
                app = App(self._node_url(), self.url, token=self._token)
                await app.__aenter__()
                self._app = app
            return self._app

    @property
    def lens(self) -> Lens:
        if self._lens is None:
            self._lens = Lens.from_url(self.url)
        return self._lens

    async def aclose(self) -> None:
        app, self._app = self._app, None
        lens, self._lens = self._lens, None
        try:
            if app is not None:
                await app.aclose()
        finally:
            if lens is not None:
                await lens.aclose()

    async def jobs(self, state: JobState | None, prefix: str) -> list[JobStatus]:
        """Up to :data:`LISTED` jobs in ``state`` whose keys start with ``prefix``."""
        app = await self.app()
        found = []
        async for status in app.jobs(state, limit=LISTED if not prefix else 10 * LISTED):
            if status.key.startswith(prefix):
                found.append(status)
                if len(found) >= LISTED:
                    break
        return found

    async def job(self, key: str) -> JobPage | RawJobPage:
        """A job's page: a task job's, else a raw job's (no task record, but
        a claim, a done marker or a history in the Lens); ``JobNotFound``
        when nothing knows ``key``, ``InvalidJob`` for a key no job can have."""
        app = await self.app()
        status, history = await asyncio.gather(_status(app, key), app.history(key))
        if status is None or status.task is None:
            return await self._raw(app, key, history)
        heads = job_heads(app.prefix, key, queues_of(app))  # its queue is the tuple's to say
        found = await _read_first(app, heads)
        if found is None:  # not queued: its dead letter, which has the job inside
            found = await _read_first(app, [app.dead_prefix + head for head in heads])
            found = None if found is None else found[len(app.dead_prefix) :]
        # The job's own bytes, without the worker's trailer (forum.coordinator.envelope).
        payload = None if found is None else Envelope.open(found).payload
        return JobPage(status, payload, history)

    @staticmethod
    async def _raw(app: App, key: str, history: list[HistoryEvent]) -> RawJobPage:
        """What the Lens holds of claim key ``key``, which no task names."""
        state = await app.lens.inspect(key)
        if state.claim is None and state.done_token is None and not history:
            raise JobNotFound(key)
        return RawJobPage(key, state.claim, state.done_token, history)

    async def workers(self) -> list[WorkerPresence]:
        return await list_workers(self.lens)

    async def abandoned(self, workers: list[WorkerPresence], now: float) -> dict[str, Abandoned]:
        """What became of the claims of the workers dead at ``now``."""
        return await awaiting(self.lens, [k for w in workers if not w.alive(now) for k in w.keys])

    async def figures(self) -> LensFigures:
        """The Lens's figures. ``error`` and ``reason`` say why the Lens is
        unavailable (the check every worker makes before it claims again:
        every shard must take a write); a Redis that is full or read-only
        is still read for the rest."""
        unavailable: LensError | None = None
        try:
            await self.lens.ping()
        except LensError as exc:
            unavailable = exc
        try:
            durability, workers, check, tallies = await asyncio.gather(
                self.lens.durability(),
                self.workers(),
                last_check(self.lens.config),
                read_tallies(self.lens),
            )
        except LensError as exc:
            failed = unavailable or exc
            return LensFigures(str(failed), [], [], None, reason=reason_of(failed), read=False)
        minute = self._last_minute(tallies.double_takes)
        if unavailable is None:
            return LensFigures(None, durability, workers, check, tallies, minute)
        return LensFigures(
            str(unavailable), durability, workers, check, tallies, minute,
            reason=reason_of(unavailable),
        )  # fmt: skip

    def _last_minute(self, total: int) -> int:
        """How far ``total`` rose since the oldest look of the last minute
        (never below 0: a Redis that lost its state counts from 0 again)."""
        now = time.monotonic()
        self._double_takes.append((now, total))
        since = next(t for at, t in self._double_takes if now - at <= 60.0)
        return max(0, total - since)


async def _status(app: App, key: str) -> JobStatus | None:
    """The task layer's status of ``key``; ``None`` when it knows no such job."""
    try:
        return await app.status(key)
    except JobNotFound:
        return None


#: What a page shows when an action or a read of the Lens fails: the message,
#: never a traceback (a user's mistake, or Redis or the node not answering).
FAILURES = (TaskError, LensError, ForumError, OSError)

__all__ = [
    "FAILURES",
    "LISTED",
    "JobNotFound",
    "JobPage",
    "LensFigures",
    "LensView",
    "RawJobPage",
]


async def _read_first(app: App, heads: list[bytes]) -> bytes | None:
    """The first tuple found under one of ``heads``, read side by side."""
    found = await asyncio.gather(*(app.space.read(Pattern(head)) for head in heads))
    return next((payload for payload in found if payload is not None), None)
