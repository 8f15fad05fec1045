"""One timed run of N no-op jobs through one job queue, the same for every system.

This is the part of bench/peers_bench.py (and bench/worker_bench.py) that runs
inside a system's own virtualenv: the peers pin redis-py in ways that exclude
each other (scripts/bench-env), so peers_bench runs each system as a child
process of its venv's Python::

    python bench/noop_jobs.py SYSTEM --redis-url URL --jobs N --concurrency C
        [--forum-url URL] [--profile FILE]

and reads one JSON line from it: :func:`timings`. ``--profile FILE`` runs
it under cProfile (connecting to stopping, this process only) and writes
the stats to FILE (``python -m pstats FILE``). Only the standard library
is imported at the top; each system's imports are inside its runner, as only
that system is installed where it runs.

What is timed, the same for every system, in one process:

1. **enqueue**: ``C`` concurrent producers, each awaiting one enqueue call at
   a time (the system's own one-job call), until ``N`` jobs are enqueued;
2. **process**: then one worker of that system, in this process, with ``C``
   slots, runs the no-op handler until its own count of completed jobs
   reaches ``N``.

The clock runs from the first enqueue to that N-th completion (``seconds``;
``jobs_per_s`` = N / seconds), and each phase is reported too. Connecting,
starting the worker's background machinery that precedes its first job
(consumer groups), stopping it and checking that nothing is left are outside
the clock. Each system's count of completions is its own (the systems record
a completion in different orders, so the last job's final write may fall
just before or after the clock stops: one write in N):

* ``forum``: ``ForumClient.write`` against a ``forum serve`` → ``Worker``
  (coordinator/forum/coordinator/worker.py: reserve → Lens claim → handler → complete → ack),
  counted by ``WorkerStats.done`` (the Lens holds the done marker);
* ``forum-tasks``: the task layer on the same: ``App.enqueue("noop",
  _key=...)`` of an ``@app.task`` returning ``None`` (each job its own key,
  as the peers' job ids: the write carries it with the app's dedup window,
  and the Lens gets the job's ``enqueued`` record) → ``app.worker(...)``
  (a ``Worker`` whose handler decodes the job and runs the task: a ``None``
  result writes no record), counted as ``forum``'s;
* ``saq``: ``Queue.enqueue`` → ``saq.Worker``, counted in its
  ``after_process`` hook (after ``job.finish``);
* ``streaq``: ``task.enqueue()`` → ``streaq.Worker.run_async``, counted by its
  ``counters["completed"]``;
* ``taskiq``: ``task.kiq()`` on taskiq-redis's ``RedisStreamBroker`` (the
  acknowledging one: XREADGROUP + XACK) with ``RedisAsyncResultBackend`` →
  taskiq's ``Receiver`` with ``max_async_tasks=C``, counted by a
  ``post_save`` middleware (the result is stored; the XACK follows). The
  Receiver is given ``max_tasks_to_execute=N`` (what ``taskiq worker
  --max-tasks-per-child`` sets), so it stops fetching after the N-th
  delivery, waits for its running tasks (their XACKs) and returns by itself.
  It is not stopped through its finish event nor cancelled: either cancels
  its pending ``anext(broker.listen())``, and on Python 3.11 redis-py 8 can
  lose that cancellation (it sends every command under
  ``asyncio.wait_for(..., socket_timeout)``, 5 s by default since 8.0, and
  3.11's ``wait_for`` returns the result instead of raising when the cancel
  comes just as the send completes, CPython gh-86296, fixed in 3.12). The
  listen loop then goes on issuing ``XREADGROUP BLOCK 2000`` for ever, and
  the Receiver waits on it under a shielded cancel scope: the run never ends;
* ``arq``: ``enqueue_job`` → ``arq.Worker`` (burst mode, so it ends once the
  queue is empty) with ``max_jobs=C`` and ``poll_delay`` 0.01 s (its default
  0.5 s sleeps between polls: at one slot that is 2 jobs/s), counted by
  ``jobs_complete``.

Every other setting is the system's default. The Redis database in the URL
is the system's own; the caller flushes it before each run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import logging
import signal
import sys
import time
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forum.coordinator import Worker
    from forum.coordinator.spaces import WorkSpace
    from forum.node.core.space import Pattern

ROOT = Path(__file__).resolve().parents[1]
POLL = 0.002  # s between looks at a worker's count of completions
TAKE_WAIT = 0.05  # s: a Forum worker's take_wait (its long poll for work)


async def concurrently(ops: int, callers: int, op: Callable[[int], Awaitable[object]]) -> None:
    """Call ``op(0) .. op(ops - 1)`` from ``callers`` tasks, each awaiting its own."""
    counter = iter(range(ops))

    async def caller() -> None:
        for i in counter:
            await op(i)

    async with asyncio.TaskGroup() as tasks:
        for _ in range(callers):
            tasks.create_task(caller())


async def until(predicate: Callable[[], bool], timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the run did not finish")
        await asyncio.sleep(POLL)


def timings(jobs: int, started: float, enqueued: float, finished: float) -> dict[str, float]:
    return {
        "jobs": jobs,
        "seconds": finished - started,
        "jobs_per_s": jobs / (finished - started),
        "enqueue_per_s": jobs / (enqueued - started),
        "process_per_s": jobs / (finished - enqueued),
    }


class Clock:
    """The three instants of a run: first enqueue, last enqueue, N-th completion."""

    def __init__(self, jobs: int, concurrency: int) -> None:
        self.jobs = jobs
        self.concurrency = concurrency
        self.started = self.enqueued = 0.0

    async def enqueue(self, op: Callable[[int], Awaitable[object]]) -> None:
        self.started = time.perf_counter()
        await concurrently(self.jobs, self.concurrency, op)
        self.enqueued = time.perf_counter()

    async def until_done(self, done: Callable[[], int]) -> dict[str, float]:
        await until(lambda: done() >= self.jobs)
        return timings(self.jobs, self.started, self.enqueued, time.perf_counter())


# -- forum ------------------------------------------------------------------------------


async def forum_jobs(
    space: WorkSpace, lens_url: str, jobs: int, concurrency: int
) -> dict[str, float]:
    """N no-op jobs written to ``space`` and run by a ``Worker`` with the Lens at
    ``lens_url``: an in-process ``Forum`` (bench/worker_bench.py) or a
    ``ForumClient`` (bench/peers_bench.py)."""
    from forum.coordinator import Job, Lens, Worker
    from forum.node.core.space import Pattern

    pattern = Pattern(b"job/")

    async def noop(job: Job) -> None:
        return None

    async with Lens.from_url(lens_url) as lens:
        worker = Worker(space, lens, pattern, noop, concurrency=concurrency, take_wait=TAKE_WAIT)
        return await worked(
            "forum", worker, space, pattern, Clock(jobs, concurrency),
            lambda i: space.write(b"job/%d" % i),
        )  # fmt: skip


async def worked(
    system: str,
    worker: Worker,
    space: WorkSpace,
    pattern: Pattern,
    clock: Clock,
    enqueue: Callable[[int], Awaitable[object]],
) -> dict[str, float]:
    """The clock's run of ``worker`` (a ``coordinator.Worker`` over ``space``):
    enqueue, then run it until done, stop it; then check that it did every job
    and left none under ``pattern``."""
    await clock.enqueue(enqueue)
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(worker.run())
        result = await clock.until_done(lambda: worker.stats().done)
        worker.stop()
    if worker.stats().done != clock.jobs or await space.count(pattern):
        raise RuntimeError(f"{system} run incomplete: {worker.stats()}")
    return result


async def run_forum(args: argparse.Namespace) -> dict[str, float]:
    from forum.node.client.remote import ForumClient

    if args.forum_url is None:
        raise SystemExit("noop_jobs: forum needs --forum-url (a running forum serve)")
    async with ForumClient(args.forum_url) as client:
        return await forum_jobs(client, args.redis_url, args.jobs, args.concurrency)


async def run_forum_tasks(args: argparse.Namespace) -> dict[str, float]:
    """``forum``'s run through the task layer (the module docstring)."""
    from forum.node.core.space import Pattern
    from forum.tasks import App, Context

    if args.forum_url is None:
        raise SystemExit("noop_jobs: forum-tasks needs --forum-url (a running forum serve)")
    app = App(args.forum_url, args.redis_url)

    @app.task
    async def noop(ctx: Context) -> None:
        return None

    async with app:
        worker = app.worker(app.space, app.lens, concurrency=args.concurrency, take_wait=TAKE_WAIT)
        return await worked(
            "forum-tasks", worker, app.space, Pattern(app.prefix),
            Clock(args.jobs, args.concurrency), lambda i: app.enqueue("noop", _key=f"noop-{i}"),
        )  # fmt: skip


# -- the peers --------------------------------------------------------------------------


async def saq_noop(ctx: Any) -> None:
    return None  # (at module level: saq finds a function by its __qualname__)


async def run_saq(args: argparse.Namespace) -> dict[str, float]:
    from saq import Queue, Status
    from saq import Worker as SaqWorker

    clock = Clock(args.jobs, args.concurrency)
    done = 0

    async def counted(ctx: Any) -> None:
        nonlocal done
        if ctx["job"].status == Status.COMPLETE:  # (the hook runs after failures too)
            done += 1

    queue = Queue.from_url(args.redis_url)
    await queue.connect()
    try:
        await clock.enqueue(lambda i: queue.enqueue("saq_noop"))
        worker = SaqWorker(queue, [saq_noop], concurrency=args.concurrency, after_process=counted)
        running = asyncio.create_task(worker.start())
        result = await clock.until_done(lambda: done)
        await worker.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        info = await queue.info()
        if info["queued"] or info["active"]:
            raise RuntimeError(f"saq run incomplete: {info}")
    finally:
        await queue.disconnect()
    return result


async def run_streaq(args: argparse.Namespace) -> dict[str, float]:
    from streaq import Worker as StreaqWorker

    clock = Clock(args.jobs, args.concurrency)
    worker = StreaqWorker(
        redis_url=args.redis_url, concurrency=args.concurrency, handle_signals=False
    )

    @worker.task
    async def noop() -> None:
        return None

    async with worker:
        await clock.enqueue(lambda i: noop.enqueue())
    running = asyncio.create_task(worker.run_async())
    result = await clock.until_done(lambda: worker.counters["completed"])
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    if worker.counters["completed"] != args.jobs or worker.counters["failed"]:
        raise RuntimeError(f"streaq run incomplete: {dict(worker.counters)}")
    return result


async def run_taskiq(args: argparse.Namespace) -> dict[str, float]:
    from redis.asyncio import Redis
    from taskiq import TaskiqMiddleware
    from taskiq.receiver import Receiver
    from taskiq_redis import RedisAsyncResultBackend, RedisStreamBroker

    clock = Clock(args.jobs, args.concurrency)
    done = 0

    class Count(TaskiqMiddleware):
        def post_save(self, message: Any, result: Any) -> None:
            nonlocal done
            done += 1

    backend: Any = RedisAsyncResultBackend(args.redis_url)
    broker = RedisStreamBroker(args.redis_url).with_result_backend(backend)
    broker.add_middlewares(Count())

    @broker.task
    async def noop() -> None:
        return None

    await broker.startup()  # the consumer group, before the first job
    try:
        await clock.enqueue(lambda i: noop.kiq())
        # It ends itself after the N-th job (never set: the finish event; see
        # the module docstring for why it is neither set nor cancelled).
        receiver = Receiver(
            broker,
            max_async_tasks=args.concurrency,
            max_tasks_to_execute=args.jobs,
            run_startup=False,
        )
        running = asyncio.create_task(receiver.listen(asyncio.Event()))
        result = await clock.until_done(lambda: done)
        await running
        async with Redis(connection_pool=broker.connection_pool) as redis:
            pending = await redis.xpending(broker.queue_name, broker.consumer_group_name)
    finally:
        await broker.shutdown()
    if done != args.jobs or pending["pending"]:
        raise RuntimeError(f"taskiq run incomplete: {done} of {args.jobs}, {pending} unacked")
    return result


async def arq_noop(ctx: dict[str, Any]) -> None:
    return None


async def run_arq(args: argparse.Namespace) -> dict[str, float]:
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker as ArqWorker

    clock = Clock(args.jobs, args.concurrency)
    pool = await create_pool(RedisSettings.from_dsn(args.redis_url))
    try:
        await clock.enqueue(lambda i: pool.enqueue_job("arq_noop"))
        # Burst: once the queue is empty (after the clock has stopped), main()
        # returns by itself; cancelling it instead cuts finish_job short.
        worker = ArqWorker(
            functions=[arq_noop],
            redis_pool=pool,
            burst=True,
            max_jobs=args.concurrency,
            poll_delay=0.01,
            handle_signals=False,
            log_results=False,
        )
        running = asyncio.create_task(worker.main())
        result = await clock.until_done(lambda: worker.jobs_complete)
        await running
        await worker.close()
        if worker.jobs_complete != args.jobs or worker.jobs_failed:
            raise RuntimeError(f"arq run incomplete: {worker.jobs_complete} of {args.jobs}")
    finally:
        await pool.aclose()
    return result


RUNNERS: dict[str, Callable[[argparse.Namespace], Awaitable[dict[str, float]]]] = {
    "forum": run_forum,
    "forum-tasks": run_forum_tasks,
    "saq": run_saq,
    "streaq": run_streaq,
    "taskiq": run_taskiq,
    "arq": run_arq,
}


# -- a hang, shown -----------------------------------------------------------------------


def dump_tasks() -> None:
    """What every task and running async generator awaits, outermost first, to
    stderr: on SIGUSR1, which bench/peers_bench.py sends a run it is about to
    kill for overrunning. (An async generator driven by ``anext`` in a task of
    its own shows in that task as no frames: hence the generators.)"""
    for task in asyncio.all_tasks():
        print(f"noop_jobs: task {task!r}", file=sys.stderr)
        awaited(task.get_coro())
    for obj in gc.get_objects():
        if isinstance(obj, types.AsyncGeneratorType) and obj.ag_running:
            print(f"noop_jobs: running {obj!r}", file=sys.stderr)
            awaited(obj)
    sys.stderr.flush()


def awaited(link: Any) -> None:
    """The chain of frames from ``link`` (a coroutine or async generator) down
    through what each awaits."""
    while link is not None:
        frame = getattr(link, "cr_frame", None) or getattr(link, "ag_frame", None)
        if frame is not None:
            code = frame.f_code
            print(f"    {code.co_filename}:{frame.f_lineno} {code.co_name}", file=sys.stderr)
        link = getattr(link, "cr_await", None) or getattr(link, "ag_await", None)


async def run(system: str, args: argparse.Namespace) -> dict[str, float]:
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump_tasks)
    return await RUNNERS[system](args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", choices=sorted(RUNNERS))
    parser.add_argument("--redis-url", required=True, help="this system's Redis database")
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--forum-url", help="the forum serve to use (forum, forum-tasks)")
    parser.add_argument("--profile", type=Path, metavar="FILE", help="cProfile stats to FILE")
    args = parser.parse_args()
    if args.jobs < 1 or args.concurrency < 1:
        parser.error("--jobs and --concurrency must be at least 1")
    # The peers log every job at INFO; the Lens notes the fresh Redis (an epoch).
    logging.basicConfig(level=logging.ERROR)
    sys.path.insert(0, str(ROOT))
    if args.profile is None:
        print(json.dumps(asyncio.run(run(args.system, args))))
        return
    profile = cProfile.Profile()
    try:
        result = profile.runcall(asyncio.run, run(args.system, args))
    finally:
        profile.dump_stats(args.profile)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
