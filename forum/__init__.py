"""Forum: a replicated tuple space run as a multi-machine work queue.

``import forum`` is the public face: the in-process node and its clients
(:mod:`forum.node`: ``ForumClient`` for one group, ``ClusterClient`` and
its ``ClusterMap`` for a cluster scaled out over replica groups), the
worker runtime and its Redis-backed Lens (:mod:`forum.coordinator`), the
task layer (:mod:`forum.tasks`: ``forum.App``), and the errors callers
catch, each the same object as in its home module. The ``forum`` command
lives here too (:mod:`forum.cli`).

Every part of Forum is under this one name (docs/layout.md), so a user's
``tasks.py`` or ``node.py`` shadows nothing. Which part may import which
(``tests/test_layers.py`` checks it)::

    forum              this face: the command, the wiring        uses all below
    forum.deploy       local clusters, the demo, its checker     uses coordinator, replication,
                                                                 node
    forum.dashboard    the web pages every node serves at /ui    uses tasks, coordinator,
                                                                 replication, node
    forum.tasks        named tasks, results, status, cron        uses coordinator, node
    forum.coordinator  the Lens and the worker runtime           uses node
    forum.replication  gossip between nodes                      uses node
    forum.node         one node: the Strand, the API, the HTTP   uses none of them

Every name here is imported when first used (:func:`__getattr__`): every
``forum`` command imports this package, and ``forum serve`` must run without
Redis, ``forum take`` without replication, and a program that imports only
the client (:mod:`forum.node.client`) loads no server.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from forum.coordinator import (
        AlreadyClaimed,
        AlreadyDone,
        AttemptsSpent,
        Backoff,
        ClaimLost,
        GiveUp,
        Job,
        Lens,
        LensError,
        LensStateLost,
        LensUnavailable,
        NotDue,
        RetryAfter,
        Worker,
    )
    from forum.node.client.cluster import ClusterClient
    from forum.node.client.remote import ForumClient
    from forum.node.cluster.map import ClusterMap
    from forum.node.core.errors import (
        ClientError,
        ClusterMapError,
        CopiesShort,
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
        TooFewCopies,
        TooManyCopies,
        Unauthorized,
    )
    from forum.node.core.space import Pattern
    from forum.node.space.forum import Forum
    from forum.node.storage.strand import Strand, StrandConfig
    from forum.replication import ReplicationError
    from forum.tasks import (
        App,
        Context,
        InvalidJob,
        JobCancelled,
        JobCounts,
        JobExpired,
        JobFailed,
        JobHandle,
        JobInfo,
        JobNotFound,
        JobState,
        JobStatus,
        JsonSerializer,
        Middleware,
        MsgpackSerializer,
        ResultTimeout,
        SearchPage,
        Signature,
        SoftTimeout,
        StartupFailed,
        TaskError,
        UnknownTask,
        WorkflowHandle,
        WorkflowStatus,
        chain,
        group,
    )

__all__ = [
    "AlreadyClaimed",
    "AlreadyDone",
    "App",
    "AttemptsSpent",
    "Backoff",
    "ClaimLost",
    "ClientError",
    "ClusterClient",
    "ClusterMap",
    "ClusterMapError",
    "Context",
    "CopiesShort",
    "DataDirLocked",
    "Forum",
    "ForumClient",
    "ForumError",
    "GiveUp",
    "InvalidJob",
    "Job",
    "JobCancelled",
    "JobCounts",
    "JobExpired",
    "JobFailed",
    "JobHandle",
    "JobInfo",
    "JobNotFound",
    "JobState",
    "JobStatus",
    "JsonSerializer",
    "Lens",
    "LensError",
    "LensStateLost",
    "LensUnavailable",
    "LimitExceeded",
    "Middleware",
    "MsgpackSerializer",
    "NodeRejected",
    "NodeTimeout",
    "NodeUnavailable",
    "NotDue",
    "Pattern",
    "PayloadTooLarge",
    "RecordTooLarge",
    "ReplicationError",
    "ResultTimeout",
    "RetryAfter",
    "SearchPage",
    "SerializationError",
    "Signature",
    "SoftTimeout",
    "StartupFailed",
    "Strand",
    "StrandConfig",
    "StrandCorrupt",
    "StrandError",
    "TaskError",
    "Throttled",
    "TooFewCopies",
    "TooManyCopies",
    "Unauthorized",
    "UnknownTask",
    "Worker",
    "WorkflowHandle",
    "WorkflowStatus",
    "chain",
    "group",
]

# Installed, every part is under this folder. In a checkout the parts are in
# folders of their own (``node/forum/node``, docs/layout.md), which an
# editable install maps; a checkout run without installing it (a benchmark's
# baseline, ``PYTHONPATH=<tree>:<tree>/node:...``, bench/trees.py) has them
# found as portions of this package on the path instead.
__path__ = pkgutil.extend_path(__path__, __name__)

#: Each public name's home: the module that defines it, imported on first use.
_LAZY = {
    "forum.coordinator.errors": frozenset({
        "AlreadyClaimed", "AlreadyDone", "AttemptsSpent", "ClaimLost", "LensError",
        "LensStateLost", "LensUnavailable", "NotDue",
    }),
    "forum.coordinator.job": frozenset({"GiveUp", "Job", "RetryAfter"}),
    "forum.coordinator.lens": frozenset({"Lens"}),
    "forum.coordinator.worker": frozenset({"Worker"}),
    "forum.node.client.cluster": frozenset({"ClusterClient"}),
    "forum.node.client.remote": frozenset({"ForumClient"}),
    "forum.node.cluster.map": frozenset({"ClusterMap"}),
    "forum.node.core.backoff": frozenset({"Backoff"}),
    "forum.node.core.errors": frozenset({
        "ClientError", "ClusterMapError", "CopiesShort", "DataDirLocked", "ForumError",
        "LimitExceeded", "NodeRejected", "NodeTimeout", "NodeUnavailable", "PayloadTooLarge",
        "RecordTooLarge", "SerializationError", "StrandCorrupt", "StrandError", "Throttled",
        "TooFewCopies", "TooManyCopies", "Unauthorized",
    }),
    "forum.node.core.space": frozenset({"Pattern"}),
    "forum.node.space.forum": frozenset({"Forum"}),
    "forum.node.storage.strand": frozenset({"Strand", "StrandConfig"}),
    "forum.replication.errors": frozenset({"ReplicationError"}),
    "forum.tasks.app": frozenset({"App"}),
    "forum.tasks.bulk": frozenset({"Signature"}),
    "forum.tasks.canvas": frozenset({"WorkflowHandle", "WorkflowStatus", "chain", "group"}),
    "forum.tasks.context": frozenset({"Context"}),
    "forum.tasks.errors": frozenset({
        "InvalidJob", "JobCancelled", "JobExpired", "JobFailed", "JobNotFound", "ResultTimeout",
        "StartupFailed", "TaskError", "UnknownTask",
        "SoftTimeout",
    }),
    "forum.tasks.handle": frozenset({"JobHandle", "JobState", "JobStatus"}),
    "forum.tasks.hooks": frozenset({"JobInfo", "Middleware"}),
    "forum.tasks.search": frozenset({"JobCounts", "SearchPage"}),
    "forum.tasks.serializer": frozenset({"JsonSerializer", "MsgpackSerializer"}),
}  # fmt: skip


def __getattr__(name: str) -> object:
    for home, names in _LAZY.items():
        if name in names:
            value: object = getattr(importlib.import_module(home), name)
            globals()[name] = value  # once: later lookups do not come here
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
