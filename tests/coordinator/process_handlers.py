"""Handlers that ``forum worker`` subprocesses run in the tests (via --handler)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator

from redis.asyncio import Redis

from examples.handlers.fenced_redis import FencedRedisStore, open_handler
from forum.coordinator import Handler, Job

#: A Redis list of "<key> <token> <owner>", one per handler start.
STARTED = "test:started"


@contextlib.asynccontextmanager
async def hang_after_start() -> AsyncIterator[Handler]:
    """Records that it started (in ``$FORUM_EXAMPLE_REDIS_URL``), then never returns."""
    async with Redis.from_url(os.environ["FORUM_EXAMPLE_REDIS_URL"]) as client:

        async def handle(job: Job) -> None:
            await client.rpush(STARTED, f"{job.key} {job.token}")
            await asyncio.Event().wait()

        yield handle


@contextlib.asynccontextmanager
async def kill_own_worker() -> AsyncIterator[Handler]:
    """Records that it started (``<key> <token> <attempt>``), then SIGKILLs
    its own worker process: a job that crashes whoever runs it."""
    async with Redis.from_url(os.environ["FORUM_EXAMPLE_REDIS_URL"]) as client:

        async def handle(job: Job) -> None:
            await client.rpush(STARTED, f"{job.key} {job.token} {job.attempt}")
            os.kill(os.getpid(), signal.SIGKILL)

        yield handle


@contextlib.asynccontextmanager
async def slow_fenced() -> AsyncIterator[Handler]:
    """The fenced Redis example, after a pause of ``$FORUM_TEST_DELAY`` seconds."""
    delay = float(os.environ.get("FORUM_TEST_DELAY", "0"))
    async with (
        Redis.from_url(os.environ["FORUM_EXAMPLE_REDIS_URL"]) as client,
        open_handler() as fenced,
    ):

        async def handle(job: Job) -> None:
            await client.rpush(STARTED, f"{job.key} {job.token}")
            await asyncio.sleep(delay)
            await fenced(job)

        yield handle


async def fail(job: Job) -> None:
    """Always fails: the job ends up dead-lettered."""
    raise RuntimeError(f"cannot do {job.payload!r}")


@contextlib.asynccontextmanager
async def stop_before_first_write() -> AsyncIterator[Handler]:
    """The fenced Redis example, except that the first run of a job named
    ``job/k`` SIGSTOPs the worker between ``verify()`` and the write: a stall
    (a GC pause, a VM freeze) at the worst moment. The test sends SIGCONT.
    Once per process, not per attempt: a job whose holder was lost comes
    back from the node's reservation at the same attempt."""
    stalled = False
    async with (
        Redis.from_url(os.environ["FORUM_EXAMPLE_REDIS_URL"]) as client,
        FencedRedisStore.from_url(os.environ["FORUM_EXAMPLE_REDIS_URL"]) as store,
    ):

        async def handle(job: Job) -> None:
            await client.rpush(STARTED, f"{job.key} {job.token}")
            await job.verify()
            nonlocal stalled
            if job.payload == b"job/k" and not stalled:
                stalled = True
                os.kill(os.getpid(), signal.SIGSTOP)
            await store.put(job.key, job.token, job.payload)

        yield handle


@contextlib.asynccontextmanager
async def always_fail() -> AsyncIterator[Handler]:
    """Pushes its attempt to ``runs:<key>`` (in ``$FORUM_EXAMPLE_REDIS_URL``),
    then fails: the attempts a worker's ``max_attempts`` allows, counted."""
    async with Redis.from_url(os.environ["FORUM_EXAMPLE_REDIS_URL"]) as client:

        async def handle(job: Job) -> None:
            await client.rpush(f"runs:{job.key}", job.attempt)
            raise RuntimeError("always")

        yield handle
