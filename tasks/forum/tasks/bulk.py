"""Bulk enqueue: many jobs in one round trip per batch (:meth:`App.enqueue_many`).

::

    handles = await app.enqueue_many([resize.s(7, size=256), resize.s(8, size=256)])
    handles = await resize.enqueue_many([(7, 256), (8, 256)])

Each item is a call, a :class:`forum.tasks.canvas.Signature` (``task.s(*args,
**kwargs)``, the enqueue's ``_`` options among its keyword arguments, as
:meth:`App.enqueue` takes them). Every job is checked and encoded before
anything is written: a bad one is an ``InvalidJob`` naming its index, and
nothing is written. Then the jobs go to the nodes as batch writes with a key
per job (``write_many(keys=...)``: each deduplicated as a single enqueue is):
one request per replica group of the cluster, the groups in parallel, each
all or none. Jobs whose write options differ (``_delay``, ``_priority``,
``_ttl``, ``_copies``) go in one request per set of options. Then one call
writes every job's ``enqueued`` record (``record_enqueued_many``). The
handles come back in the items' order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forum.coordinator.records import NewRecord
from forum.node.core.cancellation import gather_all
from forum.node.core.errors import TooFewCopies
from forum.tasks.enqueue import Enqueue, Prepared, Writer, prepare
from forum.tasks.errors import InvalidJob
from forum.tasks.handle import JobHandle

if TYPE_CHECKING:
    from forum.tasks.app import App
    from forum.tasks.enqueued import EnqueuedRecords


@dataclass(frozen=True, slots=True)
class Signature:
    """A call of a task, not made yet: ``task.s(*args, **kwargs)``. The
    keyword arguments named ``_`` and an enqueue option are the enqueue's
    (:meth:`forum.tasks.App.enqueue`), the others the task's."""

    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.task}.s({', '.join(shown)})"


def prepare_all(app: App, calls: Sequence[object]) -> list[Prepared]:
    """Every call checked and encoded; ``InvalidJob`` naming the first bad
    one's index (``UnknownTask`` too is an ``InvalidJob`` here)."""
    if not isinstance(calls, list | tuple):
        raise InvalidJob(f"enqueue_many takes a list of task.s(...) calls, not {calls!r}")
    prepared: list[Prepared] = []
    for index, call in enumerate(calls):
        if not isinstance(call, Signature):
            raise InvalidJob(f"job {index}: a call is task.s(*args, **kwargs), not {call!r}")
        kwargs = dict(call.kwargs)
        try:
            given = Enqueue.taken_from(kwargs)
            prepared.append(prepare(app, call.task, call.args, kwargs, given))
        except (InvalidJob, LookupError, TypeError) as exc:
            raise InvalidJob(f"job {index}: {exc}") from None
    return prepared


async def enqueue_many(
    app: App, nodes: Writer, records: EnqueuedRecords, calls: Sequence[Signature]
) -> list[JobHandle]:
    """Write ``calls``' jobs (see the module docstring); their handles, in order."""
    jobs = prepare_all(app, calls)
    await write_prepared(nodes, records, jobs)
    return [JobHandle(app, job.key, call.task) for job, call in zip(jobs, calls, strict=True)]


async def write_prepared(nodes: Writer, records: EnqueuedRecords, jobs: Sequence[Prepared]) -> None:
    """Write ``jobs`` (see the module docstring), then their records in one
    call. ``CopiesShort`` after the records when a batch fell short of its
    copies (its jobs are enqueued all the same)."""
    if not jobs:
        return
    batches: dict[tuple[tuple[str, Any], ...], list[Prepared]] = {}
    for job in jobs:
        shared = tuple(sorted((k, v) for k, v in job.options.items() if k != "key"))
        batches.setdefault(shared, []).append(job)

    async def write(batch: list[Prepared]) -> TooFewCopies | None:
        options: Any = {k: v for k, v in batch[0].options.items() if k != "key"}
        payloads, keys = [job.payload for job in batch], [job.key for job in batch]
        try:
            await nodes.call(lambda space: space.write_many(payloads, keys=keys, **options))
        except TooFewCopies as exc:
            return exc  # enqueued all the same: the records go in, then the caller hears
        return None

    shorts = await gather_all(*(write(batch) for batch in batches.values()))
    await records.note_many([NewRecord(job.key, job.fields, job.lasting) for job in jobs])
    short = next((s for s in shorts if s is not None), None)
    if short is not None:
        raise short
