"""Bulk enqueue (``enqueue_many``) and waiting from sync code
(``result_sync``), against a real node and Redis, with real workers."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from forum.tasks import Context, InvalidJob
from forum.tasks.bulk import enqueue_many
from forum.tasks.enqueue import OneNode
from tests.fixtures.nodes import NodeProcess
from tests.tasks.conftest import AppFactory, working

JOBS = 500


async def _requests(node: NodeProcess, route: str) -> float:
    """The node's count of answered requests to ``route`` (POST, 201)."""
    async with aiohttp.ClientSession() as session, session.get(f"{node.url}/metrics") as answer:
        text = await answer.text()
    line = f'forum_http_requests_total{{method="POST",route="{route}",status="201"}} '
    found = re.search(re.escape(line) + r"([0-9.e+]+)", text)
    return float(found.group(1)) if found else 0.0


async def test_500_jobs_go_in_one_request_and_each_runs(
    make_app: AppFactory, forum_node: NodeProcess
) -> None:
    app = make_app()

    @app.task
    async def double(ctx: Context, n: int) -> int:
        return 2 * n

    async with app, ForumClient(forum_node.url, transport="http") as client:
        calls = [double.s(n) for n in range(JOBS)]
        records = app._connections().records
        handles = await enqueue_many(app, OneNode(client), records, calls)
        assert await _requests(forum_node, "/v1/tuples/batch") == 1
        assert await _requests(forum_node, "/v1/tuples") == 0
        assert await client.count(Pattern(app.prefix)) == JOBS
        # The same calls again, the app's own way (the stream): the same keys, deduplicated.
        again = await double.enqueue_many([(n,) for n in range(JOBS)])
        assert again == handles
        assert await client.count(Pattern(app.prefix)) == JOBS
        async with working(app, concurrency=8):
            # One wait at a time: 500 at once, each polling the job's status,
            # kept a loaded machine's Redis past its read timeout.
            results = [await h.result(timeout=60) for h in handles]
    assert results == [2 * n for n in range(JOBS)]


async def test_a_bad_job_writes_nothing_and_is_named_by_its_index(
    make_app: AppFactory, forum_node: NodeProcess
) -> None:
    app = make_app()

    @app.task
    async def one(ctx: Context, n: int) -> None: ...

    async with app:
        with pytest.raises(InvalidJob, match=r"job 3: args cannot be encoded"):
            await app.enqueue_many([one.s(0), one.s(1), one.s(2), one.s(object())])
        with pytest.raises(InvalidJob, match=r"job 1: no task named 'nope'"):
            await app.enqueue_many([one.s(0), one.s(0).__class__("nope")])
        assert await app.enqueue_many([]) == []
        with pytest.raises(InvalidJob, match=r"job 0: a call is a tuple"):
            await one.enqueue_many([5])  # type: ignore[list-item]
        async with ForumClient(forum_node.url) as client:
            assert await client.count(Pattern(app.prefix)) == 0


async def test_enqueue_many_gives_each_job_its_options(make_app: AppFactory) -> None:
    """Jobs with other write options go in a request of their own; each keeps its key."""
    app = make_app()

    @app.task
    async def echo(ctx: Context, n: int) -> int:
        return n

    async with app:
        handles = await app.enqueue_many(
            [echo.s(1, _key="first"), echo.s(2, _priority=5), echo.s(3, _delay=0.2)]
        )
        assert handles[0].key == "first"
        async with working(app):
            assert [await h.result(timeout=30) for h in handles] == [1, 2, 3]


async def test_result_sync_waits_from_a_thread(make_app: AppFactory) -> None:
    app = make_app()

    @app.task
    def square(ctx: Context, n: int) -> int:
        return n * n

    async with app:
        handle = await square.enqueue(7)
        with pytest.raises(RuntimeError, match=r"result_sync\(\) called inside an event loop"):
            handle.result_sync(timeout=1)
        async with working(app):
            assert await asyncio.to_thread(handle.result_sync, 30) == 49
            status = await asyncio.to_thread(handle.status_sync)
        assert status.state.value == "done" and status.result == 49
        # And the whole way from sync code: enqueue_many_sync, then result_sync.
        handles = await asyncio.to_thread(square.enqueue_many_sync, [(2,), (3,)])
        async with working(app):
            assert [await asyncio.to_thread(h.result_sync, 30) for h in handles] == [4, 9]
