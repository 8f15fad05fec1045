"""A task's limits (``@app.task(rate_limit=, concurrency=, limit_key=,
max_running=, rate=)``), checked where the task is defined, and the
worker's :class:`forum.coordinator.limits.Admission` built from them.

Each task with limits has up to two, held in the Lens for every worker
(forum.coordinator.limits, where what is exact is said):

* the task's: ``task:<app prefix>:<task>``, at most ``concurrency``
  running and ``rate_limit`` started;
* its limit key's: ``key:<app prefix>:<task>:<str(limit_key(*args,
  **kwargs))>``, at most ``max_running`` running and ``rate`` started per
  key (a customer, a tenant).

Both live in the Lens shard of ``<app prefix>:<task>``, so a job is admitted
under both at once or under neither. A job over a limit waits, reserved and
unclaimed, so its attempt is not counted (forum.coordinator.worker).

A ``limit_key`` that raises on a job's arguments puts the job under the
task's limits alone (logged): the job is not lost, and its handler meets the
same arguments and fails as its task says.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from forum.coordinator.limits import Admitter, Ask, Limit, Limiter
from forum.tasks.errors import InvalidJob
from forum.tasks.message import Message, peek_task

if TYPE_CHECKING:
    from forum.tasks.app import App
    from forum.tasks.task import Task

log = logging.getLogger(__name__)

#: "<count>/<unit>": how many a second, a minute or an hour.
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*(s|m|h)\s*")
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}

#: A task's limit key function: called with the job's arguments (no context).
LimitKey = Callable[..., Hashable]


def parse_rate(text: object, what: str = "rate_limit") -> float:
    """``"100/s"``, ``"10/m"`` or ``"3600/h"`` as jobs a second;
    :class:`InvalidJob` saying what is wrong otherwise."""
    found = _RATE.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise InvalidJob(f"{what} must be like '100/s', '10/m' or '3600/h', not {text!r}")
    per_second = float(found[1]) / _PER[found[2]]
    if not (math.isfinite(per_second) and per_second > 0):
        raise InvalidJob(f"{what} must allow some jobs, not {text!r}")
    return per_second


def check_limits(
    rate_limit: str | None,
    concurrency: int | None,
    limit_key: LimitKey | None,
    max_running: int | None,
    rate: str | None,
) -> None:
    """:class:`InvalidJob` for limit options that are wrong or bound nothing
    (called by ``TaskOptions.__post_init__``)."""
    if rate_limit is not None:
        parse_rate(rate_limit)
    if rate is not None:
        parse_rate(rate, "rate")
    for name, value in (("concurrency", concurrency), ("max_running", max_running)):
        whole = isinstance(value, int) and not isinstance(value, bool)
        if value is not None and not (whole and value >= 1):
            raise InvalidJob(f"{name} must be a whole number from 1, not {value!r}")
    if limit_key is not None and not callable(limit_key):
        raise InvalidJob(f"limit_key must be a function of the job's arguments, not {limit_key!r}")
    if limit_key is None and (max_running is not None or rate is not None):
        raise InvalidJob("max_running and rate are per limit key: give limit_key too")
    if limit_key is not None and max_running is None and rate is None:
        raise InvalidJob("limit_key limits nothing alone: give max_running or rate too")


def has_limits(task: Task) -> bool:
    options = task.options
    return (
        options.rate_limit is not None
        or options.concurrency is not None
        or (options.limit_key is not None)
    )


class TaskLimits:
    """The :class:`Ask` of a job of ``app`` (``None``: its task has no limits)."""

    def __init__(self, app: App) -> None:
        self._app = app
        #: Per task name: its group and the task-wide limit, if any.
        self._tasks: dict[str, tuple[str, Limit | None]] = {}
        for task in app.tasks.values():
            if has_limits(task):
                self._tasks[task.name] = self._task_limit(task)

    def _task_limit(self, task: Task) -> tuple[str, Limit | None]:
        group = f"{self._app.prefix.decode(errors='replace')}:{task.name}"
        options = task.options
        if options.concurrency is None and options.rate_limit is None:
            return group, None
        rate = None if options.rate_limit is None else parse_rate(options.rate_limit)
        return group, Limit(f"task:{group}", options.concurrency, rate)

    def __call__(self, key: str, payload: bytes) -> Ask | None:
        app = self._app
        name = peek_task(payload, app.prefix)
        if name is None or name not in self._tasks:
            return None
        group, task_limit = self._tasks[name]
        limits = [] if task_limit is None else [task_limit]
        options = app.tasks[name].options
        if options.limit_key is not None:
            per_key = self._key_limit(key, payload, group, options.limit_key)
            if per_key is not None:
                rate = None if options.rate is None else parse_rate(options.rate, "rate")
                limits.append(Limit(per_key, options.max_running, rate))
        return Ask(key, group, tuple(limits)) if limits else None

    def _key_limit(self, key: str, payload: bytes, group: str, limit_key: LimitKey) -> str | None:
        """The name of the job's key limit; ``None`` when its arguments do
        not decode or ``limit_key`` raises on them (see the module docstring)."""
        try:
            message = Message.decode(payload, self._app.prefix, self._app.serializer)
            value: Any = limit_key(*message.args, **message.kwargs)
        except Exception:
            log.exception("%s: limit_key failed; the job is under its task's limits alone", key)
            return None
        return f"key:{group}:{value}"


def task_admission(app: App, lens: object) -> Admitter | None:
    """The admission of ``app``'s jobs under their tasks' limits, kept by
    ``lens``; ``None`` when no task has limits (the worker makes no calls)."""
    if not any(has_limits(task) for task in app.tasks.values()):
        return None
    if not isinstance(lens, Limiter):
        raise InvalidJob(f"the app's tasks have limits, and {lens!r} keeps none")
    return Admitter(lens, TaskLimits(app))
