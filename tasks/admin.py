"""Looking after an app's jobs (what ``forum jobs`` does): listing them in
every state, cancelling, retrying a dead one, purging the dead, a key's
claim history.

Jobs live in two places, and a listing reads both, so a queue never looks
empty while work is in flight: the space (tuples under the app's prefix,
queued; dead letters under ``dead/`` + the prefix) and the Lens (live claims:
running; job records: retrying, done, dead, cancelled, delayed). Each key
found is shown once, with its status worked out as :mod:`tasks.status`
does. A listing is not a snapshot: jobs that move while it runs may be
missed or shown twice in passing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from coordinator.deadletter import DeadLetter, requeue
from coordinator.records import CancelOutcome, HistoryEvent
from node import Pattern
from tasks.errors import InvalidJob, JobNotFound
from tasks.handle import JobHandle, JobState, JobStatus
from tasks.message import check_key, key_prefix, peek_key

if TYPE_CHECKING:
    from tasks.app import App

#: How many tuples one page of a listing asks a node for.
_PAGE = 100


async def jobs(app: App, state: JobState | None, limit: int) -> AsyncIterator[JobStatus]:
    """Up to ``limit`` jobs of ``app`` (in ``state``, when given)."""
    if limit < 1:
        raise InvalidJob(f"limit must be at least 1, not {limit}")
    seen: set[str] = set()
    shown = 0
    async for key in _keys(app):
        if key in seen:
            continue
        seen.add(key)
        try:
            status = await app.status(key)
        except JobNotFound:
            continue  # gone since it was listed
        if status.task is None or (state is not None and status.state is not state):
            continue  # a raw Worker's job sharing the namespace, or another state
        yield status
        shown += 1
        if shown >= limit:
            return


async def _keys(app: App) -> AsyncIterator[str]:
    """Every job key the space and the Lens know, perhaps more than once:
    running claims first, then the space's queued tuples and dead letters,
    then the records."""
    lens = app.lens
    async for key in lens.scan("claim"):
        yield key
    for prefix in (app.prefix, app.dead_prefix + app.prefix):
        async for payload in _payloads(app, prefix):
            found = peek_key(payload, prefix)
            if found is not None:
                yield found
    async for key in lens.scan("task"):
        yield key


async def _payloads(app: App, prefix: bytes) -> AsyncIterator[bytes]:
    cursor: int | None = 0
    while cursor is not None:
        page = await app.space.list(Pattern(prefix), cursor, _PAGE)
        for item in page.tuples:
            yield item.payload
        cursor = page.next_cursor


async def cancel(app: App, key: str) -> CancelOutcome:
    """Cancel job ``key`` unless it runs (``"running"``: refused) or is over
    (``"done"``): every copy of it, wherever it waits, is turned away as
    done. ``JobNotFound`` if nothing knows the key."""
    await app.status(check_key(key))  # JobNotFound for a key no job has
    return await app.lens.cancel(key)


async def retry(app: App, key: str) -> JobHandle:
    """Put dead job ``key`` back to work (its dead letter requeued: attempt
    1 again, same key); ``InvalidJob`` if it has no dead letter."""
    letter = await _dead_letter(app, check_key(key))
    if letter is None:
        raise InvalidJob(f"job {key!r} has no dead letter to retry")
    await requeue(app.space, letter)
    return JobHandle(app, key)


async def purge(app: App, state: JobState = JobState.DEAD) -> int:
    """Take every dead letter of the app out of the space; how many. Only
    ``dead`` jobs can be purged (records of the others expire by themselves).
    A purged job's ``dead`` record stays until its ``result_ttl``: its status
    says dead until then, and ``retry`` finds nothing to requeue."""
    if state is not JobState.DEAD:
        raise InvalidJob(f"only dead jobs can be purged, not {state.value}")
    space = app.space
    prefix = app.dead_prefix + app.prefix
    taken = 0
    while True:
        page = await space.list(Pattern(prefix), 0, _PAGE)
        for item in page.tuples:
            # By its exact bytes: this letter only, whatever came in meanwhile.
            if await space.take(Pattern(item.payload)) is not None:
                taken += 1
        if not page.tuples:
            return taken


async def history(app: App, key: str) -> list[HistoryEvent]:
    """Job ``key``'s claim history, oldest first (coordinator.records)."""
    return await app.lens.history(check_key(key))


async def _dead_letter(app: App, key: str) -> DeadLetter | None:
    head = app.dead_prefix + key_prefix(app.prefix, key)
    page = await app.space.list(Pattern(head), 0, 1)
    if not page.tuples:
        return None
    item = page.tuples[0]
    return DeadLetter.parse(item, app.dead_prefix)
