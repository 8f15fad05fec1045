"""A job as its producer sees it: :class:`JobHandle`, and what it is doing
now: :class:`JobStatus` (worked out by :mod:`forum.tasks.status`).

::

    handle = await app.enqueue("resize", image_id=7)
    status = await handle.status()          # JobStatus(state=JobState.QUEUED, ...)
    value = await handle.result(timeout=30)  # or JobFailed, JobExpired, ...
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from forum.tasks.errors import JobCancelled, JobExpired, JobFailed, JobNotFound, ResultTimeout

if TYPE_CHECKING:
    from forum.coordinator.records import CancelOutcome
    from forum.tasks.app import App

T = TypeVar("T")

#: How often ``result()`` asks, at first and at most (doubling between).
_FIRST_POLL = 0.02
_LONGEST_POLL = 0.5


class JobState(StrEnum):
    """Where a job is (docs/tasks.md, "Status")."""

    QUEUED = "queued"
    DELAYED = "delayed"
    RUNNING = "running"
    RETRYING = "retrying"
    DONE = "done"
    DEAD = "dead"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """Whether the job will do nothing more by itself."""
        return self in _FINAL


_FINAL = frozenset({JobState.DONE, JobState.DEAD, JobState.EXPIRED, JobState.CANCELLED})


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One look at a job. Times are Unix seconds; ``result`` only when done;
    ``attempt`` and ``worker`` while running (``attempt`` also once retrying,
    dead or done with a record); ``due`` when delayed or retrying; ``error``
    and ``traceback`` when retrying or dead; ``token`` the fencing token of
    the claim that wrote what is shown; ``args`` and ``enqueued`` from the
    producer's record, kept through every later one."""

    key: str
    task: str | None
    state: JobState
    attempt: int | None = None
    worker: str | None = None
    due: float | None = None
    error: str | None = None
    traceback: str | None = None
    result: Any = None
    token: int | None = None
    progress: Any = None
    updated: float | None = None
    #: A text preview of its arguments (at most 1 KiB), kept after the run.
    args: str | None = None
    #: When it was first enqueued.
    enqueued: float | None = None


class JobHandle:
    """One job of ``app``, by ``key``. Cheap: it holds no connection."""

    __slots__ = ("_app", "key", "task")

    def __init__(self, app: App, key: str, task: str | None = None) -> None:
        self._app = app
        self.key = key
        #: The task's name, when this handle was made by an enqueue.
        self.task = task

    def __repr__(self) -> str:
        return f"<JobHandle {self.key!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHandle) and (other._app, other.key) == (self._app, self.key)

    def __hash__(self) -> int:
        return hash(self.key)

    async def status(self) -> JobStatus:
        """What the job is doing now; ``JobNotFound`` if nothing knows it.
        The task is the handle's own when the space and the Lens do not name
        it (a job just claimed whose enqueued record is still on its way:
        tasks/forum/tasks/enqueued.py)."""
        status = await self._app.status(self.key)
        if status.task is None and self.task is not None:
            return replace(status, task=self.task)
        return status

    def status_sync(self) -> JobStatus:
        """:meth:`status` from code that is not async (:func:`run_sync`)."""
        return run_sync(self._app, lambda app: self.on(app).status(), "status")

    def result_sync(self, timeout: float | None = None) -> Any:
        """:meth:`result` from code that is not async (Flask, Django): on a
        loop of its own, with connections of its own (:func:`run_sync`)."""
        return run_sync(self._app, lambda app: self.on(app).result(timeout), "result")

    def on(self, app: App) -> JobHandle:
        """This job's handle through ``app`` (an open copy of its own, say)."""
        return JobHandle(app, self.key, self.task)

    async def cancel(self) -> CancelOutcome:
        """Cancel this job, queued or running (:meth:`forum.tasks.App.cancel`)."""
        return await self._app.cancel(self.key)

    async def result(self, timeout: float | None = None) -> Any:
        """The task's return value once it is done (``None`` for a task that
        returned nothing, or whose result outlived ``result_ttl``).

        Raises :class:`JobFailed` (dead), :class:`JobExpired`,
        :class:`JobCancelled`, or :class:`ResultTimeout` when ``timeout``
        seconds pass first; ``JobNotFound`` when nothing knows the key.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        wait = _FIRST_POLL
        while True:
            try:
                status = await self.status()
            except JobNotFound:
                if self.task is None:
                    raise
                # Enqueued by this handle: a worker may hold its tuple between
                # the reserve and the claim (seen by neither the space nor the Lens).
                status = JobStatus(self.key, self.task, JobState.QUEUED)
            if status.state.final:
                return outcome(status)
            if deadline is not None and loop.time() >= deadline:
                raise ResultTimeout(self.key, timeout or 0.0, status.state.value)
            left = wait if deadline is None else min(wait, deadline - loop.time())
            await asyncio.sleep(max(left, 0.0))  # a poll, bounded by the deadline
            wait = min(wait * 2, _LONGEST_POLL)


def outcome(status: JobStatus) -> Any:
    """A final status's result, or the error it is."""
    if status.state is JobState.DONE:
        return status.result
    if status.state is JobState.DEAD:
        raise JobFailed(status.key, status.error or "(no error recorded)", status.traceback)
    if status.state is JobState.EXPIRED:
        raise JobExpired(status.key)
    raise JobCancelled(status.key)


def run_sync(app: App, call: Callable[[App], Awaitable[T]], what: str) -> T:
    """``call`` on a closed copy of ``app`` (``app.using()``), opened on a
    loop of its own and closed before this returns: the ``*_sync`` methods'
    way from code that is not async. Refused inside a running loop (it would
    block it): ``RuntimeError`` saying to await ``what()``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_on_own(app, call))
    raise RuntimeError(f"{what}_sync() called inside an event loop: await {what}() instead")


async def _on_own(app: App, call: Callable[[App], Awaitable[T]]) -> T:
    async with app.using() as own:
        return await call(own)
