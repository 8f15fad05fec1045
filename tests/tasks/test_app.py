"""Defining tasks, enqueueing and results, against a real ``forum serve``
node and a real ``redis-server``, with workers run in this process."""

from __future__ import annotations

import asyncio
import threading

import pytest

from forum.node.core.space import Pattern
from forum.tasks import (
    App,
    Context,
    InvalidJob,
    JobFailed,
    JobState,
    MsgpackSerializer,
    UnknownTask,
)
from forum.tasks.message import Message
from tests.coordinator.full_redis import fill, make_room
from tests.fixtures.nodes import NodeProcess, eventually, free_port
from tests.fixtures.redis_server import RedisServer
from tests.tasks.conftest import AppFactory, working


async def test_sync_and_async_tasks_run_and_their_results_come_back(make_app: AppFactory) -> None:
    app = make_app()
    threads: list[str] = []

    @app.task
    async def add(ctx: Context, a: int, b: int) -> int:
        return a + b

    @app.task(name="mul")
    def multiply(ctx: Context, a: int, b: int) -> int:
        threads.append(threading.current_thread().name)
        ctx.verify_sync()  # from the task's thread
        ctx.progress({"multiplying": [a, b]})
        return a * b

    async with app:
        added = await app.enqueue("add", 1, b=2)
        multiplied = await multiply.enqueue(3, 4)
        async with working(app):
            assert await added.result(timeout=10) == 3
            assert await multiplied.result(timeout=10) == 12
            assert (await multiplied.status()).progress == {"multiplying": [3, 4]}
    assert threads and all(name.startswith("task") for name in threads)  # the pool's
    assert add.function is not None and add.is_async and not multiply.is_async


@pytest.mark.parametrize("serializer", [None, MsgpackSerializer()], ids=["json", "msgpack"])
async def test_arguments_and_results_round_trip(
    make_app: AppFactory, serializer: MsgpackSerializer | None
) -> None:
    app = make_app(serializer=serializer)
    seen = []

    @app.task
    async def echo(ctx: Context, *args: object, **kwargs: object) -> object:
        seen.append((args, kwargs))
        return {"args": list(args), "kwargs": kwargs}

    values = (1, -2.5, "héllo", [1, [2, None]], {"n": {"m": True}})
    async with app:
        handle = await echo.enqueue(*values, flag=False, text="x")
        async with working(app):
            result = await handle.result(timeout=10)
    assert result == {"args": list(values), "kwargs": {"flag": False, "text": "x"}}
    assert seen == [(values, {"flag": False, "text": "x"})]


async def test_msgpack_carries_bytes(make_app: AppFactory) -> None:
    app = make_app(serializer=MsgpackSerializer())

    @app.task
    def reverse(ctx: Context, data: bytes) -> bytes:
        return data[::-1]

    async with app:
        handle = await reverse.enqueue(b"\x00\x01\xff")
        async with working(app):
            assert await handle.result(timeout=10) == b"\xff\x01\x00"


async def test_the_context_names_the_job(make_app: AppFactory) -> None:
    app = make_app()
    contexts: list[Context] = []

    @app.task
    async def look(ctx: Context) -> None:
        await ctx.verify()
        contexts.append(ctx)

    async with app:
        handle = await look.enqueue(_key="look-1")
        async with working(app):
            assert await handle.result(timeout=10) is None
        (ctx,) = contexts
        assert (ctx.key, ctx.task, ctx.attempt) == ("look-1", "look", 1)
        assert ctx.token > 0 and ":" in ctx.job_id
        assert (await handle.status()).token == ctx.token


async def test_the_same_key_enqueued_twice_is_one_job_run_once(make_app: AppFactory) -> None:
    app = make_app()
    runs: list[int] = []

    @app.task
    async def charge(ctx: Context, order: int) -> int:
        runs.append(order)
        return order

    async with app:
        first = await charge.enqueue(7, _key="order-7")
        second = await charge.enqueue(7, _key="order-7")
        same_call = [await charge.enqueue(8), await charge.enqueue(8)]  # the default key
        assert first == second and same_call[0] == same_call[1]
        assert await app.space.count(Pattern(app.prefix)) == 2
        async with working(app):
            assert await first.result(timeout=10) == 7
            assert await same_call[0].result(timeout=10) == 8
            # Enqueued again after it ran: the Lens's done marker turns the copy away.
            again = await charge.enqueue(7, _key="order-7")
            assert (await again.result(timeout=10)) == 7
            await eventually(lambda: _none_left(app), what="the copy acked away")
    assert sorted(runs) == [7, 8]


async def test_bad_input_is_one_line_and_writes_nothing(make_app: AppFactory) -> None:
    app = make_app()

    @app.task
    async def job(ctx: Context, value: object) -> None:
        return None

    async with app:
        cases = [
            (app.enqueue("nope", 1), UnknownTask, "no task named 'nope'"),
            (job.enqueue(1, _key=""), InvalidJob, "non-empty"),
            (job.enqueue(1, _key="a\nb"), InvalidJob, "newline"),
            (job.enqueue(object()), InvalidJob, "cannot be encoded by json"),
            (job.enqueue(1, _retries=-1), InvalidJob, "_retries"),
            (job.enqueue(1, _timeout=0), InvalidJob, "_timeout"),
            (job.enqueue(1, _delay=-1), InvalidJob, "delay must be >= 0"),
            (job.enqueue(1, _priority=1000), InvalidJob, "priority must be -128 to 127"),
            (job.enqueue(1, _ttl=float("nan")), InvalidJob, "ttl is a number"),
            (job.enqueue(1, _delay=1, _not_before=2e9), InvalidJob, "not both"),
        ]
        for call, error, text in cases:
            with pytest.raises(error, match=text) as raised:
                await call
            assert "\n" not in str(raised.value)
        assert await app.space.count(Pattern(b"")) == 0
        with pytest.raises(InvalidJob, match="non-empty"):
            app.job("")


def test_a_task_name_taken_or_bad_is_refused() -> None:
    app = App()

    @app.task
    def one(ctx: Context) -> None: ...

    with pytest.raises(InvalidJob, match="already"):
        app.task(name="one")(lambda ctx: None)
    with pytest.raises(InvalidJob, match="not a task name"):
        app.task(name="has space")(lambda ctx: None)
    with pytest.raises(InvalidJob, match="retries"):
        app.task(retries=-1)
    with pytest.raises(ValueError, match="overlap"):
        App(prefix=b"dead/x")


async def test_an_app_not_opened_says_so(make_app: AppFactory) -> None:
    app = make_app()

    @app.task
    def one(ctx: Context) -> None: ...

    with pytest.raises(RuntimeError, match="async with app"):
        await one.enqueue()


def test_enqueue_sync_writes_from_sync_code(make_app: AppFactory) -> None:
    app = make_app()

    @app.task
    def one(ctx: Context, n: int) -> int:
        return n

    handle = one.enqueue_sync(5, _key="sync-5")
    assert handle.key == "sync-5"

    async def check() -> None:
        async with app:
            assert (await handle.status()).state is JobState.QUEUED
            with pytest.raises(RuntimeError, match="inside an event loop"):
                one.enqueue_sync(6)

    asyncio.run(check())


async def test_a_job_of_a_task_the_app_lacks_is_dead_with_the_reason(
    make_app: AppFactory,
) -> None:
    app = make_app()

    @app.task
    async def known(ctx: Context) -> None: ...

    async with app:
        # Another producer's job: a task this app's workers do not have.
        payload = Message("other-1", "unknown_task").encode(app.prefix, app.serializer)
        await app.space.write(payload, key="other-1")
        handle = app.job("other-1")
        async with working(app):
            with pytest.raises(JobFailed, match="no task named 'unknown_task'"):
                await handle.result(timeout=10)


async def test_an_enqueue_is_not_failed_by_a_redis_outage(
    forum_node: NodeProcess, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(forum_node.url, f"redis://127.0.0.1:{free_port()}/0")  # nothing listens

    @app.task
    async def job(ctx: Context, n: int) -> None: ...

    async with app:
        await job.enqueue(1)
        await job.enqueue(2)
        assert await app.space.count(Pattern(app.prefix)) == 2
    warnings = [r for r in caplog.records if "Redis has no record" in r.getMessage()]
    assert len(warnings) == 1  # once per outage, not per enqueue


async def test_run_worker_runs_until_told_to_stop(make_app: AppFactory) -> None:
    app = make_app()

    @app.task
    async def one(ctx: Context) -> str:
        return "ran"

    stop = asyncio.Event()
    async with app:
        handle = await one.enqueue()
        async with asyncio.TaskGroup() as group:
            running = group.create_task(app.run_worker(stop=stop, lease=5.0, take_wait=0.2))
            assert await handle.result(timeout=10) == "ran"
            stop.set()
        assert running.result().stats().done == 1


async def test_run_worker_waits_out_a_full_redis(
    make_app: AppFactory, private_redis: RedisServer
) -> None:
    """A full Redis at start is an outage, not a mistake: ``run_worker`` starts,
    claims nothing while Redis refuses writes, and runs the job once there is
    room (as ``forum worker`` does; it raised ``LensUnavailable`` at once)."""
    app = make_app(redis=private_redis.url)

    @app.task
    async def one(ctx: Context) -> str:
        return "ran"

    stop = asyncio.Event()
    async with app:
        handle = await one.enqueue()
        fill(private_redis.port)
        async with asyncio.TaskGroup() as group:
            running = group.create_task(app.run_worker(stop=stop, lease=5.0, take_wait=0.2))
            await asyncio.sleep(0.5)  # what must not happen: the worker giving up
            assert not running.done()
            make_room(private_redis.port)
            assert await handle.result(timeout=20) == "ran"
            stop.set()
        assert running.result().stats().done == 1


async def _none_left(app: App) -> bool:
    return await app.space.count(Pattern(app.prefix)) == 0
