"""The apps' registry in a real Redis (forum.tasks.registry): what a worker
announces is what the dashboard reads back, and the app it opens from it
looks for jobs in the queues the app's tasks name."""

from __future__ import annotations

from forum.coordinator.lens import LensConfig
from forum.tasks import App, Context
from forum.tasks.queues import queues_of
from forum.tasks.registry import announce, known_apps


async def test_each_app_announced_is_read_back_with_its_tasks_and_queues(redis_url: str) -> None:
    config = LensConfig(url=redis_url)
    assert await known_apps(config) == []
    nu = App(redis=redis_url, prefix=b"nu/", dead_prefix=b"gone/")

    @nu.task(queue="emails")
    def send(ctx: Context) -> None: ...

    @nu.task()
    def other(ctx: Context) -> None: ...

    await announce(nu, config)
    await announce(App(redis=redis_url), config)  # an app with no tasks yet
    await announce(nu, config)  # again, at another worker's start: one entry still
    found = await known_apps(config)
    assert [(a.name, a.dead_prefix, dict(a.tasks)) for a in found] == [
        ("nu/", b"gone/", {"other": "default", "send": "emails"}),
        ("task/", b"dead/", {}),
    ]
    inspector = found[0].inspector(
        "http://127.0.0.1:1", redis_url, token=None, namespace="forum:lens"
    )
    assert (inspector.prefix, inspector.dead_prefix) == (b"nu/", b"gone/")
    assert queues_of(inspector) == ["default", "emails"]
