"""Queues (forum.tasks.queues): a task's jobs under its queue's prefix, a
worker serving some queues by weight (forum.coordinator.lanes), and
periodic tasks' slots ahead of a backlog. Real node, real Redis; the
workers that the claims are about are real ``forum worker`` processes,
which record each run into SQLite (``$QUEUES_TEST_DB``)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest

from forum.coordinator import Lane, Lanes
from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from forum.tasks import App, Context, InvalidJob, JobState
from forum.tasks.cron import Interval, slot_key
from forum.tasks.message import Message, job_heads, key_prefix, peek_key
from forum.tasks.queues import DEFAULT_QUEUE, parse_weights, queue_prefix, queues_of
from forum.tasks.serializer import JsonSerializer
from tests.coordinator.harness import WorkerProcess, worker_processes
from tests.fixtures.cli import assert_usage_error, run_main
from tests.fixtures.nodes import NodeProcess, eventually, free_port
from tests.tasks.conftest import AppFactory, working

MODULE = "tests.tasks.test_queues"


def _record(ctx: Context, queue: str) -> None:
    """One row per run: the job's key and the queue its task is in."""
    with contextlib.closing(
        sqlite3.connect(os.environ["QUEUES_TEST_DB"], timeout=30, isolation_level=None)
    ) as db:
        db.execute("CREATE TABLE IF NOT EXISTS runs (n INTEGER PRIMARY KEY, key TEXT, queue TEXT)")
        db.execute("INSERT INTO runs (key, queue) VALUES (?, ?)", (ctx.key, queue))


def runs(path: Path) -> list[tuple[str, str]]:
    """(key, queue) of each run, in the order they were recorded."""
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
        try:
            return [
                (str(k), str(q)) for k, q in db.execute("SELECT key, queue FROM runs ORDER BY n")
            ]
        except sqlite3.OperationalError:  # the table is not made yet
            return []


queued_app = App(prefix=b"queues-test/")


@queued_app.task(queue="emails")
def send(ctx: Context, n: int) -> None:
    _record(ctx, "emails")


@queued_app.task
def work(ctx: Context, n: int) -> None:
    _record(ctx, DEFAULT_QUEUE)


@queued_app.task(queue="emails", retries=0)
def bounce(ctx: Context) -> None:
    raise ValueError("no such mailbox")


#: A backlog of slow jobs, and a periodic task on the same (default) queue.
EVERY = 1.0
cron_app = App(prefix=b"queues-cron-test/")


@cron_app.task
def slow(ctx: Context, n: int) -> None:
    time.sleep(0.3)
    _record(ctx, DEFAULT_QUEUE)


@cron_app.cron(every=EVERY)
def tick(ctx: Context) -> None:
    _record(ctx, "cron")


def _worker(
    tmp_path: Path, name: str, app: str, node: NodeProcess, redis_url: str, *more: str
) -> WorkerProcess:
    return WorkerProcess(
        name, tmp_path / name,
        ["--app", f"{MODULE}:{app}", "--node", node.url, "--redis-url", redis_url,
         "--take-wait", "0.2", "--lease", "5", *more],
        {"QUEUES_TEST_DB": str(tmp_path / "runs.db")},
    )  # fmt: skip


# -- names, weights and bytes (no servers) -------------------------------------------


@pytest.mark.parametrize("bad", ["", "a/b", "a\nb", "x" * 65, "émails", "a:b", 7])
def test_a_bad_queue_is_refused_where_the_task_is_defined(bad: object) -> None:
    app = App()
    with pytest.raises(InvalidJob, match="not a queue name"):
        app.task(queue=bad)(lambda ctx: None)  # type: ignore[arg-type]
    assert app.tasks == {}


def test_weights_are_read_from_the_command_line_form() -> None:
    assert parse_weights("emails:3,default:1") == {"emails": 3, "default": 1}
    assert parse_weights("emails, default") == {"emails": 1, "default": 1}
    for bad, says in [
        ("emails:0", "whole number from 1"),
        ("emails:x", "whole number from 1"),
        ("emails:3,emails:1", "given twice"),
        ("a/b:1", "not a queue name"),
        ("", "not a queue name"),
    ]:
        with pytest.raises(InvalidJob, match=says):
            parse_weights(bad)


def test_a_job_is_written_under_its_queue_and_read_back() -> None:
    json = JsonSerializer()
    data = Message("k-1", "send", (1,), {}, {}, "emails").encode(b"task/", json)
    assert data.startswith(key_prefix(queue_prefix(b"task/", "emails"), "k-1"))
    assert Message.decode(data, b"task/", json).queue == "emails"
    assert peek_key(data, b"task/") == "k-1"


def test_a_job_written_before_queues_is_still_read() -> None:
    """Today's layout (no queue) decodes as the default queue; a status
    looks there last (job_heads)."""
    json = JsonSerializer()
    old = b'task/send:abc\nsend\n{"args":[1],"kwargs":{},"options":{}}'
    message = Message.decode(old, b"task/", json)
    assert (message.key, message.task, message.args, message.queue) == (
        "send:abc", "send", (1,), DEFAULT_QUEUE,
    )  # fmt: skip
    assert peek_key(old, b"task/") == "send:abc"
    assert job_heads(b"task/", "send:abc", ["emails"]) == [
        b"task/emails/send:abc\n",
        b"task/send:abc\n",
    ]


def test_lanes_are_ordered_about_by_weight() -> None:
    """The first lane of each order: about 3 of 4 draws for weights 3:1
    (seeded: the bound is loose enough for any seed, the seed keeps it still)."""
    seed = random.randrange(2**32)
    emails, default = Pattern(b"t/emails/"), Pattern(b"t/default/")
    lanes = Lanes([Lane(emails, 3), Lane(default, 1)], random.Random(seed))
    firsts = Counter(lanes.order()[0] for _ in range(4000))
    assert 0.70 < firsts[emails] / 4000 < 0.80, (seed, firsts)
    assert sorted(p.prefix for p in lanes.order()) == [b"t/default/", b"t/emails/"]
    assert Lanes.of(emails).single == emails  # one pattern: today's path


def test_queues_is_an_app_workers_flag_only(capsys: pytest.CaptureFixture[str]) -> None:
    where = ["--node", f"http://127.0.0.1:{free_port()}"]
    assert_usage_error(
        run_main(["worker", "--app", f"{MODULE}:queued_app", "--queues", "emails:0", *where],
                 capsys),
        "--queues", "whole number from 1",
    )  # fmt: skip
    assert_usage_error(
        run_main(["worker", "--handler", "m:h", "--prefix", "p/", "--queues", "emails", *where],
                 capsys),
        "--queues", "only with --app",
    )  # fmt: skip


# -- with a node and Redis -------------------------------------------------------------


async def test_a_bad_queue_at_enqueue_writes_nothing(make_app: AppFactory) -> None:
    app = make_app(prefix=b"q-bad/")

    @app.task
    def noop(ctx: Context) -> None: ...

    async with app:
        with pytest.raises(InvalidJob, match="not a queue name"):
            await app.enqueue("noop", _queue="no/slash")
        assert await app.space.count(Pattern(app.prefix)) == 0


async def test_a_job_written_before_queues_runs_and_is_found(make_app: AppFactory) -> None:
    """A tuple in today's layout (no queue), as a release before queues
    wrote it: a worker of every queue runs it, and its status finds it."""
    app = make_app(prefix=b"q-old/")
    ran: list[int] = []

    @app.task
    async def old(ctx: Context, n: int) -> int:
        ran.append(n)
        return n

    payload = b'q-old/old-1\nold\n{"args":[5],"kwargs":{},"options":{}}'
    async with app, ForumClient(app.nodes[0]) as space:
        await space.write(payload, key="old-1")
        assert (await app.status("old-1")).state is JobState.QUEUED
        async with working(app):
            assert await app.job("old-1").result(timeout=30) == 5
    assert ran == [5]


@pytest.mark.slow
async def test_a_worker_of_one_queue_runs_no_other_queues_job(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    """A worker with ``--queues emails`` runs every job of ``emails`` and
    none of ``default``; the default queue's jobs stay queued and listed,
    and a dead job of ``emails`` is found by its status and retried from
    its queue."""
    app = queued_app.using(nodes=forum_node.url, redis=redis_url)
    async with app:
        mails = [await app.enqueue("send", n) for n in range(20)]
        others = [await app.enqueue("work", n) for n in range(20)]
        dead = await app.enqueue("bounce")
        async with worker_processes(tmp_path) as started:
            worker = _worker(tmp_path, "w1", "queued_app", forum_node, redis_url,
                             "--queues", "emails")  # fmt: skip
            started.append(worker)
            await worker.start()
            for handle in mails:
                await handle.result(timeout=60)
            await eventually(
                lambda: _state_is(app, dead.key, JobState.DEAD), 30, "the bounced job dead"
            )
            assert await worker.signal(signal.SIGTERM) == 0, worker.log_text()
        ran = runs(tmp_path / "runs.db")
        assert sorted(key for key, _ in ran) == sorted(handle.key for handle in mails)
        assert {queue for _, queue in ran} == {"emails"}
        for handle in others:
            assert (await handle.status()).state is JobState.QUEUED
        listed = {status.key: status.state async for status in app.jobs(limit=1000)}
        assert {h.key for h in others} <= {k for k, s in listed.items() if s is JobState.QUEUED}
        assert listed[dead.key] is JobState.DEAD
        status = await app.status(dead.key)
        assert status.error is not None and "no such mailbox" in status.error
        retried = await app.retry(dead.key)
        assert (await retried.status()).state is JobState.QUEUED
        async with ForumClient(forum_node.url) as space:
            emails = queue_prefix(app.prefix, "emails")
            assert await space.count(Pattern(key_prefix(emails, dead.key))) == 1


def _slots_run_or_backlog_over(database: Path, slots: list[str]) -> bool:
    ran = runs(database)
    return {k for k, _ in ran} >= set(slots) or sum(q == DEFAULT_QUEUE for _, q in ran) == 160


async def _state_is(app: App, key: str, state: JobState) -> bool:
    return (await app.status(key)).state is state


@pytest.mark.slow
async def test_weights_3_to_1_take_about_3_to_1_from_two_full_queues(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    """Both queues hold 150 jobs before the worker starts; of the first 100
    it runs (one at a time, so the order run is the order taken), about
    three of four are ``emails``'. Expected 75; the bound is over 4
    standard deviations of a 3:1 draw each side."""
    app = queued_app.using(nodes=forum_node.url, redis=redis_url)
    async with app:
        for n in range(150):
            await app.enqueue("send", n)
            await app.enqueue("work", n)
        async with worker_processes(tmp_path) as started:
            worker = _worker(tmp_path, "w1", "queued_app", forum_node, redis_url,
                             "--queues", "emails:3,default:1", "--concurrency", "1")  # fmt: skip
            started.append(worker)
            await worker.start()
            await eventually(lambda: len(runs(tmp_path / "runs.db")) >= 100, 120, "100 runs")
            assert await worker.signal(signal.SIGTERM) == 0, worker.log_text()
    first = Counter(queue for _, queue in runs(tmp_path / "runs.db")[:100])
    assert 57 <= first["emails"] <= 93, first
    assert first["emails"] + first[DEFAULT_QUEUE] == 100


@pytest.mark.slow
async def test_no_periodic_slot_expires_behind_a_backlog(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    """160 slow jobs (0.3 s each, 4 at a time: 12 s of work) queued ahead of
    a task every second on the same queue. Each slot's job has a TTL of one
    interval; written at the default priority it waited behind the backlog
    and expired (3 of 27 ran in issue 31's report). At the highest priority,
    every slot from the worker's start runs while the backlog still does."""
    app = cron_app.using(nodes=forum_node.url, redis=redis_url)
    database = tmp_path / "runs.db"
    async with app:
        for n in range(160):
            await app.enqueue("slow", n)
        async with worker_processes(tmp_path) as started:
            worker = _worker(tmp_path, "w1", "cron_app", forum_node, redis_url,
                             "--concurrency", "4")  # fmt: skip
            started.append(worker)
            await worker.start()
            await eventually(lambda: runs(database), 60, "the first run")
            first = Interval(EVERY).next_after(time.time()) + EVERY
            slots = [slot_key("tick", first + i * EVERY) for i in range(5)]
            await eventually(lambda: _slots_run_or_backlog_over(database, slots), 60,
                             "the slots run, or the backlog over")  # fmt: skip
            assert await worker.signal(signal.SIGTERM) == 0, worker.log_text()
    ran = runs(database)
    keys = [key for key, _ in ran]
    missing = [slot for slot in slots if slot not in keys]
    assert not missing, f"slots expired behind the backlog: {missing}"
    # Every one of them ran while the backlog was still being worked off.
    last_slot = max(keys.index(slot) for slot in slots)
    assert sum(q == DEFAULT_QUEUE for _, q in ran[: last_slot + 1]) < 160
    assert queues_of(cron_app) == [DEFAULT_QUEUE]
