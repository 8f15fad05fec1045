"""The dashboard in a real headless Chromium, against real ``forum serve``
processes: every panel renders with real data, a write shows up in the
Prefixes panel and in ``/metrics`` (and its group's rates, oldest age and
dead letters there), pause and resume from the page work, a
stopped node shows as dead in Peers, and with a token the pages need it and
a read token cannot act. Each panel is screenshotted (tests/dashboard/browser.py
prints where) and the console must hold no error.
"""

from __future__ import annotations

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.dashboard.browser import Browser, browser
from tests.fixtures.clusters import FAST, peers_are
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually

__all__ = ["browser"]  # the module-scoped fixture, used by name

pytestmark = pytest.mark.slow


def no_console_errors(page: Browser, *, expected: tuple[str, ...] = ()) -> None:
    """The console holds no error but the refusals a test provoked on purpose
    (Chromium logs an HTTP 403 a fetch received as a SEVERE network entry)."""
    errors = [
        e
        for e in page.console()
        if e["level"] == "SEVERE" and not any(text in e["message"] for text in expected)
    ]
    assert errors == []


async def three_nodes(forum_nodes: ForumNodes) -> list[NodeProcess]:
    nodes = [forum_nodes.make(name, env=FAST) for name in "abc"]
    for node in nodes:
        node.args += [arg for peer in nodes if peer is not node for arg in ("--peer", peer.url)]
    await forum_nodes.start_all()
    return nodes


def row_text(page: Browser, css: str) -> str:
    return " ".join(page.texts(css))


async def test_every_panel_shows_the_cluster_and_acts_on_it(
    browser: Browser, forum_nodes: ForumNodes
) -> None:
    browser.reset()
    a, b, c = await three_nodes(forum_nodes)
    async with ForumClient(a.url) as client:
        await eventually(lambda: peers_are(client, {b.url, c.url}), what="peers alive")
        await client.write(b"job/resize/1")
        await client.write(b"job/resize/2")
        await client.write(b"mail/welcome", delay=600)

        # Overview: a row per node, with its figures, and the health line.
        browser.open(f"{a.url}/ui")
        browser.until(lambda: len(browser.texts("tr[data-node]")) == 3, "a row per node")
        browser.until(
            lambda: row_text(browser, "tr[data-node='a'] td.live") == "2", "a's live tuples"
        )
        assert "all 2 peers alive" in browser.find("#health").text
        browser.until(
            lambda: browser.find("tr[data-node='a'] polyline").get_attribute("points"),
            "a sparkline",
        )
        browser.screenshot("overview")

        # Prefixes: the write shows up grouped at "/", and in /metrics.
        browser.open(f"{a.url}/ui/prefixes")
        job = "tr[data-prefix='job/']"
        assert row_text(browser, f"{job} td.live") == "2"
        assert row_text(browser, "tr[data-prefix='mail/']").split()[:3] == ["mail/", "0", "1"]
        async with aiohttp.ClientSession() as http, http.get(f"{a.url}/metrics") as answer:
            metrics = await answer.text()
        assert "forum_writes_total 3.0" in metrics
        assert "forum_live_tuples 2.0" in metrics
        # Written and taken while the panel is looked at: counted in job/'s
        # rates; a dead letter of a job/ job counted in job/'s dead; job/'s
        # oldest tuple (job/resize/1, from before) aging.
        age = browser.until(lambda: seconds(browser, f"{job} td.oldest"), "job/'s oldest age")
        await client.write(b"job/resize/3")
        await client.write(b"dead/job/resize/9")
        await client.write(b"job/resize/4")
        assert await client.take(Pattern(b"job/resize/4")) == b"job/resize/4"
        browser.until(lambda: row_text(browser, f"{job} td.live") == "3", "a new write shown")
        browser.until(lambda: row_text(browser, f"{job} td.dead") == "1", "a dead letter shown")
        browser.until(lambda: shown_rate(browser, f"{job} td.takes") > 0, "takes/s shown")
        browser.until(lambda: shown_rate(browser, f"{job} td.writes") > 0, "writes/s shown")
        browser.until(lambda: seconds(browser, f"{job} td.oldest") > age, "the oldest aging")
        # Counted once, in job/'s row: the dead prefix is no row of its own.
        assert browser.texts("tr[data-prefix='dead/']") == []
        browser.open(f"{a.url}/ui/prefixes?separator=/resize/")
        browser.until(lambda: browser.texts("tr[data-prefix='job/resize/']"), "grouped finer")
        browser.open(f"{a.url}/ui/prefixes")

        # Pause and resume from the page: the API's pause, on every node.
        browser.find(f"{job} button[data-action='pause']").click()
        browser.until(lambda: row_text(browser, f"{job} td.state") == "paused", "paused shown")
        assert await client.paused() == [b"job/"]
        async with ForumClient(c.url) as far:
            await eventually(lambda: far_paused(far), what="the pause replicated")
        browser.screenshot("prefixes")
        browser.find(f"{job} button[data-action='resume']").click()
        browser.until(lambda: row_text(browser, f"{job} td.state") == "taking", "resumed shown")
        assert await client.paused() == []

        # Guarantees: each node's double takes; no Lens given to this node.
        browser.open(f"{a.url}/ui/guarantees")
        browser.until(lambda: len(browser.texts("tr[data-node] td.double-takes")) == 3, "3 nodes")
        assert browser.texts("tr[data-node] td.double-takes") == ["0", "0", "0"]
        assert "No Lens configured" in browser.find("#lens").text
        browser.screenshot("guarantees")

        # Peers: alive, then a stopped node is dead, and lags more and more
        # behind the writes made since (b, alive, has them: no lag).
        browser.open(f"{a.url}/ui/peers")
        peer_c = f"tr[data-peer='{c.url}'] td.state .badge"
        assert browser.find(peer_c).text == "alive"
        await c.stop()
        await client.write(b"job/after-c")
        browser.until(lambda: browser.find(peer_c).text == "dead", "c shown dead")
        assert "1 dead" in browser.find("#health").text
        first = browser.until(lambda: lag_shown(browser, c.url) >= 1.0, "c's lag shown")
        browser.until(lambda: lag_shown(browser, c.url) > first, "c's lag growing")
        assert lag_shown(browser, b.url) < 1.0
        row = {p.url: p for p in (await client.status()).peers}
        assert (row[c.url].lag_seconds or 0.0) > first and (row[c.url].behind or 0) >= 1
        async with aiohttp.ClientSession() as http, http.get(f"{a.url}/metrics") as answer:
            assert f'forum_replication_peer_lag_seconds{{peer="{c.url}"}}' in await answer.text()
        browser.screenshot("peers")
        no_console_errors(browser)
        browser.reset()  # before the cluster stops: its page would refresh from nothing


def seconds(page: Browser, css: str) -> float:
    """The age a cell shows, in seconds (its ``data-seconds``; 0 for none)."""
    return float(page.find(css).get_attribute("data-seconds") or 0.0)


def shown_rate(page: Browser, css: str) -> float:
    """A rate a cell shows (-1 for "—": no figure yet)."""
    text = page.find(css).text
    return -1.0 if text == "—" else float(text)


def lag_shown(page: Browser, url: str) -> float:
    """The lag the Peers panel shows for the peer at ``url``, in seconds."""
    seconds = page.find(f"tr[data-peer='{url}'] td.lag").get_attribute("data-seconds")
    return float(seconds) if seconds else -1.0


async def far_paused(client: ForumClient) -> bool:
    return await client.paused() == [b"job/"]


async def test_with_a_token_the_pages_need_it_and_a_read_token_cannot_act(
    browser: Browser, forum_nodes: ForumNodes
) -> None:
    node = await forum_nodes.start("t", "--read-token", "look", token="s3cret")
    async with ForumClient(node.url, token="s3cret") as client:
        await client.write(b"job/1")
    browser.reset()
    prefixes = f"{node.url}/ui/prefixes"

    def sent_to_sign_in() -> None:
        """A page asked for without the token leads to the login page, which
        comes back to it once signed in."""
        browser.open(prefixes)
        assert browser.driver.current_url == f"{node.url}/ui/login?next=/ui/prefixes"

    def sign_in(token: str) -> None:
        field = browser.find("#token")
        field.clear()
        field.send_keys(token)
        browser.find("#login button").click()

    sent_to_sign_in()
    sign_in("wrong")
    browser.until(lambda: browser.find("#login-error").text == "wrong token", "refused")
    browser.screenshot("login")
    sign_in("look")
    browser.until(lambda: browser.find(".scope").text == "read-only", "signed in to read")
    assert browser.driver.current_url == prefixes
    button = browser.find("tr[data-prefix='job/'] button[data-action='pause']")
    assert not button.is_enabled()
    assert browser.fetch("POST", "/v1/prefixes/job%2F/pause") == 403
    async with ForumClient(node.url, token="s3cret") as client:
        assert await client.paused() == []
    no_console_errors(browser, expected=("401", "403"))

    browser.forget_cookies()
    sent_to_sign_in()
    sign_in("s3cret")
    browser.until(lambda: browser.find(".scope").text == "full access", "signed in")
    assert browser.driver.current_url == prefixes
    browser.find("tr[data-prefix='job/'] button[data-action='pause']").click()
    browser.until(
        lambda: row_text(browser, "tr[data-prefix='job/'] td.state") == "paused", "paused"
    )
    no_console_errors(browser)
    browser.reset()
