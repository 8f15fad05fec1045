"""Workflows on idempotent keys: chains and groups of task calls.

::

    flow = await chain(fetch.s(url), parse.s(), store.s(table="pages")).enqueue(app)
    pages = await flow.result(timeout=60)

    flow = await group([resize.s(i) for i in ids], then=notify.s()).enqueue(app)

A call is a :class:`~forum.tasks.bulk.Signature`, ``task.s(*args,
**kwargs)``. A workflow is enqueued one way, ``await workflow.enqueue(app)``
(or ``enqueue_sync(app)``), and answers a :class:`WorkflowHandle`.

**Keys.** A workflow has a key ``K``: ``key=`` when given, else one derived
from its content as a job's default key is (:mod:`forum.tasks.message`): the
same workflow, the same key, so enqueued twice it runs once. Step ``i`` of a
chain, and member ``i`` of a group, is the job ``K/i``; a group's callback
is ``K/then``. Every job of a workflow is an ordinary job with that key:
deduplicated at write, run once under its claim (docs/tasks.md).

**Chains.** Only the first step is enqueued at first. The worker that
finishes step ``i`` enqueues step ``i + 1`` with the result as its first
argument after ``ctx`` (Celery's rule: ``parse.s()`` is called as
``parse(ctx, <fetch's result>)``), *before* it completes step ``i``'s claim.
A worker that dies between the two leaves step ``i`` to run again; the
rerun enqueues ``K/(i+1)`` again, which the node deduplicates (and the Lens
turns away once it ran): each step runs once.

**Groups.** Every member is enqueued at once (one batch per replica group).
The worker that finishes a member records its result in the member's record
(fenced by its claim), then reads every member's record in one Lens call;
when all ``n`` say done, it enqueues ``then`` as ``K/then``, with the list
of the members' results (in the members' order) as its first argument
after ``ctx``. Two members finishing at once both may see all done: both
enqueue ``K/then``, deduplicated to one job. One of them always sees it: each
writes its own record before it reads the others' (every Redis call is
atomic), so the last of the two to write reads the other's.

**Failure.** A step that ends dead stops its chain (nothing enqueues the
next step), and a dead member stops its group's ``then``:
:meth:`WorkflowHandle.status` says ``dead``, and :meth:`WorkflowHandle.result`
raises the dead step's ``JobFailed``. A step whose successor cannot be
enqueued (no node answers) fails its attempt, and is retried as any failure is.
A group's member results are its records: they last
``result_ttl``, so its ``then`` must be reached within it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forum.tasks.bulk import Signature, write_prepared
from forum.tasks.enqueue import Enqueue, Prepared, Writer, prepare
from forum.tasks.enqueued import EnqueuedRecords
from forum.tasks.errors import InvalidJob, JobNotFound, ResultTimeout
from forum.tasks.handle import JobState, JobStatus, outcome, run_sync
from forum.tasks.message import Message, check_key, default_key, dumps

if TYPE_CHECKING:
    from forum.coordinator import Job
    from forum.tasks.app import App
    from forum.tasks.authority import Field, TaskAuthority

#: A step as a message's ``workflow`` holds it: [task, args, kwargs].
_Step = list[Any]
#: How often a workflow's ``result()`` asks, at most.
_POLL = 0.2


def _steps(calls: Sequence[object], what: str) -> tuple[Signature, ...]:
    """``calls`` as signatures: ``InvalidJob`` naming the first that is not
    one, or gives ``_key`` (a workflow's keys are its own)."""
    steps: list[Signature] = []
    for index, step in enumerate(calls):
        if not isinstance(step, Signature):
            raise InvalidJob(f"{what} step {index}: a call is task.s(...), not {step!r}")
        if "_key" in step.kwargs:
            raise InvalidJob(f"{what} step {index}: its key is the workflow's (K/{index}): no _key")
        steps.append(step)
    if not steps:
        raise InvalidJob(f"a {what} needs at least one task.s(...) call")
    return tuple(steps)


def _step_of(call: Signature) -> _Step:
    return [call.task, list(call.args), dict(call.kwargs)]


def _call_of(step: _Step, first: Any) -> Signature:
    """A stored step's call with ``first`` before its own arguments."""
    task, args, kwargs = step
    return Signature(task, (first, *args), kwargs)


def _workflow_key(app: App, kind: str, key: str | None, content: object) -> str:
    """The workflow's key: ``key``, else its content's; ``InvalidJob`` when
    its jobs' keys (``K/then`` the longest) would not be job keys."""
    if key is None:
        return default_key(app.serializer, kind, [content], {})
    check_key(f"{check_key(key)}/then")
    return key


@dataclass(frozen=True, slots=True)
class Chain:
    """Steps run one after another, each given the previous one's result."""

    steps: tuple[Signature, ...]
    key: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", _steps(self.steps, "chain"))

    async def enqueue(self, app: App) -> WorkflowHandle:
        """Enqueue the chain's first step (the others follow it) on ``app``'s
        cluster; the chain's handle."""
        _check(app, self.steps[:1], "chain", 0, stand_in=False)
        _check(app, self.steps[1:], "chain", 1, stand_in=True)
        key = _workflow_key(app, "chain", self.key, [_step_of(s) for s in self.steps])
        first = self.steps[0]
        workflow = {"chain": key, "step": 0, "rest": [_step_of(s) for s in self.steps[1:]]}
        job = _prepared(app, first, f"{key}/0", workflow)
        await _write_on(app, [job])
        jobs = [(f"{key}/{i}", step.task) for i, step in enumerate(self.steps)]
        return WorkflowHandle(app, key, jobs, gathered=False)

    def enqueue_sync(self, app: App) -> WorkflowHandle:
        """:meth:`enqueue` from code that is not async (as ``enqueue_sync``)."""
        return run_sync(app, self.enqueue, "enqueue").on(app)


@dataclass(frozen=True, slots=True)
class Group:
    """Members run side by side; ``then``, when every one is done, with the
    list of their results."""

    members: tuple[Signature, ...]
    then: Signature | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", _steps(self.members, "group"))
        if self.then is not None:
            _steps([self.then], "group's then")

    async def enqueue(self, app: App) -> WorkflowHandle:
        """Enqueue every member (one batch per replica group); the group's handle."""
        then = None if self.then is None else _step_of(self.then)
        content = [[_step_of(m) for m in self.members], then]
        _check(app, self.members, "group", 0, stand_in=False)
        _check(app, () if self.then is None else (self.then,), "group's then", 0, stand_in=True)
        key = _workflow_key(app, "group", self.key, content)
        size = len(self.members)
        jobs = [
            _prepared(app, member, f"{key}/{i}", {"group": key, "index": i, "size": size,
                                                  "then": then})
            for i, member in enumerate(self.members)
        ]  # fmt: skip
        await _write_on(app, jobs)
        handles = [(f"{key}/{i}", m.task) for i, m in enumerate(self.members)]
        if self.then is not None:
            handles.append((f"{key}/then", self.then.task))
        return WorkflowHandle(app, key, handles, gathered=self.then is None)

    def enqueue_sync(self, app: App) -> WorkflowHandle:
        """:meth:`enqueue` from code that is not async (as ``enqueue_sync``)."""
        return run_sync(app, self.enqueue, "enqueue").on(app)


def chain(*steps: Signature, key: str | None = None) -> Chain:
    """``chain(a.s(1), b.s(), c.s())``: see the module docstring."""
    return Chain(steps, key)


def group(members: Sequence[Signature], *, then: Signature | None = None,
          key: str | None = None) -> Group:  # fmt: skip
    """``group([a.s(1), a.s(2)], then=c.s())``: see the module docstring."""
    return Group(tuple(members), then, key)


def _prepared(app: App, call: Signature, key: str, workflow: dict[str, Any] | None) -> Prepared:
    """A workflow's job ``key``: the call's own ``_`` options, the workflow's key."""
    kwargs = dict(call.kwargs)
    given = Enqueue.taken_from(kwargs)
    return prepare(app, call.task, call.args, kwargs, Enqueue(key, **_options_of(given)),
                   workflow=workflow)  # fmt: skip


def _check(app: App, calls: Sequence[Signature], what: str, start: int, *, stand_in: bool) -> None:
    """Check a workflow's calls before anything is written (an unknown task,
    an argument the serializer refuses, a bad option): ``InvalidJob`` naming
    the step. ``stand_in``: a call a worker enqueues later, checked with a
    stand-in for the result it will be given."""
    for index, call in enumerate(calls, start):
        try:
            _prepared(app, _call_of(_step_of(call), None) if stand_in else call, "check", None)
        except (InvalidJob, LookupError) as exc:
            raise InvalidJob(f"{what} step {index}: {exc}") from None


def _options_of(given: Any) -> dict[str, Any]:
    """An ``Enqueue``'s fields but its key, by name."""
    names = ("delay", "not_before", "priority", "ttl", "retries", "timeout", "copies")
    return {name: getattr(given, name) for name in names}


async def _write_on(app: App, jobs: list[Prepared]) -> None:
    """``jobs`` written on the open app's cluster, or on connections of
    their own when it is not open (a workflow enqueued by a worker's task)."""
    opened = app._open
    if opened is not None:
        await write_prepared(opened.nodes, opened.records, jobs)
        return
    async with app.connect() as connections:
        await write_prepared(connections.nodes, connections.records, jobs)


# -- the worker's side ------------------------------------------------------------------


async def advance(
    app: App, lens: TaskAuthority, space: Writer, *, job: Job, message: Message, result: Any
) -> None:
    """Step ``message`` of a workflow returned ``result``: enqueue what comes
    next (the runner calls this before the worker completes the claim)."""
    workflow = message.options["workflow"]
    if "chain" in workflow:
        rest: list[_Step] = workflow["rest"]
        if not rest:
            return
        key, step = workflow["chain"], workflow["step"] + 1
        following = {"chain": key, "step": step, "rest": rest[1:]}
        call = _call_of(rest[0], result)
        await _enqueue_next(app, lens, space, _prepared(app, call, f"{key}/{step}", following))
        return
    await _member_done(app, lens, space, job=job, message=message, result=result)


async def _member_done(
    app: App, lens: TaskAuthority, space: Writer, *, job: Job, message: Message, result: Any
) -> None:
    """A group member is done: its result in its record, then ``then`` if
    every member's record says done (see the module docstring)."""
    workflow = message.options["workflow"]
    key, size, then = workflow["group"], workflow["size"], workflow["then"]
    if result is None:  # the runner records only a result that is not None
        fields: dict[str, Field] = {
            "state": "done", "task": message.task, "result": dumps(app.serializer, None, "result"),
            "attempt": job.attempt, "updated": time.time(),
        }  # fmt: skip
        await lens.record(job.claim, fields, app.result_ttl)
    if then is None:
        return
    states = await lens.inspect_many([f"{key}/{i}" for i in range(size)])
    results: list[Any] = []
    for state in states:
        record = state.record or {}
        if record.get("state") != b"done" or "result" not in record:
            return  # not every member is done: the last to finish goes on
        results.append(app.serializer.loads(record["result"]))
    call = _call_of(then, results)
    await _enqueue_next(app, lens, space, _prepared(app, call, f"{key}/then", None))


async def _enqueue_next(app: App, lens: TaskAuthority, space: Writer, job: Prepared) -> None:
    """Enqueue the next job of a workflow through the worker's own space."""
    records = EnqueuedRecords(lens)
    try:
        await write_prepared(space, records, [job])
    finally:
        await records.aclose()


# -- the producer's handle --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """One look at a workflow: its ``state`` (``done`` once its last job
    is; ``dead``, ``expired`` or ``cancelled`` when a step ended so; else
    ``running`` once a step ran, ``queued`` before), and each job's status
    in order (``None``: not enqueued yet)."""

    key: str
    state: JobState
    jobs: tuple[JobStatus | None, ...]


class WorkflowHandle:
    """A chain's or group's jobs, by key (see the module docstring)."""

    __slots__ = ("_app", "_gathered", "jobs", "key")

    def __init__(
        self, app: App, key: str, jobs: Sequence[tuple[str, str]], *, gathered: bool
    ) -> None:
        self._app = app
        self.key = key
        #: Each job's key and task, in order (a group's ``then`` last).
        self.jobs = tuple(jobs)
        #: A group without ``then``: its result is the list of its members'.
        self._gathered = gathered

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.key!r} ({len(self.jobs)} jobs)>"

    async def status(self) -> WorkflowStatus:
        """Every job's status, and the workflow's state from them."""
        looks = await asyncio.gather(
            *(self._app.status(key) for key, _ in self.jobs), return_exceptions=True
        )
        jobs: list[JobStatus | None] = []
        for look in looks:
            if isinstance(look, JobNotFound):
                jobs.append(None)
            elif isinstance(look, BaseException):
                raise look
            else:
                jobs.append(look)
        return WorkflowStatus(self.key, _state_of(jobs, self._gathered), tuple(jobs))

    async def result(self, timeout: float | None = None) -> Any:
        """The last job's result once done (a group without ``then``: the
        list of its members' results); the first failed step's ``JobFailed``
        (or ``JobExpired``, ``JobCancelled``); ``ResultTimeout`` when
        ``timeout`` seconds pass first."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            status = await self.status()
            if status.state.final:
                return self._outcome(status)
            if deadline is not None and loop.time() >= deadline:
                raise ResultTimeout(self.key, timeout or 0.0, status.state.value)
            left = _POLL if deadline is None else min(_POLL, deadline - loop.time())
            await asyncio.sleep(max(left, 0.0))

    def _outcome(self, status: WorkflowStatus) -> Any:
        ended = [job for job in status.jobs if job is not None and job.state.final]
        failed = next((job for job in ended if job.state is not JobState.DONE), None)
        if failed is not None:
            return outcome(failed)
        if self._gathered:
            return [job.result for job in ended]
        return ended[-1].result

    def status_sync(self) -> WorkflowStatus:
        """:meth:`status` from code that is not async (as ``JobHandle.status_sync``)."""
        return run_sync(self._app, lambda app: self.on(app).status(), "status")

    def result_sync(self, timeout: float | None = None) -> Any:
        """:meth:`result` from code that is not async (as ``JobHandle.result_sync``)."""
        return run_sync(self._app, lambda app: self.on(app).result(timeout), "result")

    def on(self, app: App) -> WorkflowHandle:
        """This workflow's handle through ``app`` (an open copy of its own, say)."""
        return WorkflowHandle(app, self.key, self.jobs, gathered=self._gathered)


def _state_of(jobs: Sequence[JobStatus | None], gathered: bool) -> JobState:
    """A workflow's state from its jobs' (see :class:`WorkflowStatus`)."""
    seen = [job for job in jobs if job is not None]
    stopped = next((j.state for j in seen if j.state.final and j.state is not JobState.DONE), None)
    if stopped is not None:
        return stopped
    if gathered and len(seen) == len(jobs) and all(j.state is JobState.DONE for j in seen):
        return JobState.DONE
    last = jobs[-1]
    if not gathered and last is not None and last.state is JobState.DONE:
        return JobState.DONE
    if any(j.state is not JobState.QUEUED and j.state is not JobState.DELAYED for j in seen):
        return JobState.RUNNING
    return JobState.QUEUED
