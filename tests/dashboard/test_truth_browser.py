"""Nothing on the dashboard misleads, in a real headless Chromium against a
real ``forum serve --lens-url``, a real ``redis-server`` and real ``forum
worker`` processes: a SIGKILLed worker shows dead (not alive with nothing
running) once two of its beats are missed, its eight jobs awaiting their
re-offer; once another worker has run them, Guarantees counts the eight
re-offers, and still does after every worker is gone, as the node's
``/metrics`` does. The Workers, Guarantees and Prefixes pages never make
Redis SCAN.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from forum.node.client.remote import ForumClient
from tests.coordinator.harness import WorkerProcess, eventually, worker_processes
from tests.coordinator.process_handlers import STARTED
from tests.dashboard.browser import Browser, browser
from tests.dashboard.test_browser import no_console_errors
from tests.fixtures.nodes import ForumNodes, NodeProcess

__all__ = ["browser"]  # the module-scoped fixture, used by name

pytestmark = pytest.mark.slow

#: The workers' lease: they beat each second, so are dead after two seconds without a beat.
LEASE = 3.0
JOBS = 8


def worker(node: NodeProcess, redis_url: str, name: str, handler: str, root: Path) -> WorkerProcess:
    args = [
        "--node", node.url, "--redis-url", redis_url, "--prefix", "job/",
        "--handler", handler, "--take-wait", "0.2", "--lease", str(LEASE),
        "--concurrency", str(JOBS),
    ]  # fmt: skip
    return WorkerProcess(name, root, args, {"FORUM_EXAMPLE_REDIS_URL": redis_url})


async def until(page: Browser, predicate: Callable[[], Any], what: str) -> Any:
    """``page.until`` in a thread, so this test's loop keeps serving its processes."""
    return await asyncio.to_thread(page.until, predicate, what)


async def scans(redis_url: str) -> int:
    """How many SCAN calls Redis has served since it started."""
    async with Redis.from_url(redis_url) as client:
        stats = await client.info("commandstats")
    return int(stats.get("cmdstat_scan", {}).get("calls", 0))


async def test_a_killed_worker_is_dead_its_jobs_await_reoffer_and_the_counts_stay(
    browser: Browser, forum_nodes: ForumNodes, redis_url: str, tmp_path: Path
) -> None:
    browser.reset()
    node = await forum_nodes.start("t", "--lens-url", redis_url)
    async with (
        ForumClient(node.url) as space,
        Redis.from_url(redis_url) as redis,
        worker_processes(tmp_path) as workers,
    ):
        for i in range(JOBS):
            await space.write(f"job/{i}".encode())
        a = worker(node, redis_url, "a", "tests.coordinator.process_handlers:hang_after_start",
                   tmp_path)  # fmt: skip
        workers.append(a)
        await a.start()

        async def all_started() -> bool:
            return await redis.llen(STARTED) == JOBS

        await eventually(all_started, what="a runs all eight jobs")
        row = "tr[data-worker='a']"
        browser.open(f"{node.url}/ui/workers")
        await until(browser, lambda: browser.find(f"{row} td.running").text.startswith(
            str(JOBS)), "a alive, running eight")  # fmt: skip
        assert browser.find(f"{row} td.liveness").text == "alive"

        assert await a.signal(signal.SIGKILL) == -signal.SIGKILL
        await until(browser, lambda: browser.find(f"{row} td.liveness").text == "dead", "dead")
        await until(browser, lambda: len(browser.texts(f"{row} .claim-state.awaiting")) == JOBS,
                    "its jobs awaiting re-offer")  # fmt: skip
        assert all(t.startswith("awaiting re-offer") for t in browser.texts(f"{row} .claim-state"))
        browser.screenshot("workers-dead")

        b = worker(node, redis_url, "b", "tests.dashboard.truth_handlers:done", tmp_path)
        workers.append(b)
        await b.start()
        await until(browser, lambda: browser.find("tr[data-worker='b'] td.done").text == str(JOBS),
                    "b ran the eight")  # fmt: skip
        assert browser.texts(f"{row} .claim-state.awaiting") == []

        browser.open(f"{node.url}/ui/guarantees")
        await until(browser, lambda: browser.find("#reoffered-total").text == str(JOBS), "8")
        assert await b.signal(signal.SIGTERM) == 0, b.log_text()
        await until(browser, lambda: not browser.texts("tr[data-worker='b']"), "b gone")
        assert browser.find("#reoffered-total").text == str(JOBS)  # not summed from the living
        browser.screenshot("guarantees-after-workers")

        # The pages that read the Lens list workers from the index: no SCAN.
        before = await scans(redis_url)
        async with aiohttp.ClientSession() as http:
            for page in ("workers", "guarantees", "prefixes"):
                async with http.get(f"{node.url}/ui/{page}") as answer:
                    assert answer.status == 200
            assert await scans(redis_url) == before
            # The same count in the node's /metrics, read at the scrape.
            async with http.get(f"{node.url}/metrics") as answer:
                metrics = await answer.text()
        assert f"forum_lens_reoffers_total {JOBS}.0" in metrics.splitlines()
        assert "forum_lens_double_takes_total" in metrics
        no_console_errors(browser)
        browser.reset()
