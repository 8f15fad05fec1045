"""The dashboard's Jobs, Workers and Lens panels in a real headless Chromium,
against a real ``forum serve --lens-url`` and a real ``redis-server``, with
the task layer's workers running in this process: the Workers panel lists a
running worker; the Prefixes panel counts a running job and a retry waiting
out its backoff in their group; a dead job is requeued from its page and then shows done; a
queued job is cancelled from its page; purge asks first; a double take the
workers counted shows in Guarantees, with the warnings of a Redis without
AOF; a read token sees the jobs but cannot act. Screenshots of each panel
(tests/dashboard/browser.py prints where); the console must hold no error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import pytest

from forum.coordinator import Backoff, Job, Lens, LensConfig, Worker
from forum.coordinator.checks import store_check
from forum.coordinator.presence import list_workers
from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from forum.tasks import App, Context, JobState
from forum.tasks.message import key_prefix
from forum.tasks.queues import DEFAULT_QUEUE, queue_prefix
from tests.dashboard.browser import Browser, browser
from tests.dashboard.test_browser import no_console_errors
from tests.fixtures.clusters import peers_are, proxied_cluster
from tests.fixtures.nodes import ForumNodes, eventually
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.toxiproxy import Toxiproxy
from tests.tasks.conftest import working

__all__ = ["browser"]  # the module-scoped fixture, used by name

pytestmark = pytest.mark.slow

#: A short lease: a worker's record is rewritten every third of it.
LEASE = 1.5


def make_app(
    url: str, redis: str, token: str | None = None
) -> tuple[App, dict[str, int], asyncio.Event]:
    """An app whose ``flaky`` task fails while ``failures["left"]`` is above
    0, whose ``later`` fails once and is retried a minute later, and whose
    ``slow`` runs until the event returned is set."""
    app = App(url, redis, token=token)
    failures = {"left": 0}
    gate = asyncio.Event()

    @app.task(retries=0)
    def flaky(ctx: Context, n: int) -> int:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise RuntimeError(f"flaky {n} failed on purpose")
        return n * 2

    @app.task(retries=1, backoff=Backoff(60.0, 60.0, 0.0))
    def later(ctx: Context, n: int) -> int:
        if ctx.attempt == 1:
            raise RuntimeError("later: the first attempt fails")
        return n

    @app.task(retries=0)
    async def slow(ctx: Context, n: int) -> int:
        await gate.wait()
        return n

    return app, failures, gate


async def until(page: Browser, predicate: Callable[[], Any], what: str) -> Any:
    """``page.until`` in a thread: the workers run on this test's event loop,
    which a wait on the browser must not stop."""
    return await asyncio.to_thread(page.until, predicate, what)


def state_of(app: App, key: str, state: JobState) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await app.status(key)).state is state

    return check


async def test_jobs_workers_and_the_lens_in_the_browser(
    browser: Browser, forum_nodes: ForumNodes, volatile_redis: RedisServer
) -> None:
    browser.reset()
    node = await forum_nodes.start("j", "--lens-url", volatile_redis.url)
    app, failures, gate = make_app(node.url, volatile_redis.url)
    async with app, ForumClient(node.url) as client, working(app, lease=LEASE) as (worker,):
        # A dead job: its one attempt fails.
        failures["left"] = 1
        dead = await app.enqueue("flaky", 7)
        await eventually(state_of(app, dead.key, JobState.DEAD), what="the job dead")

        # Workers: the running worker, with what it counted.
        browser.open(f"{node.url}/ui/workers")
        row = f"tr[data-worker='{worker.owner}']"
        await until(browser, lambda: browser.find(f"{row} td.liveness").text == "alive", "listed")
        await until(browser, lambda: browser.find(f"{row} td.done").text == "0", "its counts")
        browser.screenshot("workers")

        # Prefixes: a retry waiting out its backoff (the worker reserved it
        # again and holds it parked) and a job running, each in its group,
        # from the worker's presence record.
        waiting = await app.enqueue("later", 1)
        await eventually(state_of(app, waiting.key, JobState.RETRYING), what="retrying")
        await eventually(lambda: worker.stats().deferred >= 1, what="the retry parked")
        running = await app.enqueue("slow", 2)
        await eventually(state_of(app, running.key, JobState.RUNNING), what="running")
        await eventually(lambda: _beat_both(app), what="both in the worker's record")
        browser.open(f"{node.url}/ui/prefixes")
        tasks = f"tr[data-prefix='{app.prefix.decode()}']"
        await until(browser, lambda: browser.find(f"{tasks} td.in-flight").text == "1", "running")
        await until(browser, lambda: browser.find(f"{tasks} td.retrying").text == "1", "retrying")
        browser.screenshot("prefixes-lens")
        gate.set()
        assert await running.result(timeout=10) == 2

        # The dead job's page: error and traceback; requeued from it, then done.
        browser.open(f"{node.url}/ui/jobs?key={dead.key}")
        await until(browser, lambda: browser.find("#job-state").text == "dead", "shown dead")
        assert "flaky 7 failed on purpose" in browser.find("#job-error").text
        assert "RuntimeError" in browser.find("#job-traceback").text
        assert "flaky" in browser.find("#job-payload").text
        browser.screenshot("job-dead")
        browser.find("#retry").click()
        await until(browser, lambda: "requeued" in browser.find("#flash").text, "requeued said")
        await until(browser, lambda: browser.find("#job-state").text == "done", "shown done")
        assert browser.find("#job-result").text == "14"
        assert "completed" in " ".join(browser.texts("table.history td.event"))
        assert await dead.result(timeout=5) == 14

        # A queued job (its prefix paused, so no worker takes it) cancelled from its page.
        await client.pause(app.prefix)
        queued = await app.enqueue("flaky", 8)
        await eventually(state_of(app, queued.key, JobState.QUEUED), what="queued")
        browser.open(f"{node.url}/ui/job?key={queued.key}")
        await until(browser, lambda: browser.find("#job-state").text == "queued", "shown queued")
        head = Pattern(key_prefix(queue_prefix(app.prefix, DEFAULT_QUEUE), queued.key))
        escaped = await client.read_entry(head)
        assert escaped is not None and escaped.props.key is not None
        browser.find("#cancel").click()
        await until(browser, lambda: browser.find("#job-state").text == "cancelled", "cancelled")
        assert (await app.status(queued.key)).state is JobState.CANCELLED
        assert await client.count(head) == 0  # its tuple withdrawn by the cancel
        # A copy the withdraw missed (under the job's key, as a peer's would be):
        # turned away as done below, the worker's double take.
        await client.write(escaped.payload, key=escaped.props.key)

        # A double take's leftovers: two copies of one job in the space (with
        # Guarantees looked at before, so its per-minute rate has a start).
        browser.open(f"{node.url}/ui/guarantees")
        assert browser.find("#double-takes-total").text == "0"
        twice = await app.enqueue("flaky", 9)
        copy = await client.read(
            Pattern(key_prefix(queue_prefix(app.prefix, DEFAULT_QUEUE), twice.key))
        )
        assert copy is not None
        await client.write(copy)
        await client.resume(app.prefix)
        assert await twice.result(timeout=10) == 18
        await eventually(lambda: _counted(worker), what="the second copy turned away")

        # Guarantees: the double take the worker counted, and Redis's shortfalls.
        browser.open(f"{node.url}/ui/guarantees")
        await until(browser, lambda: browser.find("#double-takes-total").text == "1", "double take")
        # The worker's own count comes with its next beat (the total is the Lens's, at once).
        await until(browser, lambda: browser.find(f"#worker-guarantees {row} td.double-takes")
                    .text == "1", "the worker's count")  # fmt: skip
        await until(browser, lambda: browser.find("#double-takes-minute").text == "1", "rate")
        assert "reachable" in browser.find("#lens-reach").text
        assert "appendonly" in browser.find("#durability").text
        assert "none has run" in browser.find("#last-check").text
        # What `forum cluster demo` keeps at its end (deploy/forum/deploy/workload.py keep_verdict).
        await store_check(LensConfig(url=volatile_redis.url), "OK: attempted=3 lost=0", True)
        await until(browser, lambda: "OK: attempted=3" in browser.find("#last-check").text,
                    "the demo's verdict")  # fmt: skip
        browser.screenshot("guarantees-lens")

        # Purge: a confirmation step first, then the dead are gone.
        failures["left"] = 1
        gone = await app.enqueue("flaky", 10)
        await eventually(state_of(app, gone.key, JobState.DEAD), what="dead again")
        browser.open(f"{node.url}/ui/jobs?state=dead")
        await until(browser, lambda: browser.texts(f"tr[data-key='{gone.key}']"), "listed dead")
        browser.screenshot("jobs")
        browser.find("#purge-link").click()
        await until(browser, lambda: "1 dead job" in browser.find("#purge-count").text, "asks")
        assert await _dead_letters(client, app) == 1  # asking purged nothing
        browser.screenshot("purge")
        browser.find("#purge-confirm").click()
        await until(browser, lambda: "purged 1 dead jobs" in browser.find("#flash").text, "purged")
        assert await _dead_letters(client, app) == 0
        no_console_errors(browser)
        browser.reset()

        # A raw job's page (no task record: a claim key a raw Worker holds),
        # and the answers for a key no job can have and one nothing knows.
        async with Lens.from_url(volatile_redis.url) as lens:
            await lens.claim("raw-1", "someone", lease=60)
        async with aiohttp.ClientSession() as http:
            for key, code, said in (
                ("raw-1", 200, "raw job (no task record)"),
                ("", 400, "a job key is a non-empty string"),
                ("nothing/here", 404, "no job &#39;nothing/here&#39;"),
            ):
                async with http.get(f"{node.url}/ui/job", params={"key": key}) as answer:
                    assert (answer.status, said in await answer.text()) == (code, True), key
            async with http.get(f"{node.url}/ui/job?key=raw-1") as answer:
                assert "someone, token " in await answer.text()
            # What no page or action can take is a 400, and nothing is done.
            origin = {"Origin": node.url}
            for method, path in (
                ("GET", "/ui/jobs?state=bogus"),
                ("POST", "/ui/jobs/act?action=bogus"),
                ("POST", "/ui/jobs/act?action=retry&state=bogus"),
                ("POST", "/ui/job/retry"),
                ("POST", "/ui/jobs/purge"),
            ):
                async with http.request(
                    method, node.url + path, headers=origin, allow_redirects=False
                ) as answer:
                    assert answer.status == 400, path


async def _beat_both(app: App) -> bool:
    """Whether the worker's last beat named a running job and a parked retry."""
    async with Lens.from_url(app.redis, namespace=app.namespace) as lens:
        return any(w.heads and w.retrying for w in await list_workers(lens))


async def _counted(worker: Worker) -> bool:
    return worker.stats().double_takes == 1


async def _dead_letters(client: ForumClient, app: App) -> int:
    return await client.count(Pattern(app.dead_prefix + app.prefix))


async def test_a_read_token_sees_the_jobs_but_cannot_act(
    browser: Browser, forum_nodes: ForumNodes, redis_url: str
) -> None:
    node = await forum_nodes.start(
        "r", "--read-token", "look", "--lens-url", redis_url, token="s3cret"
    )
    app, failures, _ = make_app(node.url, redis_url, token="s3cret")
    stop = asyncio.Event()
    async with app, asyncio.TaskGroup() as group:
        group.create_task(app.run_worker(stop=stop, lease=LEASE, take_wait=0.2))
        failures["left"] = 1
        dead = await app.enqueue("flaky", 1)
        await eventually(state_of(app, dead.key, JobState.DEAD), what="dead")
        browser.reset()
        browser.open(f"{node.url}/ui/login")
        browser.find("#token").send_keys("look")
        browser.find("#login button").click()
        await until(
            browser, lambda: browser.find(".scope").text == "read-only", "signed in to read"
        )
        browser.open(f"{node.url}/ui/job?key={dead.key}")
        await until(browser, lambda: browser.find("#job-state").text == "dead", "shown")
        assert not browser.find("#retry").is_enabled()
        assert not browser.find("#cancel").is_enabled()
        assert browser.fetch("POST", f"/ui/job/retry?key={dead.key}") == 403
        assert browser.fetch("POST", "/ui/jobs/purge?confirm=yes") == 403
        assert (await app.status(dead.key)).state is JobState.DEAD
        async with ForumClient(node.url, token="s3cret") as client:
            assert await _dead_letters(client, app) == 1
        no_console_errors(browser, expected=("403",))
        browser.reset()
        stop.set()


@pytest.mark.chaos
async def test_a_double_take_across_a_partition_shows_in_guarantees(
    browser: Browser, forum_nodes: ForumNodes, toxiproxy: Toxiproxy, redis_url: str
) -> None:
    """Two nodes linked through Toxiproxy, a raw Worker on each, one Lens
    both reach (Redis is not cut)::

        t0  job/1 written on a, replicated to b
        t1  partition {a} | {b}, both ways
        t2  wa on a takes it, claims its key, runs it, completes it (done
            marker), acks its copy (a Take on a)
        t3  wb on b takes its copy: its claim meets the done marker, so it is
            turned away (AlreadyDone: a double take caught) and never runs
        t4  heal: each node learns the other's Take of one Write, and counts
            a double take

    Guarantees shows the node's counts and the workers' (wb caught one, the
    total 1), the job's page its one completion, and the effect ran once."""
    nodes, links = await proxied_cluster(
        forum_nodes, toxiproxy, "ab", args=("--lens-url", redis_url)
    )
    a = nodes[0]
    effects: list[str] = []

    async def effect(job: Job) -> None:
        await job.verify()
        effects.append(job.key)

    async with AsyncExitStack() as stack:
        on_a, on_b = [await stack.enter_async_context(ForumClient(n.url)) for n in nodes]
        lens = await stack.enter_async_context(Lens.from_url(redis_url))
        for name, client in (("a", on_a), ("b", on_b)):
            own = {p.url for (source, _), p in links.items() if source == name}
            await eventually(lambda cl=client, u=own: peers_are(cl, u), what=f"{name} via proxies")
        key = str(await on_a.write(b"job/1"))
        await eventually(lambda: _count(on_b, 1), what="the job replicated to b")
        browser.reset()
        browser.open(f"{a.url}/ui/guarantees")  # looked at: the peers are sampled from now
        wa, wb = (
            Worker(space, lens, Pattern(b"job/"), effect, concurrency=1, lease=LEASE, owner=owner,
                   take_wait=0.2, reaper_interval=0.2)
            for space, owner in ((on_a, "wa"), (on_b, "wb"))
        )  # fmt: skip
        async with asyncio.TaskGroup() as group:
            try:
                async with toxiproxy.partition(links, {"a"}, {"b"}):
                    group.create_task(wa.run())
                    await eventually(lambda: wa.stats().done == 1, what="wa ran the job")
                    assert await _count(on_b, 1)  # b has not heard of a's Take
                    group.create_task(wb.run())
                    await eventually(lambda: wb.stats().double_takes == 1, what="wb turned away")
                    # wa acks a completed job with its next reserve (or a moment
                    # later): until its Take is made, b's Take would meet a
                    # reservation on a, not a taken tuple, and neither node
                    # would count a double take. Each side's own Take first.
                    for client in (on_a, on_b):
                        await eventually(lambda c=client: _settled(c), what="the copy acked")
                await until(browser, lambda: _shown(browser, "tr[data-node] td.double-takes")
                            == ["1", "1"], "each node's double take")  # fmt: skip
                await until(browser, lambda: _shown(browser, "#worker-guarantees tr[data-worker] "
                            "td.double-takes") == ["0", "1"], "the workers' counts")  # fmt: skip
                assert browser.find("#double-takes-total").text == "1"
                browser.screenshot("guarantees-partition")
            finally:
                wa.stop()
                wb.stop()
        # The Lens's record of the key: one claim and its completion, both
        # wa's; wb's copy never held it.
        browser.open(f"{a.url}/ui/job?key={key}")
        await until(browser, lambda: browser.find("#job-state").text == "done", "shown done")
        assert "raw job (no task record)" in browser.find("#job-kind").text
        assert browser.texts("table.history td.event") == ["claimed", "completed"]
        assert [row.split()[-2] for row in browser.texts("table.history tbody tr")] == ["wa"] * 2
        assert effects == [key]
        assert (wa.stats().double_takes, wb.stats().done) == (0, 0)
        no_console_errors(browser)
        browser.reset()


def _shown(page: Browser, css: str) -> list[str]:
    return sorted(page.texts(css))


async def _count(client: ForumClient, n: int) -> bool:
    return await client.count(Pattern(b"job/")) == n


async def _settled(client: ForumClient) -> bool:
    """Nothing of job/ live or reserved on the node: its copy is taken for good."""
    return await _count(client, 0) and (await client.status()).reserved == 0


async def test_without_a_lens_the_panels_say_so(browser: Browser, forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("n")
    browser.reset()
    for panel in ("jobs", "workers", "guarantees", "job?key=x", "jobs/purge"):
        browser.open(f"{node.url}/ui/{panel}")
        assert "No Lens configured" in browser.find("#no-lens").text
    no_console_errors(browser)
    browser.reset()
