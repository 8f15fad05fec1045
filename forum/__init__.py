"""Forum: a replicated tuple space run as a multi-machine work queue.

``import forum`` is the public face: the in-process node and its client
(:mod:`node`), the worker runtime and its Redis-backed Lens
(:mod:`coordinator`), the task layer (:mod:`tasks`: ``forum.App``), and the
errors callers catch, each the same object as in its home package. The
``forum`` command lives here too (:mod:`forum.cli`).

Which package may import which (``tests/test_layers.py`` checks it)::

    forum        this face: the command, the wiring        uses all below
    deploy       local clusters, the demo, its checker     uses coordinator, replication, node
    dashboard    the web pages every node serves at /ui    uses tasks, coordinator, replication,
                                                           node
    tasks        named tasks, results, status, cron        uses coordinator, node
    coordinator  the Lens and the worker runtime           uses node
    replication  gossip between nodes                      uses node
    node         one node: the Strand, the API, the HTTP   uses none of them

The names of ``coordinator``, ``tasks`` and ``replication`` are imported
when first used (:func:`__getattr__`): every ``forum`` command imports this
package, and ``forum serve`` must run without Redis, ``forum take`` without
replication.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from node import Forum, ForumClient, Pattern, Strand, StrandConfig
from node.errors import (
    ClientError,
    DataDirLocked,
    ForumError,
    LimitExceeded,
    NodeRejected,
    NodeTimeout,
    NodeUnavailable,
    PayloadTooLarge,
    RecordTooLarge,
    SerializationError,
    StrandCorrupt,
    StrandError,
    Throttled,
    Unauthorized,
)

if TYPE_CHECKING:
    from coordinator import (
        AlreadyClaimed,
        AlreadyDone,
        Backoff,
        ClaimLost,
        Job,
        Lens,
        LensError,
        LensStateLost,
        LensUnavailable,
        Worker,
    )
    from replication import ReplicationError
    from tasks import (
        App,
        Context,
        InvalidJob,
        JobCancelled,
        JobExpired,
        JobFailed,
        JobHandle,
        JobNotFound,
        JobState,
        JobStatus,
        JsonSerializer,
        MsgpackSerializer,
        ResultTimeout,
        TaskError,
        UnknownTask,
    )

__all__ = [
    "AlreadyClaimed",
    "AlreadyDone",
    "App",
    "Backoff",
    "ClaimLost",
    "ClientError",
    "Context",
    "DataDirLocked",
    "Forum",
    "ForumClient",
    "ForumError",
    "InvalidJob",
    "Job",
    "JobCancelled",
    "JobExpired",
    "JobFailed",
    "JobHandle",
    "JobNotFound",
    "JobState",
    "JobStatus",
    "JsonSerializer",
    "Lens",
    "LensError",
    "LensStateLost",
    "LensUnavailable",
    "LimitExceeded",
    "MsgpackSerializer",
    "NodeRejected",
    "NodeTimeout",
    "NodeUnavailable",
    "Pattern",
    "PayloadTooLarge",
    "RecordTooLarge",
    "ReplicationError",
    "ResultTimeout",
    "SerializationError",
    "Strand",
    "StrandConfig",
    "StrandCorrupt",
    "StrandError",
    "TaskError",
    "Throttled",
    "Unauthorized",
    "UnknownTask",
    "Worker",
]

#: The names imported on first use, by home package.
_LAZY = {
    "coordinator": frozenset(
        {
            "AlreadyClaimed",
            "AlreadyDone",
            "Backoff",
            "ClaimLost",
            "Job",
            "Lens",
            "LensError",
            "LensStateLost",
            "LensUnavailable",
            "Worker",
        }
    ),
    "replication": frozenset({"ReplicationError"}),
    "tasks": frozenset(
        {
            "App",
            "Context",
            "InvalidJob",
            "JobCancelled",
            "JobExpired",
            "JobFailed",
            "JobHandle",
            "JobNotFound",
            "JobState",
            "JobStatus",
            "JsonSerializer",
            "MsgpackSerializer",
            "ResultTimeout",
            "TaskError",
            "UnknownTask",
        }
    ),
}


def __getattr__(name: str) -> object:
    for home, names in _LAZY.items():
        if name in names:
            value: object = getattr(importlib.import_module(home), name)
            globals()[name] = value  # once: later lookups do not come here
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
