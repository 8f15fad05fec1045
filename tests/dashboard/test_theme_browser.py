"""The theme toggle in the top bar, in a real headless Chromium: auto follows
the system's preference; light or dark, chosen, wins over it, is applied at
once, kept in the browser for the next pages (the login page too) and
applied before the page is first painted; back to auto, the system decides
again. A read token may choose (it is the browser's, not an action on the
node).
"""

from __future__ import annotations

import pytest

from forum.dashboard.pages import ROOT
from tests.dashboard.appearance import look, prefer
from tests.dashboard.browser import Browser, browser
from tests.fixtures.nodes import ForumNodes

__all__ = ["browser"]  # the module-scoped fixture, used by name

pytestmark = pytest.mark.slow

#: Run in every new page before its own scripts: notes the root's theme when
#: the parser first inserts <body>, which is before the first paint (a
#: mutation observer's callback runs at the end of the parser's task, before
#: any rendering).
AT_FIRST_PAINT = """
new MutationObserver((changes, observer) => {
  if (!document.body) return;
  window.themeAtBody = {
    scheme: getComputedStyle(document.documentElement).colorScheme,
    theme: document.documentElement.dataset.theme || "auto",
  };
  observer.disconnect();
}).observe(document, {childList: true, subtree: true});
"""


def choose(page: Browser, theme: str) -> None:
    page.find(f"#theme option[value='{theme}']").click()


def scheme(page: Browser) -> str:
    return look(page).scheme


def at_first_paint(page: Browser) -> dict[str, str]:
    found: dict[str, str] = page.driver.execute_script("return window.themeAtBody")
    return found


async def test_the_toggle_chooses_keeps_and_applies_the_theme_before_the_first_paint(
    browser: Browser, forum_nodes: ForumNodes
) -> None:
    node = await forum_nodes.start("t", "--read-token", "look", token="s3cret")
    browser.reset()
    browser.driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument", {"source": AT_FIRST_PAINT}
    )
    prefer(browser, "light")
    browser.open(f"{node.url}{ROOT}/login")
    browser.find("#token").send_keys("look")
    browser.find("#login button").click()
    browser.until(lambda: browser.find(".scope").text == "read-only", "signed in to read")

    # Auto: the system's light; the toggle shows it, once the script is there.
    assert browser.find("#theme").is_displayed()
    assert browser.find("#theme").get_attribute("value") == "auto"
    assert scheme(browser) == "light"
    prefer(browser, "dark")
    browser.until(lambda: scheme(browser) == "dark", "auto following the system to dark")

    # Light chosen on a dark system: at once, and on the next page from its
    # first paint on.
    choose(browser, "light")
    browser.until(lambda: scheme(browser) == "light", "light at once")
    browser.open(f"{node.url}{ROOT}/peers")
    assert at_first_paint(browser) == {"scheme": "light", "theme": "light"}
    assert browser.find("#theme").get_attribute("value") == "light"

    # Dark chosen on a light system: kept across a reload, and on the login
    # page of a browser signed out.
    prefer(browser, "light")
    choose(browser, "dark")
    browser.until(lambda: scheme(browser) == "dark", "dark at once")
    browser.driver.refresh()
    assert at_first_paint(browser) == {"scheme": "dark", "theme": "dark"}
    assert look(browser).background == "rgb(13, 17, 23)"
    browser.forget_cookies()
    browser.open(f"{node.url}{ROOT}/login")
    assert at_first_paint(browser) == {"scheme": "dark", "theme": "dark"}

    # Back to auto: the system decides again, from the first paint.
    browser.open(f"{node.url}{ROOT}/login")
    browser.find("#token").send_keys("look")
    browser.find("#login button").click()
    browser.until(lambda: browser.find("#theme").is_displayed(), "signed in again")
    choose(browser, "auto")
    browser.until(lambda: scheme(browser) == "light", "auto: the system's light")
    browser.open(f"{node.url}{ROOT}/guarantees")
    assert at_first_paint(browser) == {"scheme": "light", "theme": "auto"}
    assert [e for e in browser.console() if e["level"] == "SEVERE"] == []
    browser.reset()
