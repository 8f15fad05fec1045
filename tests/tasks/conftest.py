"""The task layer's tests' fixtures: a real ``forum serve`` node and a real
``redis-server`` (from ``tests.fixtures``), an app against them, and its
workers run in this process (:func:`working`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from forum.coordinator import Lens, Worker
from forum.node.client.remote import ForumClient
from forum.tasks import App
from tests.coordinator.harness import running
from tests.fixtures.nodes import NodeProcess

__all__ = ["AppFactory", "make_app", "process_alive", "working"]

AppFactory = Callable[..., App]


@pytest.fixture
def make_app(forum_node: NodeProcess, redis_url: str) -> AppFactory:
    """Apps against the test's node and Redis (``App`` options as keywords)."""

    def make(**options: Any) -> App:
        options.setdefault("nodes", forum_node.url)
        options.setdefault("redis", redis_url)
        return App(**options)

    return make


@asynccontextmanager
async def working(
    app: App, *, url: str | None = None, count: int = 1, **options: Any
) -> AsyncIterator[list[Worker]]:
    """``count`` workers of ``app`` (``App.worker`` options as keywords; a
    short lease and take wait by default), each with its own node client and
    Lens, running for the body of the ``async with``, then stopped and drained."""
    options.setdefault("lease", 5.0)
    options.setdefault("take_wait", 0.2)
    options.setdefault("reaper_interval", 0.2)
    clients = [ForumClient(url or app.nodes[0]) for _ in range(count)]
    lenses = [Lens.from_url(app.redis, namespace=app.namespace) for _ in range(count)]
    try:
        workers = [
            app.worker(space, lens, **options) for space, lens in zip(clients, lenses, strict=True)
        ]
        async with running(*workers):
            yield workers
    finally:
        for client in clients:
            await client.aclose()
        for lens in lenses:
            await lens.aclose()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` still exists (a task's child, once killed and
    reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
