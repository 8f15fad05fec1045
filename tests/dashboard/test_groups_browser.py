"""The dashboard of a node in a scaled-out cluster, in a real headless
Chromium: the Overview lists the map's groups and their members, Prefixes
counts over every group, and a group that does not answer is shown as
unreachable, never a failed page. The nodes have a token: the node serving
``/ui`` asks the other group's with it."""

from __future__ import annotations

import pytest

from forum.node.client.remote import ForumClient
from tests.cluster.conftest import start_groups
from tests.dashboard.browser import Browser, browser
from tests.dashboard.test_browser import no_console_errors, row_text
from tests.fixtures.nodes import ForumNodes

__all__ = ["browser"]  # the module-scoped fixture, used by name

pytestmark = pytest.mark.slow

TOKEN = "s3cret"


def member_state(page: Browser, url: str) -> str:
    return page.find(f"div.member[data-member='{url}']").get_attribute("data-state") or ""


async def test_the_overview_lists_the_groups_and_prefixes_counts_over_them(
    browser: Browser, forum_nodes: ForumNodes
) -> None:
    browser.reset()
    cluster, groups = await start_groups(forum_nodes, [2, 1], "--token", TOKEN, epoch=3)
    here, far = groups["g1"][0], groups["g2"][0]
    for node, payloads in ((here, [b"job/1"]), (far, [b"job/2", b"job/3", b"mail/1"])):
        async with ForumClient(node.url, TOKEN) as client:
            for payload in payloads:
                await client.write(payload)

    browser.open(f"{here.url}/ui/login")  # open; the cookie is set by a bearer fetch
    browser.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/ui/session', {headers: {Authorization: 'Bearer ' + arguments[0]}})"
        ".then(() => done());",
        TOKEN,
    )
    browser.open(f"{here.url}/ui")
    assert browser.find("#groups").get_attribute("data-epoch") == "3"
    assert browser.texts("tr[data-group] td:first-child") == ["g1 this node's", "g2"]
    for group in cluster.groups:
        for url in group.members:
            browser.until(lambda u=url: member_state(browser, u) == "alive", f"{url} alive")
    browser.until(lambda: row_text(browser, "tr[data-group='g2'] td.live") == "3", "g2's live")
    assert row_text(browser, "tr[data-group='g1'] td.live") == "1"
    browser.screenshot("overview-groups")

    browser.open(f"{here.url}/ui/prefixes")
    assert row_text(browser, "tr[data-prefix='job/'] td.live") == "3"  # 1 here + 2 in g2
    assert row_text(browser, "tr[data-prefix='mail/'] td.live") == "1"  # in g2 only
    assert browser.texts("#groups-unreachable") == []
    no_console_errors(browser)

    # g2 stops: its member is unreachable on the Overview; Prefixes counts
    # this group's and says g2 was not counted.
    await far.stop()
    browser.open(f"{here.url}/ui")
    browser.until(lambda: member_state(browser, far.url) == "unreachable", "g2 unreachable")
    assert "unreachable" in browser.find("tr[data-group='g2']").get_attribute("class")
    browser.open(f"{here.url}/ui/prefixes")
    assert row_text(browser, "tr[data-prefix='job/'] td.live") == "1"
    assert "no member of group g2 answered" in browser.find("#groups-unreachable").text
    browser.screenshot("prefixes-group-down")
    browser.reset()
