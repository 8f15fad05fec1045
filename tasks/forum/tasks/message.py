"""The byte format of a job tuple, and the job key.

A job is one tuple in the space (the coordinator's trailer, if any, comes
after it: :mod:`forum.coordinator.envelope`)::

    <app prefix> <queue> / <key> 0x0A <task name> 0x0A <body>

==============  ===============================================================
app prefix      ``App(prefix=)``, default ``b"task/"``: what a worker of every
                queue of the app reserves (``Pattern(prefix)``)
queue           the task's queue, or the enqueue's ``_queue``, ASCII
                (:mod:`forum.tasks.queues`): ``<app prefix><queue>/`` is
                what a worker of that queue reserves
key             the job key, UTF-8: non-empty, no ``\\n``, at most 500 bytes.
                It is also the Forum write's ``key`` (dedup at write) and so
                the Lens's claim key: one key is one job, done once. First, so
                one job is found by prefix: ``read(prefix + key + b"\\n")``,
                and its dead letter by ``dead/`` + that
task name      ASCII, ``[A-Za-z0-9_.:-]{1,200}``
body           ``serializer.dumps({"args": [...], "kwargs": {...},
                "options": {...}})``; ``options`` holds the per-enqueue
                overrides given (``retries``, ``timeout``, ``backoff_base``,
                ``backoff_cap``), ``workflow`` for a step of a chain or
                group (:mod:`forum.tasks.canvas`), ``trace``, the
                producer's span context (W3C ``traceparent``, and
                ``tracestate``) when tracing is on (:mod:`forum.tasks.tracing`),
                and nothing else
==============  ===============================================================

**Jobs written before queues** (``<app prefix><key>\n...``, no queue)
are still read: a first line without a ``/``, or whose part before the
first ``/`` is no queue name, is a key alone, in :data:`DEFAULT_QUEUE`
(a default or periodic key never holds a ``/``). A worker of every queue
(the default) runs them as before, and a status finds them
(:func:`job_heads`); a worker of named queues does not see them. A key of
one's own holding a ``/`` (``a/b``) written so is read as key ``b`` of
queue ``a``: it still runs on a worker of every queue (the claim key is
the one it was written with), and its status is found under ``a/b``, but a
listing shows it as ``b``.

**The default key** (no ``_key`` given) is ``f"{task}:{h}"``, ``h`` the first
32 hex digits of the SHA-256 of the serializer's bytes of ``{"args": [...],
"kwargs": {...}}`` (keyword arguments sorted by name). So the same call is
the same job: enqueued twice, it runs once while the Lens remembers it is
done (``LensConfig.retention``), as arq's ``_job_id``. To run the same call again, give
a key of your own (say with a date or a request id in it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forum.tasks.errors import InvalidJob
from forum.tasks.queues import DEFAULT_QUEUE, QUEUE_NAME, check_queue, queue_prefix
from forum.tasks.serializer import Serializer

#: What a task name may be made of.
TASK_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
#: The longest job key, in UTF-8 bytes.
MAX_KEY = 500
#: The per-enqueue overrides a body's ``options`` may hold, and their types.
OPTION_TYPES: Mapping[str, type | tuple[type, ...]] = {
    "retries": int,
    "timeout": (int, float),
    "backoff_base": (int, float),
    "backoff_cap": (int, float),
    "workflow": dict,
    "trace": dict,
}
_SEP = b"\n"


def check_task_name(name: object) -> str:
    """``name`` if it is a valid task name; :class:`InvalidJob` otherwise."""
    if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
        raise InvalidJob(f"{name!r} is not a task name: 1 to 200 of A-Z a-z 0-9 _ . : -")
    return name


def check_key(key: object) -> str:
    """``key`` if it is a valid job key; :class:`InvalidJob` otherwise."""
    if not isinstance(key, str) or not key:
        raise InvalidJob(f"a job key is a non-empty string, not {key!r}")
    if "\n" in key:
        raise InvalidJob(f"a job key must not contain a newline: {key!r}")
    try:
        size = len(key.encode())
    except UnicodeEncodeError:
        raise InvalidJob(f"a job key must be valid UTF-8 text: {key!r}") from None
    if size > MAX_KEY:
        raise InvalidJob(f"a job key is at most {MAX_KEY} bytes in UTF-8, not {size}")
    return key


def key_prefix(prefix: bytes, key: str) -> bytes:
    """The bytes every tuple of job ``key`` starts with (its dead letter: after ``dead/``)."""
    return prefix + key.encode() + _SEP


def job_heads(prefix: bytes, key: str, queues: Sequence[str]) -> list[bytes]:
    """The bytes job ``key``'s tuple starts with in each of ``queues``, and
    last as it was written before queues (see the module docstring): where
    a status looks for a job whose queue it does not know."""
    return [*(key_prefix(queue_prefix(prefix, q), key) for q in queues), key_prefix(prefix, key)]


def _split_head(head: bytes) -> tuple[str, bytes]:
    """A first line's queue and key bytes (a line written before queues: the
    default queue and the whole line)."""
    queue, slash, key = head.partition(b"/")
    if slash and key and QUEUE_NAME.fullmatch(queue.decode("ascii", "replace")):
        return queue.decode("ascii"), key
    return DEFAULT_QUEUE, head


def dumps(serializer: Serializer, value: Any, what: str) -> bytes:
    """``serializer.dumps(value)``, its refusal as one line naming ``what``."""
    try:
        return serializer.dumps(value)
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"{what} cannot be encoded by {serializer.name}: {exc}") from None


def default_key(
    serializer: Serializer, task: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> str:
    """The key of a call enqueued without ``_key`` (see the module docstring)."""
    body = dumps(serializer, {"args": list(args), "kwargs": dict(sorted(kwargs.items()))}, "args")
    return f"{task}:{hashlib.sha256(body).hexdigest()[:32]}"


@dataclass(frozen=True, slots=True)
class Message:
    """One job as its tuple holds it."""

    key: str
    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    queue: str = DEFAULT_QUEUE

    def __post_init__(self) -> None:
        check_key(self.key)
        check_task_name(self.task)
        check_queue(self.queue)
        for name, value in self.options.items():
            kind = OPTION_TYPES.get(name)
            if kind is None:
                raise InvalidJob(f"unknown job option {name!r}")
            if isinstance(value, bool) or not isinstance(value, kind):
                what = "a mapping" if kind is dict else "a number"
                raise InvalidJob(f"job option {name} must be {what}, not {value!r}")

    def encode(self, prefix: bytes, serializer: Serializer) -> bytes:
        """The tuple's bytes; :class:`InvalidJob` for arguments the serializer refuses."""
        body = {"args": list(self.args), "kwargs": dict(self.kwargs), "options": dict(self.options)}
        return b"".join(
            (
                key_prefix(queue_prefix(prefix, self.queue), self.key),
                self.task.encode(),
                _SEP,
                dumps(serializer, body, "args"),
            )
        )

    @classmethod
    def decode(cls, payload: bytes, prefix: bytes, serializer: Serializer) -> Message:
        """Read a job tuple's bytes (without the coordinator's trailer);
        :class:`InvalidJob` saying what is wrong with them."""
        if not payload.startswith(prefix):
            raise InvalidJob(f"not a job of this app (no {prefix!r} prefix)")
        parts = payload[len(prefix) :].split(_SEP, 2)
        if len(parts) != 3:
            raise InvalidJob("not a job tuple: no key and task name lines")
        raw_head, raw_name, body = parts
        queue, raw_key = _split_head(raw_head)
        try:
            key, name = raw_key.decode(), raw_name.decode("ascii")
        except UnicodeDecodeError:
            raise InvalidJob("not a job tuple: its key or task name is not text") from None
        try:
            document = serializer.loads(body)
        except Exception as exc:  # a serializer may raise anything on bad bytes
            raise InvalidJob(f"job {key!r}: its body does not decode ({exc})") from None
        if not isinstance(document, dict) or set(document) != {"args", "kwargs", "options"}:
            raise InvalidJob(f"job {key!r}: its body is not args, kwargs and options")
        args, kwargs, options = document["args"], document["kwargs"], document["options"]
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise InvalidJob(f"job {key!r}: args must be a list and kwargs a mapping")
        if not isinstance(options, dict):
            raise InvalidJob(f"job {key!r}: options must be a mapping")
        return cls(key, name, tuple(args), kwargs, options, queue)


def peek_key(payload: bytes, prefix: bytes) -> str | None:
    """The job key of a tuple under ``prefix``, without decoding its body;
    ``None`` if it has none."""
    if not payload.startswith(prefix):
        return None
    head, sep, _ = payload[len(prefix) :].partition(_SEP)
    raw = _split_head(head)[1]
    try:
        return raw.decode() if sep and raw else None
    except UnicodeDecodeError:
        return None


def peek_task(payload: bytes, prefix: bytes) -> str | None:
    """The task name of a tuple under ``prefix``, without decoding its body."""
    parts = payload[len(prefix) :].split(_SEP, 2)
    if not payload.startswith(prefix) or len(parts) != 3:
        return None
    return parts[1].decode("ascii", "replace")
