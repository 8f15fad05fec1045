"""``import tasks``: exactly these names, sorted, each the object of its home module."""

from __future__ import annotations

import importlib

import pytest

from forum import tasks
from forum.tasks import App, Context, InvalidJob

HOMES = {
    "App": "forum.tasks.app",
    "Context": "forum.tasks.context",
    "InvalidJob": "forum.tasks.errors",
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
    "Middleware": "forum.tasks.hooks",
    "MsgpackSerializer": "forum.tasks.serializer",
    "ResultTimeout": "forum.tasks.errors",
    "SearchPage": "forum.tasks.search",
    "StartupFailed": "forum.tasks.errors",
    "Serializer": "forum.tasks.serializer",
    "SoftTimeout": "forum.tasks.errors",
    "Task": "forum.tasks.task",
    "TaskError": "forum.tasks.errors",
    "TaskOptions": "forum.tasks.task",
    "UnknownTask": "forum.tasks.errors",
    "Signature": "forum.tasks.bulk",
    "WorkflowHandle": "forum.tasks.canvas",
    "WorkflowStatus": "forum.tasks.canvas",
    "chain": "forum.tasks.canvas",
    "group": "forum.tasks.canvas",
}


def test_all_is_exactly_the_public_names_sorted() -> None:
    assert tasks.__all__ == sorted(HOMES)


def test_each_name_is_the_object_of_its_home_module() -> None:
    for name, home in HOMES.items():
        assert getattr(tasks, name) is getattr(importlib.import_module(home), name), name


def test_every_error_is_a_task_error() -> None:
    for name in HOMES:
        value = getattr(tasks, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, tasks.TaskError), name


def test_using_copies_an_app_with_other_connections() -> None:
    app = App("http://a:1", "redis://r:1/0", prefix=b"p/", token="t")

    @app.task
    def one(ctx: Context) -> None: ...

    @app.cron(every=60)
    def tick(ctx: Context) -> None: ...

    copy = app.using(nodes=["http://b:2", "http://c:3"], namespace="ns")
    assert copy.nodes == ("http://b:2", "http://c:3")
    assert (copy.redis, copy.prefix, copy.token, copy.namespace) == (
        "redis://r:1/0",
        b"p/",
        "t",
        "ns",
    )
    assert copy.tasks is app.tasks and copy.periodic is app.periodic
    with pytest.raises(ValueError, match="serializer"):
        App(serializer=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match="no tasks"):
        App().worker(None, None)  # type: ignore[arg-type]
