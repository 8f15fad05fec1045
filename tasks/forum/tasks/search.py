"""An app's jobs counted and searched from the Lens's job index
(:mod:`forum.coordinator.jobindex`): ``App.counts()`` and ``App.search()``,
and so ``forum jobs list``. Never a scan: counts are O(states x tasks)
reads, a page a merge of sorted sets, however many jobs there are.

A page's statuses are worked out as :mod:`forum.tasks.status` does, from
what the Lens holds of each key (``inspect_many``: one round trip per
page), without reading the space: the index says where each job is. Two
edges follow: a job whose producer's record has not reached Redis (written
a few milliseconds after its enqueue, :mod:`forum.tasks.enqueued`) is not
listed yet, and a dead job shows ``dead`` from its record, not from its
dead letter.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forum.coordinator.jobindex import JobQuery
from forum.tasks.errors import InvalidJob, JobNotFound
from forum.tasks.handle import JobState, JobStatus
from forum.tasks.status import status_of

if TYPE_CHECKING:
    from forum.tasks.app import App

__all__ = ["ARGS_PREVIEW", "JobCounts", "SearchPage", "args_preview", "counts", "search"]

#: The longest arguments preview a job record keeps (characters).
ARGS_PREVIEW = 1024

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 2 * ARGS_PREVIEW  # cut to size below
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 32
_REPR.maxlong = 64


def args_preview(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """A job's arguments as the dashboard shows them and a search finds
    them: ``repr`` of each, ``name=value`` for keywords, at most
    :data:`ARGS_PREVIEW` characters (cut with an ellipsis). Bounded in
    time too: long containers are abbreviated (:mod:`reprlib`)."""
    shown = [_REPR.repr(arg) for arg in args]
    shown += [f"{name}={_REPR.repr(value)}" for name, value in kwargs.items()]
    text = ", ".join(shown)
    return text if len(text) <= ARGS_PREVIEW else text[: ARGS_PREVIEW - 1] + "…"


@dataclass(frozen=True, slots=True)
class JobCounts:
    """How many jobs of an app in each state (``by_state``), per task
    (``by_task``), and in all (``total``); states with none left out."""

    by_state: dict[JobState, int]
    by_task: dict[str, dict[JobState, int]]
    total: int


@dataclass(frozen=True, slots=True)
class SearchPage:
    """A page of :func:`search`: ``jobs`` in order; ``total`` how many
    match (``None`` when a key or text filter was given); ``next_cursor``
    for the next page (``None``: the last); ``searched`` how many index
    entries a key or text filter looked at; ``complete`` ``False`` when
    that search stopped at its budget before the end (go on with
    ``next_cursor``)."""

    jobs: list[JobStatus]
    total: int | None
    next_cursor: str | None
    searched: int
    complete: bool


async def counts(app: App) -> JobCounts:
    """``app``'s jobs counted by state and task (another app's tasks, sharing
    the Lens's namespace, left out when ``app`` names its tasks)."""
    found = await app.lens.job_counts()
    by_task = {
        task: {JobState(state): count for state, count in states.items()}
        for task, states in found.by_task.items()
        if not app.tasks or task in app.tasks
    }
    by_state: dict[JobState, int] = {}
    for states in by_task.values():
        for state, count in states.items():
            by_state[state] = by_state.get(state, 0) + count
    return JobCounts(by_state, by_task, sum(by_state.values()))


async def search(
    app: App,
    *,
    state: JobState | None = None,
    task: str | None = None,
    key: str | None = None,
    text: str | None = None,
    since: float | None = None,
    until: float | None = None,
    newest_first: bool = True,
    limit: int = 50,
    cursor: str | None = None,
) -> SearchPage:
    """A page of ``app``'s jobs from the index (see the module docstring):
    ``InvalidJob`` for a bad filter, limit or cursor."""
    if state is not None and state not in _INDEXED:
        raise InvalidJob(f"jobs are not listed by state {state.value}")
    mine = frozenset(app.tasks) if app.tasks and task is None else None
    try:
        query = JobQuery(
            state=None if state is None else state.value, task=task, key=key or None,
            text=text or None, since=since, until=until, newest_first=newest_first,
            limit=limit, cursor=cursor, tasks=mine,
        )  # fmt: skip
    except ValueError as exc:
        raise InvalidJob(str(exc)) from None
    found = await app.lens.find_jobs(query)
    total = found.total
    if mine is not None and not (key or text or since is not None or until is not None):
        total = _counted(await counts(app), state)  # exact still: the app's tasks' counts
    jobs = []
    for seen in await app.lens.inspect_many(found.keys):
        try:
            status = status_of(seen, None, None, prefix=app.prefix, dead_prefix=app.dead_prefix,
                               serializer=app.serializer)  # fmt: skip
        except JobNotFound:
            continue  # its record went since the index was read
        if status.state is JobState.QUEUED and seen.record.get("ix") == b"dead":
            status = dataclasses.replace(status, state=JobState.DEAD)
        jobs.append(status)
    return SearchPage(jobs, total, found.next_cursor, found.searched, found.complete)


#: The states the index keeps (``expired`` is worked out, not indexed).
_INDEXED = frozenset(JobState) - {JobState.EXPIRED}


def _counted(found: JobCounts, state: JobState | None) -> int:
    return found.total if state is None else found.by_state.get(state, 0)
