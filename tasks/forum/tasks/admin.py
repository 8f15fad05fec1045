"""Looking after an app's jobs (what ``forum jobs`` does): listing them in
every state (newest first, with how many there are), cancelling, retrying a
dead one, purging the dead or the done ones' results, a key's claim history.

Jobs live in two places, and a listing reads both, so a queue never looks
empty while work is in flight: the space (tuples under the app's prefix,
queued, in every queue; dead letters under ``dead/`` + the prefix) and the
Lens (live claims: running; job records: retrying, done, dead, cancelled, delayed). The space
is read first, a page of tuples at a time; then each key found is shown
once, its status worked out as :mod:`forum.tasks.status` does from what the
Lens holds of it, read a page of keys at a time (``inspect_many``: one
round trip per page, not per job). A running job whose record never reached
Redis is listed all the same (its task name from its tuples, else unknown:
``None``). A listing is not a snapshot: jobs that move while it runs may be
missed or shown twice in passing.

Every call here reads and writes the space through the app's cluster
(:mod:`forum.tasks.cluster`), failing over inside a group as enqueue does,
and gathering over its groups: a listing pages through the groups one after
another (the cursor names the group), and a job's dead letter is looked
for, and taken, in every group.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from forum.coordinator.deadletter import DeadLetter, requeue
from forum.coordinator.errors import AlreadyClaimed
from forum.coordinator.records import CancelOutcome, HistoryEvent
from forum.node.client.cluster import ClusterClient
from forum.node.core.entries import Tuple
from forum.node.core.errors import ForumError
from forum.node.core.space import ListPage, Pattern
from forum.tasks.errors import InvalidJob, JobNotFound
from forum.tasks.handle import JobHandle, JobState, JobStatus
from forum.tasks.message import check_key, job_heads, peek_key
from forum.tasks.queues import queues_of
from forum.tasks.status import status_of

if TYPE_CHECKING:
    from forum.tasks.app import App

log = logging.getLogger(__name__)

#: How many tuples one page of a listing asks a node for.
_PAGE = 100


@dataclass(frozen=True, slots=True)
class Listing:
    """A page of a listing: ``jobs``, newest first (by when each last
    changed: its ``updated``, else when it is due; those with neither last),
    and ``total``, how many jobs matched (``len(jobs)`` when all are shown)."""

    jobs: list[JobStatus]
    total: int


async def listing(
    app: App, state: JobState | None = None, limit: int = 100, task: str | None = None
) -> Listing:
    """The newest ``limit`` jobs of ``app`` (in ``state``, of ``task``, when
    given) and how many there are: every job is read to count and order them
    (a page of keys per round trip), only ``limit`` of them kept."""
    if limit < 1:
        raise InvalidJob(f"limit must be at least 1, not {limit}")
    newest: list[tuple[float, int, JobStatus]] = []  # a heap: the oldest kept on top
    total = 0
    async for status in _matching(app, state, task):
        total += 1
        item = (_changed(status), -total, status)
        if len(newest) < limit:
            heapq.heappush(newest, item)
        elif item[:2] > newest[0][:2]:
            heapq.heapreplace(newest, item)
    ordered = sorted(newest, key=lambda item: item[:2], reverse=True)
    return Listing([status for _, _, status in ordered], total)


async def jobs(
    app: App, state: JobState | None, limit: int, task: str | None = None
) -> AsyncIterator[JobStatus]:
    """The jobs of :func:`listing`, newest first."""
    for status in (await listing(app, state, limit, task)).jobs:
        yield status


def _changed(status: JobStatus) -> float:
    for when in (status.updated, status.due):
        if when is not None:
            return when
    return -math.inf


async def _matching(app: App, state: JobState | None, task: str | None) -> AsyncIterator[JobStatus]:
    """Every job of ``app`` (in ``state``, of ``task``, when given), in no
    order. The app's: under its prefix in the space, or, for an app with
    tasks, a record of one of its tasks (another app's jobs share the Lens's
    namespace); an app without tasks (``forum jobs`` without ``--app``)
    lists every task job the Lens knows. A running job whose record never
    reached Redis names no task: it is listed, whoever's it is."""
    live = {key: _head(payload, app.prefix) async for key, payload in _tuples(app, app.prefix)}
    dead = dict([item async for item in _tuples(app, app.dead_prefix + app.prefix)])
    async for page in _pages(_keys(app, [*live, *dead])):
        for found in await app.lens.inspect_many(page):
            try:
                status = status_of(found, live.get(found.key), dead.get(found.key),
                                   prefix=app.prefix, dead_prefix=app.dead_prefix,
                                   serializer=app.serializer)  # fmt: skip
            except JobNotFound:
                continue  # gone since it was listed
            if found.key not in live and found.key not in dead:
                if app.tasks and status.task is not None and status.task not in app.tasks:
                    continue  # another app's
                if status.task is None and status.state is not JobState.RUNNING:
                    continue  # a raw Worker's job sharing the namespace
            if state is not None and status.state is not state:
                continue
            if task is not None and status.task != task:
                continue
            yield status


async def _keys(app: App, in_space: list[str]) -> AsyncIterator[str]:
    """Every job key the Lens and the space know, each once: running claims
    first, then the space's tuples and dead letters, then the records."""
    seen: set[str] = set()
    for keys in (app.lens.scan("claim"), _listed(in_space), app.lens.scan("task")):
        async for key in keys:
            if key not in seen:
                seen.add(key)
                yield key


async def _listed(keys: list[str]) -> AsyncIterator[str]:
    for key in keys:
        yield key


async def _pages(keys: AsyncIterator[str]) -> AsyncIterator[list[str]]:
    """``keys`` in lists of up to :data:`_PAGE`."""
    page: list[str] = []
    async for key in keys:
        page.append(key)
        if len(page) == _PAGE:
            yield page
            page = []
    if page:
        yield page


async def _tuples(app: App, prefix: bytes) -> AsyncIterator[tuple[str, bytes]]:
    """(job key, payload) of each live job tuple under ``prefix``."""
    async for item in tuples(app, prefix):
        key = peek_key(item.payload, prefix)
        if key is not None:
            yield key, item.payload


async def tuples(app: App, prefix: bytes) -> AsyncIterator[Tuple]:
    """Each live tuple under ``prefix``, a page at a time from the app's
    cluster, group after group."""
    cursor: int | None = 0
    answered: ClusterClient | None = None
    while cursor is not None:
        read = functools.partial(_page, prefix=prefix, cursor=cursor, answered=answered)
        answered, listed = await app.on_node(read)
        for item in listed.tuples:
            yield item
        cursor = listed.next_cursor


async def _page(
    space: ClusterClient, *, prefix: bytes, cursor: int, answered: ClusterClient | None
) -> tuple[ClusterClient, ListPage]:
    """The page at ``cursor`` from the space that gave it, else the first."""
    start = cursor if space is answered else 0
    return space, await space.list(Pattern(prefix), start, _PAGE)


def _head(payload: bytes, prefix: bytes) -> bytes:
    """A job tuple's head, its key and task name: all a listing's status
    needs of a live tuple (the arguments are not kept for the whole listing)."""
    parts = payload[len(prefix) :].split(b"\n", 2)
    return payload if len(parts) < 3 else payload[: len(payload) - len(parts[2])]


async def cancel(app: App, key: str) -> CancelOutcome:
    """Cancel job ``key`` unless it is over (``"done"``): every copy of it,
    wherever it waits, is turned away as done, and a worker running it
    (``owner``) has its claim's fencing token retired, so it stops (within
    its watch, forum.coordinator.keeping) and its late effects are refused.
    ``JobNotFound`` if nothing knows the key.

    Then its tuple, queued or not due yet, is withdrawn from the space
    (``ClusterClient.withdraw``: every node's copy goes), so the counts stop
    showing it. The done marker comes first, so a worker that reserves the
    tuple meanwhile is turned away; the withdraw is best effort: a failure
    is logged, and the job is cancelled all the same (its tuple is turned
    away when a worker reserves it)."""
    await app.status(check_key(key))  # JobNotFound for a key no job has
    outcome = await app.lens.cancel(key)
    if outcome.state == "cancelled":
        try:
            for head in job_heads(app.prefix, key, queues_of(app)):
                await app.on_node(functools.partial(_withdraw, head=Pattern(head)))
        except ForumError as error:
            log.warning("job %r is cancelled; its tuple stays until a worker turns it away: %s",
                        key, error)  # fmt: skip
    return outcome


async def _withdraw(space: ClusterClient, *, head: Pattern) -> list[Tuple]:
    return await space.withdraw(head, _PAGE)


async def retry(app: App, key: str) -> JobHandle:
    """Put dead job ``key`` back to work (its dead letter requeued: attempt
    1 again, same key); ``InvalidJob`` if it has no dead letter."""
    letter = await _dead_letter(app, check_key(key))
    if letter is None:
        raise InvalidJob(f"job {key!r} has no dead letter to retry")
    await app.on_node(lambda space: requeue(space, letter))
    return JobHandle(app, key)


async def purge(app: App, state: JobState = JobState.DEAD) -> int:
    """Drop ``app``'s jobs in ``state``; how many. ``dead``: every dead
    letter of the app is taken out of the space, and each one's job record
    out of the Lens; a purged dead job is then not found, as if never
    enqueued. ``done``: the done jobs' records (their results) are dropped;
    the Lens's done marker stays (its own retention), so a copy of the job
    is still turned away and the job still says done, without its result.
    Others are refused: their records expire by themselves, and a queued or
    running job is not the operator's to drop here (``forum jobs cancel``).

    Each record goes first, its letter second: a purge cut short between the
    two leaves the letter, which still says dead (tasks/forum/tasks/status.py). A record
    is kept while a claim on the key is live (a retry put it back and a
    worker runs it: the record is the worker's); its letter still goes."""
    if state is JobState.DONE:
        return await _purge_done(app)
    if state is not JobState.DEAD:
        raise InvalidJob(f"only dead and done jobs can be purged, not {state.value}")
    lens = app.lens
    prefix = app.dead_prefix + app.prefix
    taken = 0
    while True:
        page = await app.on_node(lambda space: space.list(Pattern(prefix), 0, _PAGE))
        for item in page.tuples:
            key = peek_key(item.payload, prefix)
            if key is not None:
                with contextlib.suppress(AlreadyClaimed):
                    await lens.forget_record(key)
            # By its exact bytes: this letter only, whatever came in meanwhile.
            take = functools.partial(_take, letter=Pattern(item.payload))
            if await app.on_node(take) is not None:
                taken += 1
        if not page.tuples:
            return taken


async def _purge_done(app: App) -> int:
    """Drop the records of ``app``'s done jobs; how many were dropped."""
    done = [status.key async for status in _matching(app, JobState.DONE, None)]
    dropped = 0
    for key in done:
        with contextlib.suppress(AlreadyClaimed):  # run again meanwhile: the worker's now
            dropped += await app.lens.forget_record(key)
    return dropped


async def _take(space: ClusterClient, *, letter: Pattern) -> object:
    return await space.take(letter)


async def _first(space: ClusterClient, *, letter: Pattern) -> ListPage:
    return await space.list(letter, 0, 1)


async def history(app: App, key: str) -> list[HistoryEvent]:
    """Job ``key``'s claim history, oldest first (forum.coordinator.records)."""
    return await app.lens.history(check_key(key))


async def _dead_letter(app: App, key: str) -> DeadLetter | None:
    """Job ``key``'s dead letter, in whichever queue it was written."""
    for head in job_heads(app.prefix, key, queues_of(app)):
        first = functools.partial(_first, letter=Pattern(app.dead_prefix + head))
        page = await app.on_node(first)
        if page.tuples:
            return DeadLetter.parse(page.tuples[0], app.dead_prefix)
    return None
