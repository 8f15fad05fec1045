"""A real headless Chromium for the dashboard tests, driven by Selenium.

Debian's ``chromium`` and ``chromium-driver`` (``scripts/install-tools``
installs them). Without them the browser tests skip, except in CI
(``CI=true``), where a missing browser is a failure: a green run must have
looked at the pages. Screenshots go to ``$TEST_ARTIFACTS/dashboard`` (or a
temporary directory), printed at the start; not a ``FORUM_*`` name, which
``forum serve`` would take for a misspelt setting of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

#: The flags the machine's notes give for a headless Chromium with no network
#: beyond loopback: without the background ones it keeps dialling out.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
)
#: The longest a page may take to show what a test waits for.
WAIT = 20.0


def binaries() -> tuple[str, str] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def chrome(found: tuple[str, str], profile: Path, *flags: str) -> webdriver.Chrome:
    """Chromium and its driver (:func:`binaries`) started with ``flags``,
    its profile in ``profile``, its console kept for :meth:`Browser.console`
    (scripts/screenshots starts its browser with this too)."""
    chromium, driver_path = found
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in flags:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(driver_path))


class Browser:
    """One Chromium session: pages, waits, screenshots and the console's log."""

    def __init__(self, driver: webdriver.Chrome, artifacts: Path) -> None:
        self.driver = driver
        self.artifacts = artifacts

    def open(self, url: str) -> None:
        self.driver.get(url)

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def texts(self, css: str) -> list[str]:
        return [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css)]

    def until(self, predicate: Callable[[], Any], what: str) -> Any:
        """Poll ``predicate`` until it is truthy (a page refreshes itself every
        few seconds); fails after :data:`WAIT` seconds naming ``what``."""

        def check(_: object) -> Any:
            try:
                return predicate()
            except Exception:  # an element replaced mid-look by a refresh: look again
                return False

        return WebDriverWait(self.driver, WAIT, poll_frequency=0.1).until(check, message=what)

    def screenshot(self, name: str) -> Path:
        path = self.artifacts / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def fetch(self, method: str, path: str) -> int:
        """The status of a ``fetch`` the page itself makes (with its cookie)."""
        status: int = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[1], {method: arguments[0], credentials: 'same-origin'})"
            ".then(r => done(r.status), e => done(-1));",
            method,
            path,
        )
        return status

    def console(self) -> list[dict[str, Any]]:
        """The console entries since the last call (Chromium hands each out once)."""
        entries: list[dict[str, Any]] = self.driver.get_log("browser")
        return entries

    def forget_cookies(self) -> None:
        self.driver.delete_all_cookies()

    def reset(self) -> None:
        """A blank page, no cookie and an empty console: what one test left
        (a page still refreshing from a stopped node) is not the next one's."""
        self.driver.get("about:blank")
        self.forget_cookies()
        self.console()


@contextlib.contextmanager
def launch(tmp_path_factory: pytest.TempPathFactory, *flags: str) -> Iterator[Browser]:
    """A headless Chromium with :data:`FLAGS` and ``flags``, quit on the way out."""
    found = binaries()
    if found is None:
        message = "chromium and chromedriver are needed (scripts/install-tools installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    root = os.environ.get("TEST_ARTIFACTS")
    artifacts = Path(root) / "dashboard" if root else tmp_path_factory.mktemp("dashboard")
    artifacts.mkdir(parents=True, exist_ok=True)
    print(f"\ndashboard screenshots in {artifacts}")
    driver = chrome(found, tmp_path_factory.mktemp("chromium-profile"), *FLAGS, *flags)
    try:
        yield Browser(driver, artifacts)
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One headless Chromium for the whole module."""
    with launch(tmp_path_factory) as started:
        yield started
