"""Every page of the dashboard in a real headless Chromium, in the light and
the dark theme (the system's preference, as the browser reports it): a node
with a token, a Lens and jobs in every state (tests/dashboard/showcase.py),
signed in through the login page; then each page of the route table
(``GET`` routes answering HTML, their required parameters filled in, so a
page added to :data:`forum.dashboard.pages.ROUTES` is covered here without
a word) must come with status 200, log no console error, fetch nothing from
another origin, write no script inline (the pages' Content-Security-Policy
can stay strict), show the theme (the root's color-scheme and the body's
background) and have every text readable on what is behind it (WCAG AA,
tests/dashboard/appearance.py). Screenshots of each page in each theme
(tests/dashboard/browser.py prints where).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from forum.dashboard.pages import ROOT
from tests.dashboard.appearance import look, prefer
from tests.dashboard.browser import Browser, browser
from tests.dashboard.showcase import Shown, page_name, pages, samples, showcase
from tests.fixtures.nodes import ForumNodes
from tests.fixtures.redis_server import RedisServer

__all__ = ["browser"]  # the module-scoped fixture, used by name

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TOKEN = "s3cret"
#: Each theme's page background (dashboard.css's --bg), as computed.
BACKGROUND = {"light": "rgb(255, 255, 255)", "dark": "rgb(13, 17, 23)"}


@dataclass(frozen=True, slots=True)
class Dashboard:
    """The node, what it shows, its pages, and a browser signed in to it."""

    url: str
    shown: Shown
    pages: list[str]
    browser: Browser


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def dashboard(
    tmp_path_factory: pytest.TempPathFactory, browser: Browser
) -> AsyncIterator[Dashboard]:
    root = tmp_path_factory.mktemp("pages")
    redis = RedisServer(root / "redis", persistent=False)
    redis.start()
    nodes = ForumNodes(root / "nodes")
    try:
        node = await nodes.start("p", "--read-token", "look", "--lens-url", redis.url, token=TOKEN)
        async with showcase(node.url, redis.url, TOKEN) as shown:
            found = await pages(node.url, samples(shown), TOKEN)
            await asyncio.to_thread(sign_in, browser, node.url)
            yield Dashboard(node.url, shown, found, browser)
            await asyncio.to_thread(browser.reset)  # before the node stops
    finally:
        await nodes.aclose()
        redis.kill()


def sign_in(browser: Browser, url: str) -> None:
    """A browser without the token is sent to the login page; signed in
    there, it comes back to the page it asked for."""
    browser.reset()
    browser.open(f"{url}{ROOT}/prefixes")
    browser.until(lambda: browser.find("#token"), "the login page")
    browser.find("#token").send_keys(TOKEN)
    browser.find("#login button").click()
    browser.until(lambda: browser.find(".scope").text == "full access", "signed in")
    assert browser.driver.current_url == f"{url}{ROOT}/prefixes"


def walk(dashboard: Dashboard, theme: str) -> dict[str, list[str]]:
    """What is wrong with each page in ``theme`` (pages with nothing wrong left out)."""
    browser = dashboard.browser
    prefer(browser, theme)
    browser.console()  # what came before is not these pages'
    wrong: dict[str, list[str]] = {}
    for page in dashboard.pages:
        browser.open(dashboard.url + page)
        seen = look(browser)
        browser.screenshot(f"{page_name(page)}-{theme}")
        problems = [
            *([f"status {seen.status}"] if seen.status != 200 else []),
            *(f"console: {e['message']}" for e in browser.console() if e["level"] == "SEVERE"),
            *(f"fetched from elsewhere: {url}" for url in seen.foreign),
            *([f"{seen.inline_scripts} inline scripts"] if seen.inline_scripts else []),
            *([f"color-scheme {seen.scheme}"] if seen.scheme != theme else []),
            *([f"background {seen.background}"] if seen.background != BACKGROUND[theme] else []),
            *([] if seen.judged else ["no text judged"]),
            *(
                f"unreadable: {u['element']} {u['text']!r}, contrast {u['ratio']} < {u['least']}"
                for u in seen.unreadable
            ),
        ]
        if problems:
            wrong[page] = problems
    return wrong


async def test_the_pages_come_from_the_route_table(dashboard: Dashboard) -> None:
    """The walk below covers the route table's pages, the job page with a
    job's key and the login page; not the session route (no page)."""
    assert f"{ROOT}/login" in dashboard.pages
    assert any(p.startswith(f"{ROOT}/job?key=") for p in dashboard.pages)
    assert f"{ROOT}/session" not in dashboard.pages
    assert {ROOT, f"{ROOT}/jobs", f"{ROOT}/workers"} <= set(dashboard.pages)


@pytest.mark.parametrize("theme", ["light", "dark"])
async def test_every_page_in_each_theme(dashboard: Dashboard, theme: str) -> None:
    assert await asyncio.to_thread(walk, dashboard, theme) == {}
