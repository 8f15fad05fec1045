"""Looking after an app's jobs (what ``forum jobs`` does): listing them in
every state (newest first, with how many there are), cancelling, retrying a
dead one, purging the dead or the done ones' results, a key's claim history.

A listing reads the Lens's job index (:mod:`forum.tasks.search`,
forum.coordinator.jobindex): sorted sets per state and task, kept as jobs
change state, so a page costs the same at a thousand jobs and at a
million, and nothing walks the keyspace or the space. Each job's status is
worked out from what the Lens holds of it (``inspect_many``: one round
trip per page). A job whose producer's record has not reached Redis yet
(written just after its enqueue returns) is not listed until it has; nor
is a raw Worker's job, which has no record naming a task. A listing is not
a snapshot: jobs that move while it pages may be missed or shown twice.

Every call here reads and writes the space through the app's cluster
(:mod:`forum.tasks.cluster`), failing over inside a group as enqueue does,
and gathering over its groups: a job's dead letter is looked for, and
taken, in every group.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from forum.coordinator.deadletter import DeadLetter, requeue
from forum.coordinator.errors import AlreadyClaimed
from forum.coordinator.jobindex import MAX_LIMIT
from forum.coordinator.records import CancelOutcome, HistoryEvent
from forum.node.client.cluster import ClusterClient
from forum.node.core.entries import Tuple
from forum.node.core.errors import ForumError
from forum.node.core.space import ListPage, Pattern
from forum.tasks import search
from forum.tasks.errors import InvalidJob
from forum.tasks.handle import JobHandle, JobState, JobStatus
from forum.tasks.message import check_key, job_heads, peek_key
from forum.tasks.queues import queues_of

if TYPE_CHECKING:
    from forum.tasks.app import App

log = logging.getLogger(__name__)

#: How many tuples one page of a listing asks a node for.
_PAGE = 100


@dataclass(frozen=True, slots=True)
class Listing:
    """A page of a listing: ``jobs``, newest first (by when each last
    changed state; a delayed or retrying job by when it is due), ``total``,
    how many jobs matched (``None`` when a key or text filter was given:
    the search does not count), and ``complete``, ``False`` when such a
    search stopped at its budget before the end."""

    jobs: list[JobStatus]
    total: int | None
    complete: bool = True


async def listing(
    app: App,
    state: JobState | None = None,
    limit: int = 100,
    task: str | None = None,
    *,
    key: str | None = None,
    text: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> Listing:
    """The newest ``limit`` jobs of ``app`` (in ``state``, of ``task``, whose
    key starts with ``key``, whose arguments hold ``text``, that changed
    state from ``since`` to ``until``, when given) and how many there are,
    from the Lens's job index (:mod:`forum.tasks.search`): pages of at most
    :data:`forum.coordinator.jobindex.MAX_LIMIT`, never every job. An
    ``expired`` job is indexed as queued (its expiry is worked out): those
    are listed from the queued ones."""
    if limit < 1:
        raise InvalidJob(f"limit must be at least 1, not {limit}")
    expired = state is JobState.EXPIRED
    jobs: list[JobStatus] = []
    total: int | None = None
    cursor: str | None = None
    while True:
        page = await search.search(
            app, state=JobState.QUEUED if expired else state, task=task, key=key, text=text,
            since=since, until=until, limit=min(MAX_LIMIT, limit - len(jobs)), cursor=cursor,
        )  # fmt: skip
        if total is None:
            total = None if expired else page.total
        jobs += [s for s in page.jobs if s.state is JobState.EXPIRED] if expired else page.jobs
        cursor = page.next_cursor
        if cursor is None or len(jobs) >= limit or not page.complete:
            complete = page.complete
            break
    return Listing(jobs[:limit], len(jobs) if expired and cursor is None else total, complete)


async def jobs(
    app: App, state: JobState | None, limit: int, task: str | None = None
) -> AsyncIterator[JobStatus]:
    """The jobs of :func:`listing`, newest first."""
    for status in (await listing(app, state, limit, task)).jobs:
        yield status


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
    await app.lens.requeued(key)  # the job index: queued again
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
    """Drop the records of ``app``'s done jobs, found a page at a time in the
    job index (no scan); how many were dropped."""
    dropped = 0
    cursor: str | None = None
    while True:
        page = await search.search(app, state=JobState.DONE, limit=MAX_LIMIT, cursor=cursor)
        for status in page.jobs:
            with contextlib.suppress(AlreadyClaimed):  # run again meanwhile: the worker's now
                dropped += await app.lens.forget_record(status.key)
        cursor = page.next_cursor
        if cursor is None:
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


async def purge_job(app: App, key: str) -> bool:
    """Drop job ``key`` as :func:`purge` drops its kind: a dead job's record
    then its letter, a done job's record (its result). ``False``, and
    nothing done, for a job in another state (or one whose record a live
    claim holds: run again meanwhile); ``JobNotFound`` if nothing knows it."""
    status = await app.status(check_key(key))
    if status.state not in (JobState.DEAD, JobState.DONE):
        return False
    try:
        forgotten = await app.lens.forget_record(key)
    except AlreadyClaimed:
        return False
    if status.state is JobState.DONE:
        return forgotten
    letter = await _dead_letter(app, key)
    if letter is None:  # taken meanwhile (a retry): its record is gone all the same
        return forgotten
    # By its exact bytes, as purge takes each.
    return await app.on_node(functools.partial(_take, letter=Pattern(letter.raw))) is not None
