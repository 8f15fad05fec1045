"""``import forum``: the public face, exactly these names, each the very object
of its home package."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import forum

#: Every name ``forum`` exports, and the module it comes from.
HOMES = {
    "AlreadyClaimed": "forum.coordinator.errors",
    "AlreadyDone": "forum.coordinator.errors",
    "App": "forum.tasks.app",
    "AttemptsSpent": "forum.coordinator.errors",
    "Backoff": "forum.node.core.backoff",
    "ClaimLost": "forum.coordinator.errors",
    "ClientError": "forum.node.core.errors",
    "ClusterClient": "forum.node.client.cluster",
    "ClusterMap": "forum.node.cluster.map",
    "ClusterMapError": "forum.node.core.errors",
    "Context": "forum.tasks.context",
    "CopiesShort": "forum.node.core.errors",
    "DataDirLocked": "forum.node.core.errors",
    "Forum": "forum.node.space.forum",
    "ForumClient": "forum.node.client.remote",
    "ForumError": "forum.node.core.errors",
    "GiveUp": "forum.coordinator.job",
    "InvalidJob": "forum.tasks.errors",
    "Job": "forum.coordinator.job",
    "JobCancelled": "forum.tasks.errors",
    "JobCounts": "forum.tasks.search",
    "JobExpired": "forum.tasks.errors",
    "JobFailed": "forum.tasks.errors",
    "JobHandle": "forum.tasks.handle",
    "JobInfo": "forum.tasks.hooks",
    "JobNotFound": "forum.tasks.errors",
    "JobState": "forum.tasks.handle",
    "JobStatus": "forum.tasks.handle",
    "JsonSerializer": "forum.tasks.serializer",
    "Lens": "forum.coordinator.lens",
    "LensError": "forum.coordinator.errors",
    "LensStateLost": "forum.coordinator.errors",
    "LensUnavailable": "forum.coordinator.errors",
    "LimitExceeded": "forum.node.core.errors",
    "Middleware": "forum.tasks.hooks",
    "MsgpackSerializer": "forum.tasks.serializer",
    "NodeRejected": "forum.node.core.errors",
    "NotDue": "forum.coordinator.errors",
    "NodeTimeout": "forum.node.core.errors",
    "NodeUnavailable": "forum.node.core.errors",
    "Pattern": "forum.node.core.space",
    "PayloadTooLarge": "forum.node.core.errors",
    "RecordTooLarge": "forum.node.core.errors",
    "ReplicationError": "forum.replication.errors",
    "ResultTimeout": "forum.tasks.errors",
    "SearchPage": "forum.tasks.search",
    "StartupFailed": "forum.tasks.errors",
    "RetryAfter": "forum.coordinator.job",
    "SerializationError": "forum.node.core.errors",
    "SoftTimeout": "forum.tasks.errors",
    "Strand": "forum.node.storage.strand",
    "StrandConfig": "forum.node.storage.strand",
    "StrandCorrupt": "forum.node.core.errors",
    "StrandError": "forum.node.core.errors",
    "TaskError": "forum.tasks.errors",
    "Throttled": "forum.node.core.errors",
    "TooFewCopies": "forum.node.core.errors",
    "TooManyCopies": "forum.node.core.errors",
    "Unauthorized": "forum.node.core.errors",
    "UnknownTask": "forum.tasks.errors",
    "Worker": "forum.coordinator.worker",
    "WorkflowHandle": "forum.tasks.canvas",
    "WorkflowStatus": "forum.tasks.canvas",
    "chain": "forum.tasks.canvas",
    "group": "forum.tasks.canvas",
    "Signature": "forum.tasks.bulk",
}


def test_all_is_exactly_the_public_names_sorted() -> None:
    assert forum.__all__ == sorted(HOMES)


def test_each_name_is_the_object_of_its_home_module() -> None:
    for name, home in HOMES.items():
        assert getattr(forum, name) is getattr(importlib.import_module(home), name), name


def test_star_import_gives_exactly_all() -> None:
    names: dict[str, object] = {}
    exec("from forum import *", names)
    assert sorted(n for n in names if n != "__builtins__") == forum.__all__


def test_importing_forum_loads_neither_redis_nor_replication() -> None:
    """The ``forum`` command imports this package: ``forum serve`` must not load
    Redis, ``forum take`` neither Redis nor replication (nor the task layer);
    their names load on use."""
    watched = "('redis', 'forum.coordinator', 'forum.replication', 'forum.tasks')"
    loaded = f"print(sorted(m for m in {watched} if m in sys.modules))\n"
    probe = (
        "import sys, forum\n"
        + loaded
        + "forum.Worker, forum.ReplicationError\n"
        + loaded
        + "forum.App\n"
        + loaded
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == [
        "[]",
        "['forum.coordinator', 'forum.replication', 'redis']",
        "['forum.coordinator', 'forum.replication', 'forum.tasks', 'redis']",
    ]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'forum' has no attribute 'Nope'"):
        forum.Nope  # type: ignore[attr-defined]  # noqa: B018
