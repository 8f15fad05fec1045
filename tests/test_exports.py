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
    "AlreadyClaimed": "coordinator.errors",
    "AlreadyDone": "coordinator.errors",
    "App": "tasks.app",
    "Backoff": "node.backoff",
    "ClaimLost": "coordinator.errors",
    "ClientError": "node.errors",
    "Context": "tasks.context",
    "DataDirLocked": "node.errors",
    "Forum": "node.forum",
    "ForumClient": "node.client",
    "ForumError": "node.errors",
    "InvalidJob": "tasks.errors",
    "Job": "coordinator.job",
    "JobCancelled": "tasks.errors",
    "JobExpired": "tasks.errors",
    "JobFailed": "tasks.errors",
    "JobHandle": "tasks.handle",
    "JobNotFound": "tasks.errors",
    "JobState": "tasks.handle",
    "JobStatus": "tasks.handle",
    "JsonSerializer": "tasks.serializer",
    "Lens": "coordinator.lens",
    "LensError": "coordinator.errors",
    "LensStateLost": "coordinator.errors",
    "LensUnavailable": "coordinator.errors",
    "LimitExceeded": "node.errors",
    "MsgpackSerializer": "tasks.serializer",
    "NodeRejected": "node.errors",
    "NodeTimeout": "node.errors",
    "NodeUnavailable": "node.errors",
    "Pattern": "node.space",
    "PayloadTooLarge": "node.errors",
    "RecordTooLarge": "node.errors",
    "ReplicationError": "replication.errors",
    "ResultTimeout": "tasks.errors",
    "SerializationError": "node.errors",
    "Strand": "node.strand",
    "StrandConfig": "node.strand",
    "StrandCorrupt": "node.errors",
    "StrandError": "node.errors",
    "TaskError": "tasks.errors",
    "Throttled": "node.errors",
    "Unauthorized": "node.errors",
    "UnknownTask": "tasks.errors",
    "Worker": "coordinator.worker",
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
    watched = "('redis', 'coordinator', 'replication', 'tasks')"
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
        "['coordinator', 'redis', 'replication']",
        "['coordinator', 'redis', 'replication', 'tasks']",
    ]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'forum' has no attribute 'Nope'"):
        forum.Nope  # type: ignore[attr-defined]  # noqa: B018
