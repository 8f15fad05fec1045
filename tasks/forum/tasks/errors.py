"""Every error the ``forum.tasks`` package raises, under one root.

::

    TaskError                       anything the task layer raises on purpose
    ├── InvalidJob                  bad input to an enqueue: a bad key or task
    │                               name, arguments the serializer refuses
    │                               (also a ValueError); nothing was written
    ├── UnknownTask                 no task of that name in the app (also a LookupError)
    ├── JobNotFound                 nothing anywhere knows the key (also a LookupError)
    ├── JobFailed                   the job is dead: its attempts are spent, or
    │                               it gave up; ``.error`` and ``.traceback``
    ├── JobExpired                  its ``ttl`` ran out before a worker took it
    ├── JobCancelled                it was cancelled before it ran
    └── ResultTimeout               no outcome within ``result(timeout=)``
                                    (also a TimeoutError)

The errors of the layers below come through as they are: ``forum.node``'s
``NodeUnavailable`` once every node of an app refused an enqueue,
``forum.coordinator``'s ``LensUnavailable`` when Redis is down for a status.
Every message is one line, fit for a command's error output.
"""

from __future__ import annotations


class TaskError(Exception):
    """Root of every error raised by the task layer on purpose."""

    retriable: bool = False


class InvalidJob(TaskError, ValueError):
    """An enqueue's input is refused (see the message); nothing was written."""


class UnknownTask(TaskError, LookupError):
    """``name`` is not a task of the app."""

    def __init__(self, name: str, known: list[str] | None = None) -> None:
        hint = f" (known: {', '.join(sorted(known))})" if known else ""
        super().__init__(f"no task named {name!r}{hint}")
        self.name = name


class JobNotFound(TaskError, LookupError):
    """Neither the space nor the Lens knows ``key``: never enqueued, or its
    records and done marker have expired."""

    def __init__(self, key: str) -> None:
        super().__init__(f"no job with key {key!r}")
        self.key = key


class JobFailed(TaskError):
    """The job ``key`` is dead: ``error`` is its last error (one line),
    ``traceback`` the last attempt's formatted traceback (``None`` when
    unknown, as for a job whose workers died running it)."""

    def __init__(self, key: str, error: str, traceback: str | None = None) -> None:
        super().__init__(f"job {key!r} failed: {_first_line(error)}")
        self.key = key
        self.error = error
        self.traceback = traceback


class JobExpired(TaskError):
    """The job ``key`` expired (its ``ttl``) before any worker took it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"job {key!r} expired before it ran")
        self.key = key


class JobCancelled(TaskError):
    """The job ``key`` was cancelled before it ran."""

    def __init__(self, key: str) -> None:
        super().__init__(f"job {key!r} was cancelled")
        self.key = key


class StartupFailed(TaskError):
    """A startup hook of the app (``@app.on_startup``) failed: the worker
    stops before its first job. The hook's own error is the ``__cause__``."""


class ResultTimeout(TaskError, TimeoutError):
    """``result(timeout=)`` ran out before the job ``key`` had an outcome;
    ``state`` is what the job was last seen doing."""

    retriable = True

    def __init__(self, key: str, timeout: float, state: str) -> None:
        super().__init__(f"job {key!r} has no result after {timeout:g}s (it is {state})")
        self.key = key
        self.timeout = timeout
        self.state = state


def one_line(exc: BaseException) -> str:
    """``TypeName: message``, on one line (a record's ``error``, a log line)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "(no error text)"
