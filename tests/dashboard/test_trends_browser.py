"""Per-task history end to end, in a real headless Chromium, against a real
``forum serve --lens-url`` and a real ``redis-server``, with a real task
worker in this process: it runs jobs of two tasks (one failing every third
job); the history read back from Redis has the right counts and a run-time
percentile in its bucket; the worker's ``/metrics`` has both histograms per
task; the Overview shows the counts and the charts, and shows them again
after the node is restarted (the history is in Redis, not in the node).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import pytest

from forum import cli_worker
from forum.coordinator import LensConfig
from forum.coordinator.taskhistory import TaskMinute, read_history
from forum.tasks import App, Context, JobState
from tests.dashboard.browser import Browser, browser
from tests.dashboard.test_browser import no_console_errors
from tests.dashboard.test_jobs_browser import until
from tests.fixtures.nodes import ForumNodes, eventually
from tests.fixtures.redis_server import RedisServer
from tests.tasks.conftest import working

__all__ = ["browser"]  # the module-scoped fixture, used by name

pytestmark = pytest.mark.slow

#: How long each ``quick`` job runs: in the (0.25, 0.5] s bucket.
RUN = 0.3


def make_app(url: str, redis: str) -> App:
    app = App(url, redis)

    @app.task(retries=0)
    async def quick(ctx: Context, n: int) -> int:
        await asyncio.sleep(RUN)
        return n

    @app.task(retries=0)
    def sometimes(ctx: Context, n: int) -> int:
        if n % 3 == 0:
            raise RuntimeError(f"{n} fails on purpose")
        return n

    return app


async def summed(app: App) -> dict[str, TaskMinute]:
    """The last hour's history in Redis, per task, summed over its minutes."""
    config = LensConfig(url=app.redis, namespace=app.namespace)
    now = int(time.time() // 60)
    found = await read_history(config, 60, range(now - 59, now + 1))
    total: dict[str, TaskMinute] = {}
    for tasks in found.values():
        for task, counts in tasks.items():
            total.setdefault(task, TaskMinute()).merge(counts)
    return total


async def test_the_history_survives_a_node_restart(
    browser: Browser,
    forum_nodes: ForumNodes,
    volatile_redis: RedisServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    browser.reset()
    node = await forum_nodes.start("h", "--lens-url", volatile_redis.url)
    app = make_app(node.url, volatile_redis.url)
    async with app, working(app) as (worker,):
        jobs = [await app.enqueue("quick", n) for n in range(10)]
        jobs += [await app.enqueue("sometimes", n) for n in range(9)]

        async def ended() -> bool:
            states = [(await app.status(job.key)).state for job in jobs]
            return all(state in (JobState.DONE, JobState.DEAD) for state in states)

        await eventually(ended, timeout=30, what="every job done or dead")
        # The worker flushes every few seconds: the history shows every attempt.
        await eventually(lambda: _all_counted(app), timeout=20, what="the history flushed to Redis")
        history = await summed(app)
        quick, sometimes = history["quick"], history["sometimes"]
        assert (quick.done, quick.retried, quick.dead) == (10, 0, 0)
        assert (sometimes.done, sometimes.retried, sometimes.dead) == (6, 0, 3)
        assert quick.run.count == 10 and sometimes.run.count == 9
        p50 = quick.run.percentile(0.5)
        assert p50 is not None and p50 / 2 < RUN <= p50  # its bucket is (0.25, 0.5]
        assert quick.wait.count == 10  # each attempt's record named its due

        # The worker's /metrics, served as `forum worker --metrics-port 0` serves
        # it: both histograms, a series per task.
        async with contextlib.AsyncExitStack() as stack:
            await cli_worker._serve_metrics(stack, worker, "127.0.0.1", 0)
            bound = capsys.readouterr().err.split("metrics on ")[1].strip()
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://{bound}/metrics") as answer,
            ):
                metrics = await answer.text()
        assert 'forum_task_run_seconds_count{task="quick"} 10.0' in metrics
        assert 'forum_task_run_seconds_bucket{le="0.5",task="quick"} 10.0' in metrics
        assert 'forum_task_run_seconds_count{task="sometimes"} 9.0' in metrics
        assert 'forum_task_wait_seconds_count{task="quick"} 10.0' in metrics

    row = "table.trends tr[data-task='sometimes']"
    for look in ("before", "after"):
        if look == "after":
            no_console_errors(browser)
            browser.open("about:blank")  # no page refreshing from the node while it is down
            await node.restart()
        browser.open(f"{node.url}/ui")
        await until(browser, lambda: browser.find(f"{row} td.dead").text == "3", f"{look}: dead")
        assert browser.find(f"{row} td.done").text == "6"
        assert browser.find(f"{row} td.failure-rate").text == "33.3 %"
        quick_row = "table.trends tr[data-task='quick']"
        assert browser.find(f"{quick_row} td.done").text == "10"
        assert browser.find(f"{quick_row} td.run span[data-q='0.5']").text == "≤ 0.5 s"
        charts = browser.texts("tr.charts[data-task='quick'] svg.chart text.unit")
        assert charts == ["jobs/min", "%", "s"]  # throughput, failure rate, run time: units
        assert browser.texts("tr[data-node] svg.chart text.unit") == ["/s", "/s"]
        # The jobs by state and task (the Lens's job index), each a link to the
        # Jobs page filtered so.
        counts = "table.jobcounts tr[data-task='sometimes']"
        assert browser.find(f"{counts} td[data-state='dead']").text == "3"
        assert browser.find(f"{counts} td[data-state='done']").text == "6"
        assert browser.find("table.jobcounts tr.all td.total").text == "19"
        link = browser.find(f"{counts} td[data-state='dead'] a").get_attribute("href")
        assert link == f"{node.url}/ui/jobs?state=dead&task=sometimes"
        browser.screenshot(f"overview-tasks-{look}-restart")

    # The day's window, from the menu; a window that is none is refused, saying why.
    browser.find("#trends a[data-window='24h']").click()
    await until(browser, lambda: "last 24 h" in browser.find("#trends h2").text, "the day")
    assert browser.find(f"{row} td.dead").text == "3"
    async with aiohttp.ClientSession() as http, http.get(f"{node.url}/ui?window=1w") as answer:
        assert answer.status == 400
        assert "no window &#39;1w&#39;: one of 1h, 24h" in await answer.text()
    no_console_errors(browser)


async def _all_counted(app: App) -> bool:
    history = await summed(app)
    counted = {task: m.done + m.dead for task, m in history.items()}
    return counted == {"quick": 10, "sometimes": 9}
