"""Task limits (forum.tasks.limits, forum.coordinator.limits): the options
checked where a task is defined, and the limits held by real workers on real
nodes and Redis, their history read back from what the tasks wrote.

Per key, at every instant (``at_most_running``): each job writes its start
and end (``time.time()`` on one machine, one clock) and the intervals are
swept in order; an end and a start at the same instant count the end first
(a slot released, then taken)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest

from forum.tasks import App, Context, InvalidJob, JobState
from forum.tasks.limits import parse_rate
from tests.coordinator.harness import WorkerProcess, worker_processes
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually
from tests.tasks.conftest import AppFactory, working


@pytest.mark.parametrize(
    ("text", "per_second"),
    [("100/s", 100.0), ("10/m", 10 / 60), ("3600/h", 1.0), (" 2.5 / s ", 2.5)],
)
def test_a_rate_is_a_count_per_second_minute_or_hour(text: str, per_second: float) -> None:
    assert parse_rate(text) == pytest.approx(per_second)


@pytest.mark.parametrize("text", ["100", "10/d", "/s", "0/s", "-1/s", "fast", 10])
def test_a_bad_rate_is_one_clear_error(text: object) -> None:
    with pytest.raises(InvalidJob, match=r"rate_limit must be like '100/s'|must allow some"):
        parse_rate(text)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"rate_limit": "often"}, "rate_limit must be like"),
        ({"concurrency": 0}, "concurrency must be a whole number from 1"),
        ({"concurrency": True}, "concurrency must be a whole number from 1"),
        ({"max_running": 2}, "give limit_key too"),
        ({"rate": "1/s"}, "give limit_key too"),
        ({"limit_key": lambda customer: customer}, "give max_running or rate too"),
        ({"limit_key": "customer", "max_running": 1}, "limit_key must be a function"),
        ({"limit_key": lambda c: c, "rate": "1/x"}, "rate must be like"),
    ],
)
def test_bad_limits_are_refused_where_the_task_is_defined(
    options: dict[str, object], error: str
) -> None:
    app = App()
    with pytest.raises(InvalidJob, match=error):
        app.task(**options)(_noop)  # type: ignore[call-overload]
    assert not app.tasks


def _noop(ctx: Context) -> None:
    return None


def at_most_running(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at a tie)."""
    spans = list(intervals)
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = running = 0
    for _, step in events:  # at a tie, -1 sorts before 1
        running += step
        most = max(most, running)
    return most


async def test_jobs_over_a_key_limit_wait_unclaimed_and_other_keys_go_on(
    make_app: AppFactory,
) -> None:
    """Two workers, 3 keys of 5 jobs, ``max_running=2`` per key: never more
    than 2 of a key at once, every job runs as attempt 1 (its waits over
    the limit are not attempts), and the keys share the workers. A key's
    first job waits (at most 5 s) for a second of its key to start, so that
    a loaded machine's slow claims still show the limit reached, not only kept."""
    app = make_app()
    ran: dict[str, list[tuple[float, float, int]]] = {}
    running: dict[str, int] = {}
    paired: dict[str, asyncio.Event] = {}

    @app.task(limit_key=lambda customer, n: customer, max_running=2)
    async def order(ctx: Context, customer: str, n: int) -> None:
        start = time.time()
        running[customer] = running.get(customer, 0) + 1
        two = paired.setdefault(customer, asyncio.Event())
        if running[customer] == 2:
            two.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(two.wait(), 5)
        await asyncio.sleep(0.1)
        running[customer] -= 1
        ran.setdefault(customer, []).append((start, time.time(), ctx.attempt))

    async with app:
        handles = [
            await order.enqueue(customer, n) for n in range(5) for customer in ("a", "b", "c")
        ]
        async with working(app, count=2, concurrency=4) as workers:
            for handle in handles:
                await handle.result(timeout=30)
            assert sum(w.stats().over_limit for w in workers) > 0
    assert sorted(ran) == ["a", "b", "c"]
    for runs in ran.values():
        assert len(runs) == 5
        assert at_most_running((start, end) for start, end, _ in runs) == 2
        assert {attempt for _, _, attempt in runs} == {1}


# -- across processes ---------------------------------------------------------------------

#: Where limited_app's tasks write their runs: one line each, "<task> <key
#: or limit key> <start> <end> <attempt> <pid>" (set per test).
RUNS_FILE = "TASKS_LIMITS_RUNS"

limited_app = App(prefix=b"limits-test/")


def _wrote(task: str, key: str, start: float, attempt: int) -> None:
    with open(os.environ[RUNS_FILE], "a") as runs:
        runs.write(f"{task} {key} {start!r} {time.time()!r} {attempt} {os.getpid()}\n")


@limited_app.task(limit_key=lambda customer, n: customer, max_running=2)
async def per_customer(ctx: Context, customer: str, n: int) -> None:
    start = time.time()
    await asyncio.sleep(0.05 + (n % 3) * 0.05)
    _wrote("per_customer", customer, start, ctx.attempt)


@limited_app.task(concurrency=1)
async def single(ctx: Context, hold: bool) -> str:
    """Holds the task's one slot for a long while on its first attempt."""
    start = time.time()
    if hold and ctx.attempt == 1:
        await asyncio.sleep(120)
    _wrote("single", ctx.key, start, ctx.attempt)
    return ctx.key


@limited_app.task(rate_limit="20/s")
async def paced(ctx: Context, n: int) -> None:
    _wrote("paced", ctx.key, time.time(), ctx.attempt)


def _runs(path: Path, task: str) -> list[tuple[str, float, float, int, int]]:
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        name, key, start, end, attempt, pid = line.split(" ")
        if name == task:
            found.append((key, float(start), float(end), int(attempt), int(pid)))
    return found


def _worker(
    name: str, root: Path, node: NodeProcess, redis_url: str, runs: Path, *options: str
) -> WorkerProcess:
    return WorkerProcess(
        name, root / name,
        ["--app", "tests.tasks.test_limits:limited_app", "--node", node.url,
         "--redis-url", redis_url, "--take-wait", "0.2", *options],
        {RUNS_FILE: str(runs)},
    )  # fmt: skip


async def _two_nodes(forum_nodes: ForumNodes) -> tuple[NodeProcess, NodeProcess]:
    a, b = forum_nodes.make("a"), forum_nodes.make("b")
    a.args += ["--peer", b.url]
    b.args += ["--peer", a.url]
    await forum_nodes.start_all()
    return a, b


@pytest.mark.slow
async def test_four_workers_on_two_nodes_hold_two_running_per_key_at_every_instant(
    tmp_path: Path, forum_nodes: ForumNodes, redis_url: str
) -> None:
    a, b = await _two_nodes(forum_nodes)
    runs = tmp_path / "runs"
    app = limited_app.using(nodes=[a.url, b.url], redis=redis_url)
    jobs = 60
    async with app, worker_processes(tmp_path) as started:
        handles = [await app.enqueue("per_customer", f"c{n % 3}", n) for n in range(jobs)]
        for i, node in enumerate((a, b, a, b)):
            process = _worker(f"w{i}", tmp_path, node, redis_url, runs, "--concurrency", "4")
            started.append(process)
            await process.start()
        for handle in handles:
            await handle.result(timeout=120)
        for process in started:
            assert await process.signal(signal.SIGTERM) == 0, process.log_text()
    done = _runs(runs, "per_customer")
    assert len(done) == jobs
    by_key: dict[str, list[tuple[float, float]]] = {}
    for key, start, end, _, _ in done:
        by_key.setdefault(key, []).append((start, end))
    for key, intervals in by_key.items():
        assert at_most_running(intervals) <= 2, key
    assert {attempt for *_, attempt, _ in done} == {1}  # no wait was counted as an attempt
    assert len({pid for *_, pid in done}) > 1  # the workers shared the jobs


@pytest.mark.slow
async def test_a_killed_workers_slot_frees_after_its_lease(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    """w1 holds the task's one slot (``concurrency=1``) and is SIGKILLed:
    the slot is not leaked: once w1's lease runs out, w2 runs the next job,
    and the held job's next attempt."""
    runs = tmp_path / "runs"
    app = limited_app.using(nodes=forum_node.url, redis=redis_url)
    async with app, worker_processes(tmp_path) as started:
        held = await app.enqueue("single", True, _key="held")
        w1 = _worker("w1", tmp_path, forum_node, redis_url, runs, "--lease", "2")
        started.append(w1)
        await w1.start()

        async def running() -> bool:
            return (await held.status()).state is JobState.RUNNING

        await eventually(running, 30, "w1 runs the held job")
        after = await app.enqueue("single", False, _key="after")
        w2 = _worker("w2", tmp_path, forum_node, redis_url, runs, "--lease", "2")
        started.append(w2)
        await w2.start()
        await w1.signal(signal.SIGKILL)
        assert await after.result(timeout=60) == "after"
        assert await held.result(timeout=60) == "held"
        assert await w2.signal(signal.SIGTERM) == 0, w2.log_text()
    assert Counter(key for key, *_ in _runs(runs, "single")) == {"held": 1, "after": 1}


@pytest.mark.slow
async def test_a_task_rate_limit_of_20_a_second_holds_within_5_percent_over_a_minute(
    tmp_path: Path, forum_nodes: ForumNodes, redis_url: str
) -> None:
    """1,200 jobs of a ``rate_limit="20/s"`` task, a backlog for four workers
    on two nodes: from the first start to the last, 20 a second within 5 %."""
    a, b = await _two_nodes(forum_nodes)
    runs = tmp_path / "runs"
    app = limited_app.using(nodes=[a.url, b.url], redis=redis_url)
    jobs = 1200
    async with app, worker_processes(tmp_path) as started:
        for n in range(jobs):
            await app.enqueue("paced", n)
        for i, node in enumerate((a, b, a, b)):
            process = _worker(f"w{i}", tmp_path, node, redis_url, runs, "--concurrency", "2")
            started.append(process)
            await process.start()
        await eventually(lambda: len(_runs(runs, "paced")) >= jobs, 120, "every paced job")
        for process in started:
            assert await process.signal(signal.SIGTERM) == 0, process.log_text()
    starts = sorted(start for _, start, *_ in _runs(runs, "paced"))
    rate = (len(starts) - 1) / (starts[-1] - starts[0])
    print(f"paced: {len(starts)} jobs at {rate:.2f}/s")
    assert len(starts) == jobs and rate == pytest.approx(20, rel=0.05)
