"""What the dashboard is looked at with, in the tests that open every page and
in ``scripts/screenshots``: an app whose jobs are in every state a job can be
in for a while (done, retrying, dead, delayed, running, cancelled), with a
periodic task, run by a real worker of this process; and the pages to open,
taken from the node's own route table (its OpenAPI document), so a page
added to :data:`forum.dashboard.pages.ROUTES` is opened without a word here.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp

from forum.coordinator import Backoff
from forum.dashboard.pages import ROOT, ROUTES
from forum.tasks import App, Context, JobState
from tests.fixtures.nodes import eventually

#: The screenshots' themes, viewport (CSS pixels, scale 1) and names
#: (``<page>-<theme>.png``: :func:`page_name`), for scripts/screenshots and
#: the test that docs/ holds them.
THEMES = ("light", "dark")
WIDTH, HEIGHT = 1280, 800
SHOT = re.compile(r"[a-z0-9-]+-(light|dark)\.png")
#: A worker's lease: its record is rewritten every third of it, so the
#: Workers page has it alive from the first look.
LEASE = 3.0
#: The states the jobs are put in, each held until the showcase ends.
STATES = (
    JobState.DONE,
    JobState.RETRYING,
    JobState.DEAD,
    JobState.DELAYED,
    JobState.RUNNING,
    JobState.CANCELLED,
)


@dataclass(frozen=True, slots=True)
class Shown:
    """The app, and the key of one job in each of :data:`STATES`."""

    app: App
    keys: Mapping[JobState, str]


def showcase_app(node: str, redis: str, token: str | None = None) -> tuple[App, asyncio.Event]:
    """An app of image jobs: ``resize`` succeeds, ``publish`` always fails,
    ``upload`` fails its first attempt and waits an hour for its retry,
    ``render`` runs until the event returned is set, and ``report`` is
    periodic (every minute)."""
    app = App(node, redis, token=token)
    rendering = asyncio.Event()

    @app.task(retries=0)
    def resize(ctx: Context, image: int, width: int) -> str:
        return f"image {image} at {width} px"

    @app.task(retries=0)
    def publish(ctx: Context, image: int) -> None:
        raise RuntimeError(f"image {image}: the CDN refused the upload (HTTP 503)")

    @app.task(retries=2, backoff=Backoff(3600.0, 3600.0, 0.0))
    def upload(ctx: Context, image: int) -> str:
        if ctx.attempt == 1:
            raise ConnectionError(f"image {image}: storage unreachable")
        return f"image {image} uploaded"

    @app.task(retries=0)
    async def render(ctx: Context, image: int) -> str:
        await rendering.wait()
        return f"image {image} rendered"

    @app.cron(every=60.0)
    def report(ctx: Context) -> int:
        return 3

    return app, rendering


@contextlib.asynccontextmanager
async def showcase(
    node: str,
    redis: str,
    token: str | None = None,
    warm: Callable[[App], Awaitable[None]] | None = None,
) -> AsyncIterator[Shown]:
    """:func:`showcase_app`, open, with a worker running, ``warm(app)``
    awaited first if given, then a job in each of :data:`STATES` (the
    newest jobs); the running job released, the worker stopped and drained
    on the way out."""
    app, rendering = showcase_app(node, redis, token)
    stop = asyncio.Event()
    async with app, asyncio.TaskGroup() as group:
        group.create_task(app.run_worker(stop=stop, lease=LEASE, take_wait=0.2))
        try:
            if warm is not None:
                await warm(app)
            yield Shown(app, await _jobs(app))
        finally:
            rendering.set()
            stop.set()


async def _jobs(app: App) -> dict[JobState, str]:
    for width in (320, 640, 1280):
        await (await app.enqueue("resize", 7, width)).result(timeout=20)
    keys = {
        JobState.DONE: (await app.enqueue("resize", 8, 1920)).key,
        JobState.RETRYING: (await app.enqueue("upload", 9)).key,
        JobState.DEAD: (await app.enqueue("publish", 10)).key,
        JobState.DELAYED: (await app.enqueue("resize", 11, 640, _delay=3600)).key,
        JobState.RUNNING: (await app.enqueue("render", 12)).key,
        JobState.CANCELLED: (await app.enqueue("resize", 13, 640, _delay=3600)).key,
    }
    await app.cancel(keys[JobState.CANCELLED])
    for state, key in keys.items():

        async def there(key: str = key, state: JobState = state) -> bool:
            return (await app.status(key)).state is state

        await eventually(there, timeout=20, what=f"a job {state}")
    return keys


def samples(shown: Shown) -> dict[str, str]:
    """A value for each required query parameter a page of the route table
    has: a job's key (the dead one's: its page shows the most)."""
    return {"key": shown.keys[JobState.DEAD]}


async def pages(node: str, given: Mapping[str, str], token: str | None = None) -> list[str]:
    """The path (with its query) of every page of the node's dashboard
    (:func:`html_routes` of its OpenAPI document), its required parameters
    from ``given`` (``LookupError`` naming one it lacks: add it to
    :func:`samples`)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.get(f"{node}/v1/openapi.json") as answer,
    ):
        answer.raise_for_status()
        described: dict[str, Any] = (await answer.json())["paths"]
    found = []
    for path, needed in html_routes(described).items():
        missing = [name for name in needed if name not in given]
        if missing:
            raise LookupError(f"{path} needs {', '.join(missing)}: add a value to samples()")
        query = urlencode({name: given[name] for name in needed})
        found.append(f"{path}?{query}" if query else path)
    return found


def html_routes(described: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each ``GET`` route of :data:`~forum.dashboard.pages.ROUTES` whose
    answer is HTML, as ``described`` (OpenAPI path items) says, in the
    table's order, with the names of its required query parameters."""
    found = {}
    for path in ROUTES:
        get = described[path].get("get")
        if get is None or "text/html" not in get["responses"].get("200", {}).get("content", {}):
            continue
        found[path] = [p["name"] for p in get.get("parameters", []) if p.get("required")]
    return found


def page_name(page: str) -> str:
    """A page's name for its screenshot: ``/ui`` is ``overview``,
    ``/ui/jobs/purge?...`` is ``jobs-purge``."""
    path = page.partition("?")[0].removeprefix(ROOT).strip("/")
    return path.replace("/", "-") or "overview"
