"""The handler a :class:`forum.coordinator.Worker` runs for an app: it decodes the
job tuple, runs the task it names, and turns the outcome into what the
worker does next.

::

    Worker(space, lens, Pattern(app.prefix), Runner(app, lens, pool, space=OneNode(space)),
           concurrency=8)

For each claimed job (``forum.coordinator.Job``):

1. decode the tuple (:mod:`forum.tasks.message`): bytes that are not a job of this
   app, or a task it does not have, give up at once (``GiveUp``: a dead
   letter saying why; no retry can mend them); so does an attempt past the
   task's ``retries + 1`` (only a job whose workers died gets one: the
   Lens counts a lapsed claim as an attempt made), without running it, so
   a task runs at most ``retries + 1`` times however its workers end;
2. run the task with a :class:`forum.tasks.Context`: a coroutine function on the
   loop under ``asyncio.timeout(timeout)``, a plain one in the thread pool
   (a thread cannot be cancelled: its attempt fails at the timeout, and the
   thread runs on to its next context call, which raises ``JobCancelled``;
   :mod:`forum.tasks.task`), or in a process of the worker's pool when it
   runs in one (killed at the timeout: :mod:`forum.tasks.executor`);
3. a result that is not ``None`` is stored fenced (``lens.record``, state
   ``done``, kept ``result_ttl``) *before* this handler returns: the worker
   completes the claim only afterwards, so a stale holder (its claim lost)
   is refused (``ClaimLost``) and stores nothing. A ``None`` result writes
   nothing: the done marker says done, and the no-op path costs what a raw
   worker's does. A step of a chain or group then enqueues what comes next
   into the worker's space (``space``; :mod:`forum.tasks.canvas`), still
   before the claim completes;
4. a failure: attempt ``n`` of a task with ``retries`` r is retried while
   ``n <= r`` and the error is one of ``retry_on`` and none of
   ``give_up_on``: a fenced ``retrying`` record (its ``due``, the error),
   then ``RetryAfter(backoff.delay(n))``. A task that raises
   ``RetryAfter(delay, error)`` itself is retried after its ``delay`` (not
   the backoff's), and one that raises ``GiveUp(error)`` is not retried;
   both within ``retries``. Otherwise a fenced ``dead`` record
   (error and traceback), then ``GiveUp`` with the traceback, which the
   worker buries as the dead letter. A record that cannot be written because
   Redis is down is logged and the outcome still raised (the job itself is
   safe in the space); one refused because the claim is lost stops there:
   ``ClaimLost`` goes to the worker, which leaves the job to its new holder.

With tracing on (:mod:`forum.tasks.tracing`), each attempt is a
``forum.run <task>`` span, a child of the span that enqueued the job.

Cancellation (the worker's heartbeat lost the claim, the job was cancelled,
or the drain ran out) is not a failure of the task: it goes through as it
came.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import traceback
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from typing import TYPE_CHECKING, Any

from forum.coordinator import ClaimLost, GiveUp, Job, LensError, RetryAfter, Worker
from forum.coordinator.worker import LOST_WORKER
from forum.node.core.tracing import tracer
from forum.tasks import canvas, cron
from forum.tasks.authority import Field, TaskAuthority
from forum.tasks.context import Context
from forum.tasks.errors import InvalidJob, one_line
from forum.tasks.executor import ProcessPool
from forum.tasks.hooks import State, job_info
from forum.tasks.message import Message, dumps
from forum.tasks.schedules import Registry
from forum.tasks.task import Task, TaskOptions

if TYPE_CHECKING:
    from forum.tasks.app import App
    from forum.tasks.enqueue import Writer

log = logging.getLogger(__name__)


class Runner:
    """``await runner(job)``: one attempt of the job's task (see the module
    docstring). ``pool`` runs the sync tasks; the caller shuts it down.
    ``state`` is the worker's, each job's ``ctx.state`` (:mod:`forum.tasks.hooks`)."""

    def __init__(
        self,
        app: App,
        lens: TaskAuthority,
        pool: ThreadPoolExecutor,
        *,
        state: State | None = None,
        space: Writer | None = None,
        processes: ProcessPool | None = None,
    ) -> None:
        self._app = app
        self._lens = lens
        self._pool = pool
        self._state: State = {} if state is None else state
        #: The app's hooks and middleware; None when it has none around a job.
        self._hooks = app.hooks if app.hooks else None
        #: The worker's space: a workflow's next step is enqueued there.
        self._space = space
        #: The process executor's pool, when a task runs in one.
        self._processes = processes

    async def __call__(self, job: Job) -> None:
        app = self._app
        try:
            message = Message.decode(job.payload, app.prefix, app.serializer)
            task = app.tasks.get(message.task)
            if task is None:
                raise InvalidJob(f"no task named {message.task!r} in this app")
            options = task.options.overridden(message.options)
        except InvalidJob as exc:
            await self._record(job, {"state": "dead", "error": str(exc)}, app.result_ttl)
            raise GiveUp(str(exc)) from None
        if job.attempt > options.retries + 1:  # its workers died: attempts spent
            spent = f"attempt {job.attempt} of {options.retries + 1}: {LOST_WORKER}"
            await self._record(job, {"state": "dead", "error": spent}, app.result_ttl)
            raise GiveUp(spent)
        traces = tracer()
        if traces is None:  # tracing off: no span, the attempt as it is
            return await self._run(job, task, options, message)
        from forum.tasks.tracing import run_span  # noqa: PLC0415  (loads opentelemetry: only when on)

        with run_span(traces, job, message):
            await self._run(job, task, options, message)

    async def _run(self, job: Job, task: Task, options: TaskOptions, message: Message) -> None:
        """One attempt of ``task`` on ``message``, its outcome recorded (steps 2 to 4)."""
        app = self._app
        context = Context(
            job_id=str(job.entry_id), key=job.key, task=task.name, attempt=job.attempt,
            claim=job.claim, lens=self._lens, serializer=app.serializer,
            record_ttl=self._ttl(options), state=self._state,
        )  # fmt: skip
        # The app's hooks and middleware, when it has any (forum.tasks.hooks: their order).
        hooks = None if self._hooks is None else self._hooks.around(
            job_info(job.key, task.name, job.attempt, message.args, message.kwargs)
        )  # fmt: skip
        try:
            if hooks is None:
                result = await self._attempt(task, options, context, message)
            else:
                result = await hooks.run(lambda: self._attempt(task, options, context, message))
            body = None if result is None else dumps(app.serializer, result, "the result")
        except (ClaimLost, asyncio.CancelledError):
            await context.aclose()
            raise
        except Exception as exc:
            await context.flush()
            if hooks is None:
                await self._failed(job, task, options, exc)
            else:
                await hooks.failed(exc, self._failed(job, task, options, exc))
            return
        await context.flush()
        if body is not None:
            # Raises ClaimLost for a stale holder: the worker then completes nothing.
            fields: dict[str, Field] = {
                "state": "done", "task": task.name, "result": body, "attempt": job.attempt,
                "updated": time.time(),
            }  # fmt: skip
            await self._lens.record(job.claim, fields, self._ttl(options))
        if "workflow" in message.options and self._space is not None:  # a workflow's step
            await canvas.advance(app, self._lens, self._space, job=job, message=message,
                                 result=result)  # fmt: skip
        if hooks is not None:
            await hooks.done(result)

    async def _attempt(
        self, task: Task, options: TaskOptions, context: Context, message: Message
    ) -> Any:
        """The task's return value; what it raised, or ``TimeoutError`` at its timeout."""
        if task.is_async:
            if options.timeout is None:  # the common case, without a timeout's context
                return await task.function(context, *message.args, **message.kwargs)
            async with asyncio.timeout(options.timeout):
                return await task.function(context, *message.args, **message.kwargs)
        if self._processes is not None and self._processes.runs(task):
            return await self._processes.run(task, options, context, message.args, message.kwargs)
        call = functools.partial(task.function, context, *message.args, **message.kwargs)
        running = asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(copy_context().run, call)
        )
        try:
            # wait_for cancels the future at the timeout; the thread itself runs on...
            return await asyncio.wait_for(running, options.timeout)
        finally:
            context.stop()  # ...to its next context call, which raises JobCancelled

    async def _failed(self, job: Job, task: Task, options: TaskOptions, exc: Exception) -> None:
        """Attempt ``job.attempt`` raised ``exc``: raise ``RetryAfter`` or
        ``GiveUp`` after recording which (see the module docstring)."""
        error = exc.error if isinstance(exc, RetryAfter | GiveUp) else one_line(exc)
        delay = _retry_delay(exc, job.attempt, options)
        if delay is not None:
            fields: dict[str, Field] = {
                "state": "retrying", "task": task.name, "attempt": job.attempt,
                "due": time.time() + delay, "error": error, "updated": time.time(),
            }  # fmt: skip
            await self._record(job, fields, self._ttl(options) + delay)
            raise RetryAfter(delay, error) from exc
        trace = "".join(traceback.format_exception(exc))
        fields = {
            "state": "dead", "task": task.name, "attempt": job.attempt,
            "error": error, "traceback": trace, "updated": time.time(),
        }  # fmt: skip
        await self._record(job, fields, self._ttl(options))
        raise GiveUp(trace) from exc

    async def _record(self, job: Job, fields: Mapping[str, Field], ttl: float) -> None:
        """A fenced record of a failure; ``ClaimLost`` goes through, an outage
        is logged (the job is safe in the space; only its status lags)."""
        try:
            await self._lens.record(job.claim, fields, ttl)
        except ClaimLost:
            raise
        except LensError as exc:
            log.warning("%s: its %s record was not written (%s)", job.key, fields["state"], exc)

    def _ttl(self, options: TaskOptions) -> float:
        return options.result_ttl or self._app.result_ttl


def _retry_delay(exc: Exception, attempt: int, options: TaskOptions) -> float | None:
    """How long until the next attempt after attempt ``attempt`` raised
    ``exc``, or ``None``: no more attempts. A task's own ``RetryAfter`` is a
    retry with its delay (arq's ``Retry(defer=)``), whatever ``retry_on``
    says, and ``GiveUp`` is none; both within the task's ``retries``."""
    if isinstance(exc, InvalidJob | GiveUp) or attempt > options.retries:
        return None  # InvalidJob: a result the serializer refuses, every time
    if isinstance(exc, RetryAfter):
        return exc.delay
    if isinstance(exc, options.retry_on) and not isinstance(exc, options.give_up_on):
        return options.backoff.delay(attempt)
    return None


class TaskWorker(Worker):
    """The :class:`forum.coordinator.Worker` of an app (:meth:`forum.tasks.App.worker`):
    the worker, and beside it the app's periodic tasks (each slot enqueued
    into the worker's own space, :mod:`forum.tasks.cron`), stopped with it; its
    thread pool (and process pool, if it has one) is shut down once it is
    drained. The app's startup hooks run before it takes a job, its shutdown
    hooks after the drain (:mod:`forum.tasks.hooks`)."""

    def __init__(
        self, app: App, pool: ThreadPoolExecutor, space: Any, lens: TaskAuthority,
        *args: Any, state: State | None = None, processes: ProcessPool | None = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(space, lens, *args, **kwargs)
        self._app = app
        #: What the app's startup hooks fill, each job's ``ctx.state`` (the Runner's).
        self.state: State = {} if state is None else state
        self._pool = pool
        self._processes = processes
        self._task_space = space
        self._task_lens = lens
        self._cron_stop = asyncio.Event()

    def stop(self) -> None:
        self._cron_stop.set()
        super().stop()

    async def run(self) -> None:
        hooks, started = self._app.hooks, False
        try:
            await hooks.started(self.state)  # before the first job (forum.tasks.hooks)
            started = True
            async with asyncio.TaskGroup() as group:
                if self._app.periodic:
                    group.create_task(self._periodic(), name="periodic tasks")
                try:
                    await super().run()
                finally:
                    self._cron_stop.set()
        finally:
            # A hung sync task's thread cannot be stopped; it is left to end.
            self._pool.shutdown(wait=False, cancel_futures=True)
            if self._processes is not None:
                await self._processes.aclose()
            if started:  # after the drain; not when a startup hook failed
                await hooks.stopped(self.state)

    async def _periodic(self) -> None:
        async def enqueue(slot: cron.Slot) -> None:
            await self._app.enqueue_slot(slot, self._task_space, self._task_lens)

        # Each slot written is published for the Schedules page (forum.tasks.schedules).
        registry = Registry.for_authority(self._task_lens, self._app.prefix, self._app.periodic)
        try:
            await cron.run_periodic(
                self._app.periodic, enqueue, self._cron_stop,
                published=None if registry is None else registry.published,
            )  # fmt: skip
        finally:
            if registry is not None:
                await registry.aclose()
