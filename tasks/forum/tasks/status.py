"""How a job's status is worked out, from the Lens and the space, at once.

Reads side by side: ``lens.inspect(key)`` (the live claim, the done
marker and the job's record, in one Redis round trip), the space's live
tuple of the key and its dead letter (``read(b"dead/" + ...)``), in each
queue of the app (``read(prefix + queue + b"/" + key + b"\\n")``), and as
written before queues (``read(prefix + key + b"\\n")``): the key alone does
not say its queue (:func:`forum.tasks.message.job_heads`). A job enqueued
to a queue no task of the app names (``_queue=``) is found by its record
alone while queued. Then, first match wins:

====  ===========================================  ===========================
step  found                                        state
====  ===========================================  ===========================
1     a done marker                                ``done`` (the result from a
                                                   ``done`` record), or
                                                   ``cancelled`` when the
                                                   record's ``cancelled`` is
                                                   the marker's token
2     a live claim                                 ``running`` (its owner is
                                                   the worker, its attempt)
3     a dead letter                                ``dead`` (error, traceback;
                                                   from the letter when the
                                                   record is not ``dead``)
4     a record in state ``retrying``               ``retrying`` (``due``, the
                                                   error)
5     a live tuple, or a ``dead`` record (its      ``queued``
      letter requeued: a retry)
6     an ``enqueued`` record due in the future     ``delayed``
7     an ``enqueued`` record past its ``expires``  ``expired``
8     an ``enqueued`` record otherwise             ``queued`` (reserved on a
                                                   node, or not yet replicated
                                                   to the one asked)
9     nothing, at two looks :data:`RELOOK` apart   ``JobNotFound``
====  ===========================================  ===========================

Why a second look: the producer's ``enqueued`` record of a job due now is
written in the background (:mod:`forum.tasks.enqueued`, a few milliseconds late),
and a node hides the tuple it reserved for a worker until that worker's
claim shows in the Lens (a round trip, or up to 0.2 s for a reservation
made ahead). A job caught in both at once shows nothing for that moment.
So does a dead job just retried (:mod:`forum.tasks.admin`): its record still
says ``dead``, its letter is gone and its requeued tuple, reserved, is
hidden until a worker's claim shows; a status that finds a ``dead`` record
and nothing in the space looks again too, and if the second look finds the
same, the job is queued (step 5): a dead job has its letter. (A worker that
buries a job records ``dead`` before it writes the letter: a look between
the two sees the letter at the second look.)

What the records hold (fields of ``<tag>:task:<key>``, forum.coordinator.records):
``state`` (enqueued, retrying, done, dead), ``task``, ``attempt``, ``due``
and ``expires`` (Unix s), ``error``, ``traceback``, ``result`` and
``progress`` (the app's serializer's bytes), ``updated`` (Unix s),
``args`` (a text preview of the arguments) and ``enqueued`` (Unix s; both
the producer's, kept by every later record), ``ix`` (the state the job
index has it under, forum.coordinator.jobindex), and
``token`` (set by the Lens: the claim that wrote it) and ``cancelled`` (set
by the Lens's cancel: the token of its done marker). A producer writes the
``enqueued`` record (``record_enqueued``: only when there is none); every
later one is written fenced by the worker holding the claim
(:mod:`forum.tasks.runner`).

A status is a snapshot across three reads that are not one transaction: a
job that moves between them may show the state it just left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from forum.coordinator.envelope import Envelope
from forum.node.core.cancellation import gather_all
from forum.node.core.space import Pattern
from forum.tasks.authority import KeyState, TaskAuthority
from forum.tasks.errors import JobNotFound
from forum.tasks.handle import JobState, JobStatus
from forum.tasks.message import job_heads, peek_task
from forum.tasks.queues import DEFAULT_QUEUE
from forum.tasks.serializer import Serializer

#: How long after finding nothing a status looks again (see the module
#: docstring): longer than a reservation made ahead waits for its claim.
RELOOK = 0.3


class Reader(Protocol):
    """What a status needs of the space: one read by prefix."""

    async def read(self, pattern: Pattern) -> bytes | None: ...


async def job_status(
    key: str,
    *,
    lens: TaskAuthority,
    space: Reader,
    prefix: bytes,
    dead_prefix: bytes,
    serializer: Serializer,
    queues: Sequence[str] = (DEFAULT_QUEUE,),
) -> JobStatus:
    """The status of job ``key``, its tuple looked for in each of ``queues``
    (the app's: :func:`forum.tasks.queues.queues_of`) and as written before
    queues (see the module docstring)."""
    heads = job_heads(prefix, key, queues)

    async def look() -> tuple[KeyState, bytes | None, bytes | None]:
        reads = [space.read(Pattern(head)) for head in heads]
        reads += [space.read(Pattern(dead_prefix + head)) for head in heads]
        state, found = await asyncio.gather(lens.inspect(key), gather_all(*reads))
        return state, _first(found[: len(heads)]), _first(found[len(heads) :])

    state, live, dead = await look()
    if _unseen(state, live, dead):
        await asyncio.sleep(RELOOK)  # caught between a reservation and its claim?
        state, live, dead = await look()
    return status_of(state, live, dead, prefix=prefix, dead_prefix=dead_prefix,
                     serializer=serializer)  # fmt: skip


def _first(found: list[bytes | None]) -> bytes | None:
    return next((payload for payload in found if payload is not None), None)


def _unseen(state: KeyState, live: bytes | None, dead: bytes | None) -> bool:
    """Whether a look found job ``state.key`` nowhere it can be seen: no done
    marker, claim, live tuple or dead letter, and no record that says it
    waits unseen (``enqueued``: delayed, or reserved; ``retrying``). Such a
    job may be between a node's reservation and its claim (see the module
    docstring): worth a second look."""
    if state.done_token is not None or state.claim is not None:
        return False
    if live is not None or dead is not None:
        return False
    return (state.record or {}).get("state") not in (b"enqueued", b"retrying")


def status_of(
    state: KeyState,
    live: bytes | None,
    dead: bytes | None,
    *,
    prefix: bytes,
    dead_prefix: bytes,
    serializer: Serializer,
) -> JobStatus:
    """The status of job ``state.key`` from what the Lens holds of it
    (``state``), its live tuple and its dead letter (payloads, or ``None``
    when the space has none; a live tuple's head up to its task name is
    enough); ``JobNotFound`` when nothing knows it."""
    key = state.key
    record: Mapping[str, bytes] = state.record or {}
    fields = _Fields(record, serializer)
    task = fields.text("task") or _task_of(live, prefix) or _task_of(dead, dead_prefix + prefix)
    found = _Found(key, task, fields)
    stage = fields.text("state")
    if state.done_token is not None:
        return _done(found, state.done_token)
    if state.claim is not None:
        claim = state.claim
        return found.status(JobState.RUNNING, attempt=claim.attempt, worker=claim.owner,
                            token=claim.token, updated=claim.since)  # fmt: skip
    if dead is not None:
        # Before the record: a worker that buries a job whose workers kept
        # dying (forum.coordinator.worker, LOST_WORKER) leaves the last record as it was.
        letter = Envelope.open(dead[len(dead_prefix) :])
        if stage != "dead":
            return found.status(JobState.DEAD, error=letter.error, attempt=letter.attempt,
                                traceback=None, due=None)  # fmt: skip
        return found.status(JobState.DEAD, due=None)
    if stage == "retrying":
        return found.status(JobState.RETRYING, due=fields.number("due"))
    if live is not None or stage == "dead":
        # A dead record without its letter: the letter was requeued (a
        # retry), and the new tuple, unless seen live, is reserved on a node.
        return found.status(JobState.QUEUED, due=None)
    if stage == "enqueued":
        return _enqueued(found, fields)
    raise JobNotFound(key)


def _enqueued(found: _Found, fields: _Fields) -> JobStatus:
    """Steps 6 to 8: an enqueued record and no tuple seen."""
    now = time.time()
    due, expires = fields.number("due"), fields.number("expires")
    if due is not None and due > now:
        return found.status(JobState.DELAYED, due=due)
    if expires is not None and expires <= now:
        return found.status(JobState.EXPIRED, due=None)
    return found.status(JobState.QUEUED, due=None)


def _done(found: _Found, done_token: int) -> JobStatus:
    """Step 1: a done marker, left by a completion or by a cancel (which
    sets the record's ``cancelled`` to the marker's token)."""
    fields = found.fields
    if fields.integer("cancelled") == done_token:
        return found.status(JobState.CANCELLED, token=done_token, due=None)
    result = fields.loaded("result") if fields.text("state") == "done" else None
    return found.status(JobState.DONE, result=result, token=done_token, error=None,
                        traceback=None, due=None)  # fmt: skip


def _task_of(payload: bytes | None, prefix: bytes) -> str | None:
    return None if payload is None else peek_task(payload, prefix)


class _Fields:
    """A record's fields, read as the types the runner wrote them."""

    def __init__(self, record: Mapping[str, bytes], serializer: Serializer) -> None:
        self._record = record
        self._serializer = serializer

    def text(self, name: str) -> str | None:
        raw = self._record.get(name)
        return None if raw is None else _text(raw)

    def number(self, name: str) -> float | None:
        raw = self.text(name)
        try:
            return None if raw is None else float(raw)
        except ValueError:
            return None

    def integer(self, name: str) -> int | None:
        value = self.number(name)
        return None if value is None else int(value)

    def loaded(self, name: str) -> Any:
        raw = self._record.get(name)
        if raw is None:
            return None
        try:
            return self._serializer.loads(raw if isinstance(raw, bytes) else raw.encode())
        except Exception:  # a value written by another serializer: shown as text
            return _text(raw)


def _text(raw: bytes | str) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)


class _Found:
    """What every state of one job shows: its key, task and record."""

    def __init__(self, key: str, task: str | None, fields: _Fields) -> None:
        self.key = key
        self.task = task
        self.fields = fields

    def status(self, state: JobState, **shown: Any) -> JobStatus:
        """A status in ``state``; the record's fields unless ``shown`` says otherwise."""
        fields = self.fields
        values: dict[str, Any] = {
            "attempt": fields.integer("attempt"),
            "due": fields.number("due"),
            "error": fields.text("error"),
            "traceback": fields.text("traceback"),
            "token": fields.integer("token"),
            "progress": fields.loaded("progress"),
            "updated": fields.number("updated"),
            "args": fields.text("args"),
            "enqueued": fields.number("enqueued"),
        }
        values.update(shown)
        return JobStatus(key=self.key, task=self.task, state=state, **values)
