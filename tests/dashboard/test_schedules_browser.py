"""The Schedules panel in a real headless Chromium, against a real ``forum
serve --lens-url`` (with a token and a read token) and a real
``redis-server``, with a task layer's worker running a periodic task every
second in this process: the page, signed in with the read token, shows the
task's schedule, its slots written and its last run done; with no worker for a
few seconds it shows the task overdue and the slots that fell as missed;
with a worker back, those slots stay counted; with Redis stopped, the page
says it cannot read them. The console must hold no error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from selenium.webdriver.remote.webelement import WebElement

from forum.coordinator import Lens
from forum.node.client.remote import ForumClient
from forum.tasks import App, Context
from tests.coordinator.harness import running
from tests.dashboard.browser import Browser, browser
from tests.dashboard.test_browser import no_console_errors
from tests.dashboard.test_jobs_browser import until
from tests.fixtures.nodes import ForumNodes
from tests.fixtures.redis_server import RedisServer

__all__ = ["browser"]  # the module-scoped fixture, used by name

pytestmark = pytest.mark.slow

TOKEN, READ = "s3cret", "look"
ROW = "tr[data-task='tick']"


@asynccontextmanager
async def working(app: App) -> AsyncIterator[None]:
    """A worker of ``app`` (with the node's full token) for the body."""
    async with (
        ForumClient(app.nodes[0], token=TOKEN) as space,
        Lens.from_url(app.redis) as lens,
        running(app.worker(space, lens, lease=1.5, take_wait=0.2)),
    ):
        yield


def cell(page: Browser, name: str) -> WebElement:
    return page.find(f"{ROW} td.{name}")


def missed(page: Browser) -> int:
    return int(page.find(f"{ROW} td.missed .count").text)


async def test_the_schedules_page_shows_runs_and_missed_slots(
    browser: Browser, forum_nodes: ForumNodes, volatile_redis: RedisServer
) -> None:
    node = await forum_nodes.start("s", "--lens-url", volatile_redis.url, "--read-token", READ,
                                   token=TOKEN)  # fmt: skip
    app = App(node.url, volatile_redis.url, token=TOKEN)
    ran: list[int] = []

    @app.cron(every=1)
    def tick(ctx: Context) -> None:
        ran.append(1)

    browser.reset()
    browser.open(f"{node.url}/ui/schedules")
    field = browser.find("#token")  # sent to sign in: the read token may look
    field.send_keys(READ)
    browser.find("#login button").click()
    await until(browser, lambda: browser.find(".scope").text == "read-only", "signed in to read")
    assert browser.driver.current_url == f"{node.url}/ui/schedules"
    async with app:
        async with working(app):
            await until(browser, lambda: browser.texts(ROW), "the task listed")
            await until(browser, lambda: cell(browser, "last-run").text.startswith("done"),
                        "a slot run")  # fmt: skip
            assert cell(browser, "spec").text == "every 1 s"
            assert "cron:tick:" in cell(browser, "written-slot").text
            assert "overdue" not in (browser.find(ROW).get_attribute("class") or "")
            assert missed(browser) == 0
            browser.screenshot("schedules")

        # No worker: the slots that fall are written by nobody.
        await until(browser, lambda: missed(browser) >= 2, "slots missed")
        assert "overdue" in cell(browser, "next").text
        assert "skipped" in cell(browser, "missed-slots").text
        browser.screenshot("schedules-missed")
        seen = missed(browser)

        # A worker back: the record moves on, and the slots missed stay counted.
        async with working(app):
            await until(browser, lambda: "overdue" not in cell(browser, "next").text, "written")
            assert missed(browser) >= seen
            assert "never written" in cell(browser, "missed").text

    # Redis gone: the page says so in one line, and still answers.
    volatile_redis.stop()
    await until(browser, lambda: "cannot read the schedules" in browser.find("#lens-error").text,
                "the Lens unreadable")  # fmt: skip
    no_console_errors(browser, expected=("401",))
