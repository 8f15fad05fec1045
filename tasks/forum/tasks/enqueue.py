"""What an enqueue is, before anything is written: its options (the
``_``-keywords of :meth:`forum.tasks.App.enqueue`), the job checked and
encoded from them (:func:`prepare`), and where it is written (a
:class:`Writer`). ``App.enqueue``, ``enqueue_many`` (:mod:`forum.tasks.bulk`)
and a workflow's steps (:mod:`forum.tasks.canvas`) all prepare a job here,
so each is checked the same way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from forum.node.core.tracing import carrier
from forum.node.core.write_options import WriteOptions, check_copies, write_properties
from forum.tasks.authority import Field
from forum.tasks.errors import InvalidJob, UnknownTask
from forum.tasks.message import Message, check_key, default_key
from forum.tasks.queues import DEFAULT_QUEUE, check_queue
from forum.tasks.search import args_preview

if TYPE_CHECKING:
    from forum.tasks.app import App

T = TypeVar("T")


class Writer(Protocol):
    """Where an enqueue writes: ``call(operation)`` runs ``operation(space)``
    on the app's cluster (:class:`forum.tasks.cluster.AppCluster`: to the
    key's group, failing over inside it, then to the next group)."""

    async def call(self, operation: Callable[[Any], Awaitable[T]]) -> T: ...


class OneNode:
    """A :class:`Writer` of one space (a worker's, for its periodic tasks)."""

    def __init__(self, space: Any) -> None:
        self._space = space

    async def call(self, operation: Callable[[Any], Awaitable[T]]) -> T:
        return await operation(self._space)


class Prepared(NamedTuple):
    """A job checked and encoded (:func:`prepare`): its tuple, the
    write's options, its ``enqueued`` record (``background``: written
    after the enqueue returns, :mod:`forum.tasks.enqueued`) and its queue. A named tuple:
    made on every enqueue, it costs 0.4 µs to a frozen dataclass's 1.6 here."""

    key: str
    payload: bytes
    options: WriteOptions
    fields: dict[str, Field]
    lasting: float
    background: bool
    queue: str


@dataclass(frozen=True, slots=True)
class Enqueue:
    """An enqueue's options: each field is the keyword argument of
    :meth:`App.enqueue` named ``_`` and the field (``_key``, ``_delay``, ...)."""

    key: str | None = None
    delay: float | None = None
    not_before: float | None = None
    priority: int | None = None
    ttl: float | None = None
    retries: int | None = None
    timeout: float | None = None
    copies: int | None = None
    queue: str | None = None

    @classmethod
    def taken_from(cls, kwargs: dict[str, Any]) -> Enqueue:
        """The options among an enqueue's keyword arguments, taken out of
        ``kwargs`` (what is left is the task's)."""
        return cls(**{k[1:]: kwargs.pop(k) for k in list(kwargs) if k in ENQUEUE_OPTIONS})

    def overrides(self) -> dict[str, Any]:
        """A message's ``options``: the per-enqueue overrides given, checked."""
        options: dict[str, Any] = {}
        retries, timeout = self.retries, self.timeout
        if retries is not None:
            if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
                raise InvalidJob(f"_retries must be a whole number from 0, not {retries!r}")
            options["retries"] = retries
        if timeout is not None:
            if (
                isinstance(timeout, bool)
                or not isinstance(timeout, int | float)
                or not (math.isfinite(timeout) and timeout > 0)
            ):
                raise InvalidJob(f"_timeout must be a positive number of seconds, not {timeout!r}")
            options["timeout"] = timeout
        return options


#: The keyword arguments of :meth:`App.enqueue` that are its options.
ENQUEUE_OPTIONS = frozenset(f"_{field.name}" for field in fields(Enqueue))


def prepare(
    app: App,
    name: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    given: Enqueue,
    *,
    workflow: dict[str, Any] | None = None,
) -> Prepared:
    """A job of ``app`` checked and encoded, not yet written (``InvalidJob`` or
    ``UnknownTask`` for bad input); ``workflow``, a chain's or group's
    step (:mod:`forum.tasks.canvas`), rides in its message's options."""
    task = app.tasks.get(name)
    if task is None:
        raise UnknownTask(name, list(app.tasks))
    task.check_arguments(args, kwargs)
    key = given.key
    key = default_key(app.serializer, name, args, kwargs) if key is None else check_key(key)
    overrides = given.overrides()
    if workflow is not None:
        overrides["workflow"] = workflow
    trace = carrier()  # the current span's context, when tracing is on: the run's parent
    if trace is not None:
        overrides["trace"] = trace
    queue = task.options.queue if given.queue is None else check_queue(given.queue)
    queue = queue or DEFAULT_QUEUE
    message = Message(key, name, tuple(args), kwargs, overrides, queue)
    payload = message.encode(app.prefix, app.serializer)
    priority = task.options.priority if given.priority is None else given.priority
    ttl = task.options.ttl if given.ttl is None else given.ttl
    delay, not_before = given.delay, given.not_before
    now = time.time()
    copies = given.copies
    try:  # the node's own check, here too: bad options are bad input, not a round trip
        write_properties(now, delay, not_before, ttl, priority or 0, key, app.dedup_window)
    except ValueError as exc:
        raise InvalidJob(str(exc)) from None
    if copies is not None:  # its bound, the cluster's size, is the node's to check
        try:
            check_copies(copies)
        except ValueError as exc:
            raise InvalidJob(f"_{exc}") from None  # "_copies must be ...": the keyword
    options: WriteOptions = {
        "key": key, "dedup_window": app.dedup_window, "delay": delay,
        "not_before": not_before, "priority": priority or 0, "ttl": ttl,
    }  # fmt: skip
    if copies is not None:  # only when given: a worker's own space may take no copies
        options["copies"] = copies
    due = not_before if not_before is not None else now + (delay or 0.0)
    fields: dict[str, Field] = {
        "state": "enqueued", "task": name, "due": due, "updated": now, "enqueued": now,
        "args": args_preview(args, kwargs),
    }  # fmt: skip
    if ttl is not None:
        fields["expires"] = due + ttl
    lasting = app.result_ttl + max(due - now, 0) + (ttl or 0)
    return Prepared(key, payload, options, fields, lasting, due <= now and ttl is None, queue)
