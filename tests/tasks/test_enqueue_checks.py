"""An enqueue refuses arguments its task cannot take, and a task's enqueue
goes to the copy of its app (``app.using``) opened around it: issue 31's
rough edges, against a real node and Redis."""

from __future__ import annotations

import asyncio

import pytest

from forum.node.core.space import Pattern
from forum.tasks import App, Context, InvalidJob
from tests.fixtures.nodes import NodeProcess, free_port
from tests.tasks.conftest import AppFactory, working


async def test_arguments_the_task_cannot_take_are_refused_and_nothing_is_written(
    make_app: AppFactory,
) -> None:
    """``add.enqueue(1, c=2)`` used to be written, then fail on the worker
    ``retries + 1`` times with the TypeError."""
    app = make_app()

    @app.task
    async def add(ctx: Context, a: int, b: int = 0) -> int:
        return a + b

    @app.task
    def anything(ctx: Context, *args: int, **kwargs: int) -> int:
        return len(args) + len(kwargs)

    async with app:
        cases = [
            (add.enqueue(1, c=2), "unexpected keyword argument 'c'"),
            (add.enqueue(), "missing a required argument: 'a'"),
            (add.enqueue(1, 2, 3), "too many positional arguments"),
            (add.enqueue(1, a=1), "multiple values for argument 'a'"),
            (app.enqueue("add", 1, c=2), "unexpected keyword argument 'c'"),
        ]
        for call, text in cases:
            with pytest.raises(InvalidJob, match=text) as raised:
                await call
            assert str(raised.value).startswith("task 'add': ")
            assert "\n" not in str(raised.value)
        assert await app.space.count(Pattern(b"")) == 0
        # What the signature takes is taken, options and all.
        assert (await add.enqueue(1, b=2, _key="ok")).key == "ok"
        await anything.enqueue(1, 2, x=3)
        assert await app.space.count(Pattern(b"")) == 2


def test_enqueue_sync_checks_the_arguments_too(make_app: AppFactory) -> None:
    app = make_app()

    @app.task
    def one(ctx: Context, n: int) -> int:
        return n

    with pytest.raises(InvalidJob, match="unexpected keyword argument 'm'"):
        one.enqueue_sync(5, m=1)

    async def count() -> int:
        async with app:
            return await app.space.count(Pattern(b""))

    assert asyncio.run(count()) == 0


def test_a_periodic_task_that_needs_arguments_is_refused_where_it_is_defined() -> None:
    app = App()
    with pytest.raises(InvalidJob, match="missing a required argument: 'n'"):

        @app.cron(every=60)
        async def tick(ctx: Context, n: int) -> None: ...

    assert app.tasks == {} and app.periodic == []


async def test_a_task_enqueues_through_the_copy_of_its_app_opened_around_it(
    forum_node: NodeProcess, redis_url: str
) -> None:
    """``app.using(...)`` is how the CLI and a test point an app somewhere
    else; ``task.enqueue`` used to say "the app is not open" inside it."""
    app = App(nodes=f"http://127.0.0.1:{free_port()}", redis="redis://127.0.0.1:1/0")

    @app.task
    async def double(ctx: Context, n: int) -> int:
        return 2 * n

    copy = app.using(nodes=forum_node.url, redis=redis_url)
    async with copy, working(copy):
        handle = await double.enqueue(21)
        assert await handle.result(timeout=30) == 42
        # A task made inside the block sees the open copy too.
        assert await asyncio.create_task(double.enqueue(4)) is not None
    with pytest.raises(RuntimeError, match="async with app"):
        await double.enqueue(1)  # the copy is closed: nothing open around the call
