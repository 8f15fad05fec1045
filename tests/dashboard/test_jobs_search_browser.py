"""The Jobs page and a job's timeline in a real headless Chromium, against
one real ``forum serve --lens-url`` (a token and a read token) and a real
``redis-server`` shared by the module, with two apps' workers (prefixes
``task/`` and ``nu/``) running in this process: a job retried once then
done shows two attempts with their durations; three dead jobs are retried
at once and two queued ones cancelled at once, each outcome counted in the
flash (from the page of every app's jobs: each key acted on in its own app);
the read token sees the page and is refused the bulk action; a search by
task, state, key prefix and arguments shows only what matches; 120 jobs
paged through show each job once; and each app's jobs show under its own
prefix and no other's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from forum.coordinator import Backoff, Lens
from forum.node.client.remote import ForumClient
from forum.tasks import App, Context, JobHandle, JobState
from tests.dashboard.browser import Browser, browser
from tests.dashboard.test_browser import no_console_errors
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually
from tests.fixtures.redis_server import RedisServer

__all__ = ["browser"]  # the module-scoped fixture, used by name

TOKEN, READ = "s3cret", "look"
#: The tests share the module's node, Redis and workers, so its event loop.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


class Site:
    """The module's node, its two apps (``task/``, ``nu/``) with a worker
    each, and a client of the node."""

    def __init__(self, node: NodeProcess, app: App, nu: App, client: ForumClient) -> None:
        self.node, self.app, self.nu, self.client = node, app, nu, client
        #: How many more calls of ``flaky`` fail.
        self.failures = {"left": 0}

    def url(self, path: str) -> str:
        return self.node.url + path

    async def state(self, key: str, state: JobState) -> None:
        async def reached() -> bool:
            return (await self.app.status(key)).state is state

        await eventually(reached, what=f"{key} {state.value}")

    async def recorded(self, calls: list[tuple[str, int, str]]) -> list[JobHandle]:
        """Enqueue ``(task, argument, key)`` each while no worker takes
        them, until each one's record is in: the producer's record, which
        keeps the arguments, is written in the background and only while
        the key has none, so a worker's first record could come before it."""
        app = self.app
        await self.client.pause(app.prefix)
        try:
            handles = [await app.enqueue(task, n, _key=key) for task, n, key in calls]
            for handle in handles:
                await eventually(lambda h=handle: _has_args(app, h.key), what="its record")
        finally:
            await self.client.resume(app.prefix)
        return handles


async def _has_args(app: App, key: str) -> bool:
    return (await app.status(key)).args is not None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    root = Path(tmp_path_factory.mktemp("jobs-search"))
    redis = RedisServer(root / "redis", persistent=False)
    redis.start()
    nodes = ForumNodes(root / "nodes")
    try:
        node = await nodes.start("s", "--read-token", READ, "--lens-url", redis.url, token=TOKEN)
        app = App(node.url, redis.url, token=TOKEN)
        nu = App(node.url, redis.url, token=TOKEN, prefix=b"nu/")
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(ForumClient(node.url, token=TOKEN))
            made = Site(node, app, nu, client)
            _tasks(made)
            stop = asyncio.Event()
            async with app, nu, asyncio.TaskGroup() as group:
                for each in (app, nu):
                    group.create_task(each.run_worker(stop=stop, lease=2.0, take_wait=0.2,
                                                      reaper_interval=0.2))  # fmt: skip
                try:
                    yield made
                finally:
                    stop.set()
    finally:
        await nodes.aclose()
        redis.kill()


def _tasks(site: Site) -> None:
    app, failures = site.app, site.failures

    @app.task(retries=0)
    def flaky(ctx: Context, n: int) -> int:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise RuntimeError(f"flaky {n} failed on purpose")
        return n

    @app.task(retries=1, backoff=Backoff(0.3, 0.3, 0.0))
    async def twice(ctx: Context, n: int) -> int:
        await asyncio.sleep(0.1)  # each attempt lasts a while: a duration to show
        if ctx.attempt == 1:
            raise RuntimeError("twice: the first attempt fails")
        return n

    @app.task(retries=0)
    def noop(ctx: Context, n: int) -> int:
        return n

    @site.nu.task(retries=0)
    def other(ctx: Context, n: int) -> int:
        return n


async def until(page: Browser, predicate: Callable[[], Any], what: str) -> Any:
    """``page.until`` in a thread: the workers run on this loop."""
    return await asyncio.to_thread(page.until, predicate, what)


async def sign_in(page: Browser, site: Site, token: str) -> None:
    page.reset()
    page.open(site.url("/ui/login"))
    page.find("#token").send_keys(token)
    page.find("#login button").click()
    await until(page, lambda: page.find(".scope").text != "", "signed in")


def keys_shown(page: Browser) -> list[str]:
    return [row.get_attribute("data-key") or "" for row in page.driver.find_elements(
        "css selector", "table.jobs tbody tr[data-key]")]  # fmt: skip


async def tick(page: Browser, keys: list[str]) -> None:
    """Tick each key's box (a refresh may swap a row under the click: again)."""
    for key in keys:
        box = f"tr[data-key='{key}'] input.pick"
        await until(page, lambda b=box: page.find(b).click() or page.find(b).is_selected(), key)


async def test_a_job_retried_once_shows_two_attempts_with_durations(
    browser: Browser, site: Site
) -> None:
    (job,) = await site.recorded([("twice", 5, "timeline-1")])
    assert await job.result(timeout=15) == 5
    await sign_in(browser, site, TOKEN)
    browser.open(site.url("/ui/job?key=timeline-1"))
    await until(browser, lambda: browser.find("#job-state").text == "done", "shown done")
    attempts = "table.timeline tr.attempt"
    assert [r.split(":")[0] for r in browser.texts(f"{attempts} td:nth-child(2)")] == [
        "attempt 1", "attempt 2"]  # fmt: skip
    outcomes = browser.texts(f"{attempts} .outcome")
    assert outcomes[1] == "completed" and outcomes[0] != "completed", outcomes
    durations = browser.texts(f"{attempts} td.duration")
    assert all(d.endswith(" s") for d in durations), durations
    assert "done: 5" in browser.find("table.timeline tr.outcome-row").text
    assert browser.find("#job-args").text == "5"
    assert "enqueued" in browser.texts("table.timeline tr.enqueued td")
    browser.screenshot("job-timeline")
    no_console_errors(browser)


async def test_a_job_whose_worker_died_awaits_its_reoffer(browser: Browser, site: Site) -> None:
    """A live claim whose worker has no presence record (it died: no beat)
    is shown awaiting its re-offer, at its lease's end."""
    app = site.app
    await site.client.pause(app.prefix)  # no worker of the app takes it
    try:
        await app.enqueue("noop", 1, _key="orphan-1")
        async with Lens.from_url(app.redis) as lens:
            await lens.claim("orphan-1", "ghost", lease=60)
        await site.state("orphan-1", JobState.RUNNING)
        await sign_in(browser, site, TOKEN)
        browser.open(site.url("/ui/job?key=orphan-1"))
        await until(browser, lambda: browser.find("#job-state").text == "running", "running")
        said = browser.find("#job-orphaned").text
        assert said.startswith("awaiting re-offer: its worker ghost is dead"), said
        assert "offered again at 20" in said
        await app.cancel("orphan-1")
    finally:
        await site.client.resume(app.prefix)
    no_console_errors(browser)


async def test_bulk_retry_and_cancel_say_each_outcome(browser: Browser, site: Site) -> None:
    app = site.app
    site.failures["left"] = 3
    dead = [f"bulk-dead-{n}" for n in range(3)]
    for n, key in enumerate(dead):
        await app.enqueue("flaky", n, _key=key)
    for key in dead:
        await site.state(key, JobState.DEAD)
    await sign_in(browser, site, TOKEN)
    browser.open(site.url("/ui/jobs?state=dead&prefix=bulk-"))
    await until(browser, lambda: sorted(keys_shown(browser)) == dead, "the three dead listed")
    browser.find("#pick-all").click()
    assert all(box.is_selected() for box in browser.driver.find_elements(
        "css selector", "input.pick"))  # fmt: skip
    browser.screenshot("jobs-bulk")
    browser.find("#bulk-retry").click()
    await until(browser, lambda: browser.find("#flash").text == "3 retried", "3 retried said")
    for key in dead:
        await site.state(key, JobState.DONE)

    # Two waiting (their prefix paused, no worker takes them) and one done:
    # the two cancelled, the done one said over.
    await site.client.pause(app.prefix)
    try:
        waiting = [f"bulk-wait-{n}" for n in range(2)]
        for n, key in enumerate(waiting):
            await app.enqueue("noop", n, _key=key)
        browser.open(site.url("/ui/jobs?prefix=bulk-"))
        await until(browser, lambda: set(waiting) <= set(keys_shown(browser)), "waiting listed")
        await tick(browser, [*waiting, dead[0]])
        browser.find("#bulk-cancel").click()
        await until(browser, lambda: browser.find("#flash").text.startswith("2 cancelled"),
                    "cancelled said")  # fmt: skip
        assert browser.find("#flash").text == f"2 cancelled, 1 was over already ({dead[0]})"
        for key in waiting:
            assert (await app.status(key)).state is JobState.CANCELLED
    finally:
        await site.client.resume(app.prefix)
    no_console_errors(browser)


async def test_the_read_token_sees_the_jobs_and_is_refused_a_bulk_action(
    browser: Browser, site: Site
) -> None:
    site.failures["left"] = 1
    await site.app.enqueue("flaky", 9, _key="read-dead")
    await site.state("read-dead", JobState.DEAD)
    await sign_in(browser, site, READ)
    browser.open(site.url("/ui/jobs?state=dead&prefix=read-"))
    await until(browser, lambda: keys_shown(browser) == ["read-dead"], "listed")
    for action in ("retry", "cancel", "delete"):
        assert not browser.find(f"#bulk-{action}").is_enabled()
        status = browser.fetch("POST", f"/ui/jobs/bulk?action={action}&key=read-dead")
        assert status == 403, action
    assert (await site.app.status("read-dead")).state is JobState.DEAD
    no_console_errors(browser, expected=("403",))


async def test_search_by_task_state_and_key_prefix(browser: Browser, site: Site) -> None:
    app = site.app
    calls = [("noop", arg, f"find-noop-{n}") for n, arg in enumerate((11, 22, 31337))]
    for handle in await site.recorded(calls):
        await handle.result(timeout=10)
    site.failures["left"] = 1
    await app.enqueue("flaky", 1, _key="find-flaky-0")
    await site.state("find-flaky-0", JobState.DEAD)
    await sign_in(browser, site, TOKEN)
    browser.open(site.url("/ui/jobs?prefix=find-"))
    await until(browser, lambda: len(keys_shown(browser)) == 4, "all four")
    # By task, from the form's menu.
    browser.find("#search-task option[value='noop']").click()
    browser.find("#search-go").click()
    noops = [f"find-noop-{n}" for n in range(3)]
    await until(browser, lambda: sorted(keys_shown(browser)) == noops, "only noop's")
    assert set(browser.texts("table.jobs tbody td:nth-child(3)")) == {"noop"}
    # By a piece of the arguments, typed in the form (the listing shows them).
    field = browser.find("#search-text")
    field.clear()
    field.send_keys("3133")
    browser.find("#search-go").click()
    await until(browser, lambda: keys_shown(browser) == ["find-noop-2"], "only its arguments'")
    assert browser.find("tr[data-key='find-noop-2'] td.args").text == "31337"
    # By state.
    browser.open(site.url("/ui/jobs?prefix=find-&state=dead"))
    await until(browser, lambda: keys_shown(browser) == ["find-flaky-0"], "only the dead one")
    # By key prefix, typed in the form.
    browser.open(site.url("/ui/jobs"))
    field = browser.find("#search-prefix")
    field.clear()
    field.send_keys("find-noop-1")
    browser.find("#search-go").click()
    await until(browser, lambda: keys_shown(browser) == ["find-noop-1"], "only that key")
    assert browser.find("#jobs-summary").text.startswith("1 shown")  # by key: no total
    # By state alone the total is known, and is what the page lists.
    browser.open(site.url("/ui/jobs?state=dead"))
    await until(browser, lambda: "find-flaky-0" in keys_shown(browser), "the dead listed")
    assert browser.find("#jobs-total").text == str(len(keys_shown(browser)))
    no_console_errors(browser)


async def test_paging_through_120_jobs_shows_each_once(browser: Browser, site: Site) -> None:
    app = site.app
    keys = [f"page-{n:03}" for n in range(120)]
    handles = [await app.enqueue("noop", n, _key=key) for n, key in enumerate(keys)]
    for handle in handles:
        await handle.result(timeout=30)
    await sign_in(browser, site, TOKEN)
    browser.open(site.url("/ui/jobs?prefix=page-&limit=50&order=oldest"))
    seen: list[str] = []
    for page in range(3):
        shown = await until(browser, lambda: keys_shown(browser), f"page {page + 1}")
        seen += shown
        if page < 2:
            browser.find("#page-next").click()
            await until(browser, lambda s=shown: keys_shown(browser) != s, "the next page")
    assert not browser.driver.find_elements("css selector", "#page-next")  # the last page
    assert len(seen) == len(set(seen)) == 120
    assert sorted(seen) == keys
    browser.find("#page-first").click()
    await until(browser, lambda: len(keys_shown(browser)) == 50, "back to the first page")
    no_console_errors(browser)


async def test_each_app_shows_its_own_jobs_under_its_own_prefix(
    browser: Browser, site: Site
) -> None:
    await (await site.nu.enqueue("other", 1, _key="nu-only")).result(timeout=10)
    await (await site.app.enqueue("noop", 1, _key="task-only")).result(timeout=10)
    await sign_in(browser, site, TOKEN)
    browser.open(site.url("/ui/jobs"))
    # Two apps announced: every app's jobs shown at first, each app named.
    await until(browser, lambda: browser.find("#app-prefix").text == "nu/, task/", "both named")
    assert browser.texts("#search-app option") == ["every app", "nu/ (1 tasks)", "task/ (3 tasks)"]
    assert {"task-only", "nu-only"} <= set(keys_shown(browser))
    assert not browser.driver.find_elements("css selector", "#purge-link")  # one app's only
    # One app: its jobs only, its own prefix named.
    browser.find("#search-app option[value='nu/']").click()
    browser.find("#app-form button").click()
    await until(browser, lambda: browser.find("#app-prefix").text == "nu/", "nu/ named")
    assert keys_shown(browser) == ["nu-only"]
    browser.find("#search-app option[value='task/']").click()
    browser.find("#app-form button").click()
    await until(browser, lambda: browser.find("#app-prefix").text == "task/", "task/ named")
    assert "task-only" in keys_shown(browser) and "nu-only" not in keys_shown(browser)
    browser.open(site.url("/ui/jobs?app=*"))  # every app's: a job's link names its own app
    await until(browser, lambda: "nu-only" in keys_shown(browser), "listed")
    assert "app=nu%2F" in (browser.find("tr[data-key='nu-only'] a").get_attribute("href") or "")
    browser.find("tr[data-key='nu-only'] a").click()
    await until(browser, lambda: browser.find("#job-state").text == "done", "its page")
    browser.screenshot("jobs-app-nu")
    no_console_errors(browser)
