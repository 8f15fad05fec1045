"""A task: a named function and its policy (:class:`TaskOptions`).

``@app.task(...)`` makes one (:meth:`forum.tasks.App.task`). The function's first
parameter is the job's :class:`forum.tasks.Context`; the rest are the enqueue's
arguments. A coroutine function runs on the worker's event loop; a plain
function runs in the worker's thread pool (bounded: ``concurrency`` threads).

Policy, per task, each overridable per enqueue where it says so:

* ``retries`` (per enqueue: ``_retries``): how many attempts after the first.
  Attempt ``n`` failing with an error ``retry_on`` admits and ``give_up_on``
  does not is tried again after ``backoff.delay(n)`` seconds while ``n <=
  retries``; otherwise the job is dead, its traceback kept. ``n`` is the
  Lens's count of the job's attempts, across every node and every copy of
  the job (forum.coordinator.offers), so a task runs at most ``retries + 1``
  times in all, and never before its backoff is over (docs/tasks.md).
* ``backoff``: a :class:`forum.coordinator.Backoff` (per enqueue: the base and cap
  in the body's options, from the CLI or another producer).
* ``timeout`` (per enqueue: ``_timeout``), seconds: a coroutine still running
  then is cancelled, and the attempt fails with ``TimeoutError``. A thread
  cannot be stopped from outside: a sync task's attempt still fails at the
  timeout (the job moves on), but its thread runs on to its next context
  call (which raises ``JobCancelled``) or its end, holding one thread of the
  pool, and whatever it returns is dropped (and a worker
  process exits only once such a thread has ended: Python joins the pool's
  threads at exit). Give a sync task that may hang a timeout of its own (a
  socket timeout, say).
* ``executor`` (``"thread"`` or ``"process"``; ``None``, the default: the
  worker's, ``App.worker(executor=...)``, itself ``"thread"`` by default)
  and ``soft_timeout``, seconds: a sync task under ``"process"`` runs in a
  process of the worker's pool (:mod:`forum.tasks.executor`), where
  ``SoftTimeout`` is raised in it at ``soft_timeout`` and its process is
  killed at ``timeout`` (the attempt fails with ``TimeoutError``). Both are
  for sync tasks: a coroutine's timeout already stops it.
* ``result_ttl``: how long a result (and a dead job's error) is kept; the
  app's when ``None``.
* ``priority``, ``ttl``: the defaults of ``_priority`` and ``_ttl``.
* ``rate_limit`` (``"100/s"``, ``"10/m"``, ``"3600/h"``), ``concurrency``:
  the task's limits across every worker; ``limit_key`` (a function of the
  job's arguments) with ``max_running`` and ``rate``: per key
  (:mod:`forum.tasks.limits`).
* ``queue`` (per enqueue: ``_queue``): the queue its jobs go to, ``None``
  for ``"default"`` (:mod:`forum.tasks.queues`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from forum.coordinator import Backoff
from forum.tasks.bulk import Signature
from forum.tasks.errors import InvalidJob
from forum.tasks.limits import LimitKey, check_limits
from forum.tasks.queues import check_queue

if TYPE_CHECKING:
    from forum.tasks.app import App
    from forum.tasks.handle import JobHandle

#: The executors a task or a worker may name (forum.tasks.executor).
EXECUTORS = ("thread", "process")

#: An exception class, or a tuple of them, as ``except`` takes them.
ErrorTypes = tuple[type[BaseException], ...]


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """A task's policy (see the module docstring)."""

    retries: int = 3
    backoff: Backoff = field(default_factory=Backoff)
    timeout: float | None = None
    retry_on: ErrorTypes = (Exception,)
    give_up_on: ErrorTypes = ()
    result_ttl: float | None = None
    priority: int | None = None
    ttl: float | None = None
    rate_limit: str | None = None
    concurrency: int | None = None
    limit_key: LimitKey | None = None
    max_running: int | None = None
    rate: str | None = None
    executor: str | None = None
    soft_timeout: float | None = None
    queue: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise InvalidJob(f"retries must be a whole number from 0, not {self.retries!r}")
        for name in ("timeout", "result_ttl", "ttl", "soft_timeout"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, int | float) and math.isfinite(value) and value > 0
            ):
                raise InvalidJob(f"{name} must be a positive number of seconds, not {value!r}")
        for name in ("retry_on", "give_up_on"):
            value = getattr(self, name)
            if not all(isinstance(t, type) and issubclass(t, BaseException) for t in value):
                raise InvalidJob(f"{name} must be exception classes, not {value!r}")
        check_limits(self.rate_limit, self.concurrency, self.limit_key, self.max_running, self.rate)
        check_executor(self)
        if self.queue is not None:
            check_queue(self.queue)

    def overridden(self, options: Mapping[str, Any]) -> TaskOptions:
        """These options with a job's per-enqueue overrides (a message's
        ``options``, :mod:`forum.tasks.message`)."""
        if not options:
            return self
        backoff = self.backoff
        if "backoff_base" in options or "backoff_cap" in options:
            base = float(options.get("backoff_base", backoff.base))
            cap = max(base, float(options.get("backoff_cap", backoff.cap)))
            backoff = Backoff(base=base, cap=cap, jitter=backoff.jitter)
        return replace(
            self,
            retries=int(options.get("retries", self.retries)),
            timeout=options.get("timeout", self.timeout),
            backoff=backoff,
        )


def check_executor(options: TaskOptions) -> None:
    """``InvalidJob`` unless ``options``' executor and soft timeout agree."""
    if options.executor not in (None, *EXECUTORS):
        raise InvalidJob(f"executor must be 'thread' or 'process', not {options.executor!r}")
    if options.soft_timeout is None:
        return
    if options.executor == "thread":
        raise InvalidJob("soft_timeout needs executor='process': a thread cannot be interrupted")


def check_task_executor(
    name: str, function: Callable[..., Any], options: TaskOptions, *, is_async: bool
) -> None:
    """``InvalidJob`` for a task the process executor could not run, when
    it asks for it: a coroutine function, or one a child cannot import; or
    a soft timeout not below the timeout (checked here, at the definition,
    not for a job's ``_timeout``, which may cut both short)."""
    soft, hard = options.soft_timeout, options.timeout
    if soft is not None and hard is not None and soft >= hard:
        raise InvalidJob(f"soft_timeout ({soft:g}s) must be below timeout ({hard:g}s)")
    if is_async and (options.executor == "process" or options.soft_timeout is not None):
        raise InvalidJob(
            f"task {name!r} is a coroutine function: executor='process' and soft_timeout "
            "are for sync tasks (a coroutine's timeout stops it)"
        )
    if options.executor == "process":
        check_importable(name, function)


def check_importable(name: str, function: Callable[..., Any]) -> None:
    """``InvalidJob`` unless a child process can import ``function`` by its
    module and qualified name (forum.tasks.executor)."""
    qualname = str(getattr(function, "__qualname__", ""))
    if not qualname or "<" in qualname or not getattr(function, "__module__", None):
        raise InvalidJob(
            f"task {name!r} runs in a process, which imports it by module and name: "
            "define it at the top level of an importable module"
        )


def errors_of(value: type[BaseException] | ErrorTypes) -> ErrorTypes:
    """``retry_on=IOError`` or ``retry_on=(IOError, ...)``, as a tuple."""
    return (value,) if isinstance(value, type) else tuple(value)


class Task:
    """A named function of an app, with its :class:`TaskOptions`. Calling it
    calls the function (a test calls it with a context of its own);
    :meth:`enqueue` makes a job of it."""

    def __init__(
        self, app: App, name: str, function: Callable[..., Any], options: TaskOptions
    ) -> None:
        if not callable(function):
            raise InvalidJob(f"task {name!r} is not callable: {function!r}")
        self.app = app
        self.name = name
        self.function = function
        self.options = options
        #: A coroutine function runs on the loop; anything else in a thread
        #: (or a process: forum.tasks.executor).
        self.is_async = inspect.iscoroutinefunction(function)
        #: What an enqueue's arguments are bound to (after the context), read
        #: once here; ``None`` for a callable whose signature Python cannot tell.
        self.signature = _signature_of(function)
        check_task_executor(name, function, options, is_async=self.is_async)
        self.__doc__ = function.__doc__
        self.__wrapped__ = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        kind = "async" if self.is_async else "sync"
        return f"<Task {self.name!r} ({kind})>"

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """``InvalidJob`` unless the function takes ``args`` and ``kwargs``
        after its context: a job the worker could only fail, ``retries + 1``
        times, refused at the enqueue instead."""
        if self.signature is None:
            return
        try:
            self.signature.bind(None, *args, **kwargs)  # None: the context's place
        except TypeError as exc:
            raise InvalidJob(f"task {self.name!r}: {exc}") from None

    async def enqueue(self, *args: Any, **kwargs: Any) -> JobHandle:
        """:meth:`forum.tasks.App.enqueue` of this task, on its app or the
        copy of it open around the call (:meth:`forum.tasks.App.opened`)."""
        return await self.app.opened().enqueue(self.name, *args, **kwargs)

    def enqueue_sync(self, *args: Any, **kwargs: Any) -> JobHandle:
        """:meth:`forum.tasks.App.enqueue_sync` of this task."""
        return self.app.enqueue_sync(self.name, *args, **kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A call of this task, not made yet: for ``app.enqueue_many`` and
        workflows (``chain``, ``group``: :mod:`forum.tasks.canvas`)."""
        return Signature(self.name, args, kwargs)

    async def enqueue_many(self, calls: Sequence[tuple[Any, ...]]) -> list[JobHandle]:
        """:meth:`forum.tasks.App.enqueue_many` of this task: each call a
        tuple of its positional arguments (keyword arguments and ``_``
        options: ``app.enqueue_many([task.s(...), ...])``)."""
        return await self.app.opened().enqueue_many(self._signatures(calls))

    def enqueue_many_sync(self, calls: Sequence[tuple[Any, ...]]) -> list[JobHandle]:
        """:meth:`enqueue_many` from code that is not async."""
        return self.app.enqueue_many_sync(self._signatures(calls))

    def _signatures(self, calls: Sequence[tuple[Any, ...]]) -> list[Signature]:
        for index, call in enumerate(calls):
            if not isinstance(call, tuple):
                raise InvalidJob(f"job {index}: a call is a tuple of arguments, not {call!r}")
        return [Signature(self.name, call) for call in calls]


def _signature_of(function: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):  # some builtins and C callables have none
        return None
