"""An app's lifecycle hooks and middleware: code of the app's own run by each
worker around its run and around each job.

::

    @app.on_startup
    async def open_db(state):            # once per worker, before its first job
        state["db"] = await create_pool(DSN)

    @app.on_shutdown
    async def close_db(state):           # once per worker, after its drain
        await state["db"].close()

    @app.task()
    async def charge(ctx, order_id):
        async with ctx.state["db"].acquire() as conn: ...

    @app.after_job
    def count(job, result): metrics.done(job.task)

    async def timing(job, call_next):    # a Middleware
        started = time.perf_counter()
        try:
            return await call_next()
        finally:
            metrics.observe(job.task, time.perf_counter() - started)

    app.add_middleware(timing)

**State.** Each worker (``forum worker``, ``app.run_worker()``,
``app.worker(...).run()``) has one dict, its state: every ``on_startup`` hook
is given it to fill (arq's and SAQ's ``ctx`` dict), every task sees it as
``ctx.state``, every ``on_shutdown`` hook is given it to close what is in it.
A startup hook returns nothing (a value returned is refused, not dropped:
put it in the state). Two workers in one process have a state each.

**Order.** For one attempt of one job::

    middleware 1 (added first: outermost)
      middleware 2
        before_job hooks, in the order registered
        the task (under its timeout)
    the outcome recorded (the result; or retrying / dead)
    after_job hooks (the result) or on_failure hooks (the error; retrying?)

Startup hooks run in the order registered, before the worker takes a job;
shutdown hooks in the same order, after it has drained (also when it stopped
on an error), and only when every startup hook ran.

**Errors.** A ``before_job`` hook or a middleware that raises fails the
attempt as the task raising it would (retried by the task's ``retry_on``;
``RetryAfter`` and ``GiveUp`` mean what they mean from a task). An
``after_job`` or ``on_failure`` hook that raises is logged with its
traceback, and the job's outcome stands: it was recorded before they ran.
A startup hook that raises stops the worker before its first job (the error
goes to the caller of ``run``); a shutdown hook that raises is logged, and
the next still runs. Hooks do not run for a job that never reached its task
(bytes that are not a job, a task the app lacks, attempts spent by dead
workers) nor for one whose claim was lost or which a drain cancelled (a
middleware sees ``ClaimLost`` or the cancellation raised through
``call_next()``, and lets it through).

**Sync or async.** A coroutine function runs on the worker's event loop; a
plain function runs in a thread (``asyncio.to_thread``), so a hook never
blocks the loop. A middleware is async (it awaits ``call_next``); it wraps
a sync task's thread as it wraps a coroutine: around the await.

**Cost.** A worker of an app without hooks or middleware runs the job as
before, with no wrapper: ``is None`` checks (:class:`forum.tasks.runner.Runner`).
A worker takes the hooks around a job the app has when it is made: register
them (at import, as tasks are) before making workers.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from forum.coordinator import GiveUp, RetryAfter
from forum.tasks.errors import StartupFailed, one_line

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

#: A worker's shared state: what its startup hooks put in, ``ctx.state``.
State = dict[str, Any]

#: The kinds of hooks, each a list of :class:`Hooks`.
_KINDS = ("startup", "shutdown", "before_job", "after_job", "on_failure")


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One attempt of one job, as hooks and middleware see it: its ``key``,
    its ``task``'s name, the ``attempt`` (from 1: the Lens's count, across
    every node), and the task's ``args`` and ``kwargs`` (read-only), those
    after ``ctx``."""

    key: str
    task: str
    attempt: int
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


class Middleware(Protocol):
    """Code around each run of a job's task: ``await call_next()`` runs the
    rest of the chain (the next middleware, the ``before_job`` hooks, the
    task) and returns the task's result, or raises what it raised. What the
    middleware returns is the result recorded; what it raises fails the
    attempt. An ``async def f(job, call_next)`` is one."""

    async def __call__(self, job: JobInfo, call_next: Callable[[], Awaitable[Any]]) -> Any: ...


@dataclass(frozen=True, slots=True)
class _Hook:
    """A hook function, and whether it is awaited on the loop or run in a thread."""

    function: Callable[..., Any]
    is_async: bool
    kind: str

    async def __call__(self, *args: Any) -> Any:
        if self.is_async:
            return await self.function(*args)
        return await asyncio.to_thread(self.function, *args)

    def __str__(self) -> str:
        name = getattr(self.function, "__qualname__", None) or repr(self.function)
        return f"{self.kind} hook {name}"


class Hooks:
    """An app's hooks and middleware (``app.hooks``), in the order registered;
    :class:`forum.tasks.App`'s decorators add to it."""

    def __init__(self) -> None:
        self.startup: list[_Hook] = []
        self.shutdown: list[_Hook] = []
        self.before_job: list[_Hook] = []
        self.after_job: list[_Hook] = []
        self.on_failure: list[_Hook] = []
        self.middleware: list[Middleware] = []

    def __bool__(self) -> bool:
        """Whether anything runs around a job (startup and shutdown do not)."""
        return bool(self.before_job or self.after_job or self.on_failure or self.middleware)

    def add(self, kind: str, function: F) -> F:
        """Register ``function`` as a hook of ``kind`` (an attribute's name);
        ``ValueError`` for one that is not a function."""
        if kind not in _KINDS:
            raise ValueError(f"no hooks of kind {kind!r} (kinds: {', '.join(_KINDS)})")
        if not callable(function) or isinstance(function, type):
            raise ValueError(f"a {kind} hook is a function, not {function!r:.80}")
        hooks: list[_Hook] = getattr(self, kind)
        hooks.append(_Hook(function, inspect.iscoroutinefunction(function), kind))
        return function

    def add_middleware(self, middleware: Middleware) -> None:
        """Add ``middleware`` inside those added before it; ``ValueError``
        for one that is not async (it could not await the job)."""
        call = type(middleware).__call__  # an instance of a class with an async __call__
        if not (inspect.iscoroutinefunction(middleware) or inspect.iscoroutinefunction(call)):
            raise ValueError(
                f"a middleware is an async callable (job, call_next), not {middleware!r:.80}"
            )
        self.middleware.append(middleware)

    # -- a worker's run -----------------------------------------------------------------

    async def started(self, state: State) -> None:
        """Run the startup hooks, in order, on ``state``."""
        for hook in self.startup:
            try:
                returned = await hook(state)
            except Exception as exc:
                # Its code failed (a database down, a bug): the traceback is
                # what mends it, logged once; the caller gets one line.
                log.error("%s failed", hook, exc_info=True)
                raise StartupFailed(f"{hook} failed: {one_line(exc)}") from exc
            if returned is not None:
                raise StartupFailed(
                    f"{hook} returned {returned!r:.80}: a startup hook puts what it makes "
                    "in its state argument (state['db'] = ...), and returns nothing"
                )

    async def stopped(self, state: State) -> None:
        """Run the shutdown hooks, in order, on ``state``: each one's error is
        logged, and the next still runs."""
        for hook in self.shutdown:
            await _observe(hook, "the worker stops all the same", state)

    def around(self, job: JobInfo) -> AroundJob:
        """This app's hooks and middleware around one attempt of ``job``."""
        return AroundJob(self, job)


class AppHooks:
    """The decorators that register an app's hooks and middleware in its
    ``hooks`` (:class:`forum.tasks.App` is one; see the module docstring
    for when each runs, and what its errors do)."""

    hooks: Hooks

    def on_startup(self, function: F) -> F:
        """``@app.on_startup``: ``function(state)`` once per worker, before its first job."""
        return self.hooks.add("startup", function)

    def on_shutdown(self, function: F) -> F:
        """``@app.on_shutdown``: ``function(state)`` once per worker, after its drain."""
        return self.hooks.add("shutdown", function)

    def before_job(self, function: F) -> F:
        """``@app.before_job``: ``function(job)`` before each attempt's task runs."""
        return self.hooks.add("before_job", function)

    def after_job(self, function: F) -> F:
        """``@app.after_job``: ``function(job, result)`` after each success is recorded."""
        return self.hooks.add("after_job", function)

    def on_failure(self, function: F) -> F:
        """``@app.on_failure``: ``function(job, error, retrying)`` after each failed attempt's
        outcome is recorded."""
        return self.hooks.add("on_failure", function)

    def add_middleware(self, middleware: Middleware) -> None:
        """Run ``middleware`` around each job's task, inside those added before it."""
        self.hooks.add_middleware(middleware)


@dataclass(frozen=True, slots=True)
class AroundJob:
    """The hooks and middleware around one attempt of ``job``: the runner
    (:class:`forum.tasks.runner.Runner`) calls :meth:`run` for the task,
    then :meth:`done` or :meth:`failed`."""

    hooks: Hooks
    job: JobInfo

    async def run(self, attempt: Callable[[], Awaitable[Any]]) -> Any:
        """``attempt()`` (the task) inside the middleware, after the
        ``before_job`` hooks; its result, or what any of them raised."""
        call = attempt
        if self.hooks.before_job:
            call = functools.partial(self._before, attempt)
        for middleware in reversed(self.hooks.middleware):
            call = functools.partial(middleware, self.job, call)
        return await call()

    async def _before(self, attempt: Callable[[], Awaitable[Any]]) -> Any:
        for hook in self.hooks.before_job:
            await hook(self.job)
        return await attempt()

    async def done(self, result: Any) -> None:
        """The ``after_job`` hooks, once ``result`` is recorded."""
        for hook in self.hooks.after_job:
            await _observe(hook, "the job's outcome stands", self.job, result)

    async def failed(self, error: Exception, settle: Awaitable[None]) -> None:
        """Await ``settle`` (the runner recording ``error``'s outcome, then
        raising ``RetryAfter`` or ``GiveUp``), then run the ``on_failure``
        hooks with whether the job will be retried, and raise it on. Anything
        else ``settle`` raises (``ClaimLost``) goes through without them."""
        try:
            await settle
        except (RetryAfter, GiveUp) as outcome:
            retrying = isinstance(outcome, RetryAfter)
            for hook in self.hooks.on_failure:
                await _observe(hook, "the job's outcome stands", self.job, error, retrying)
            raise


async def _observe(hook: _Hook, anyway: str, *args: Any) -> None:
    """Run a hook whose error must not change anything: logged, with its
    traceback, and what happens ``anyway``."""
    try:
        await hook(*args)
    except Exception:
        log.exception("%s raised (%s)", hook, anyway)


def job_info(
    key: str, task: str, attempt: int, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> JobInfo:
    """A :class:`JobInfo` whose ``kwargs`` the hooks cannot change under the task."""
    return JobInfo(key, task, attempt, args, MappingProxyType(kwargs))
