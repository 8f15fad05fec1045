"""Screenshots of every page of the dashboard, light and dark, for docs/dashboard.md.

Run by ``scripts/screenshots``. It starts what the pages show: a local
cluster of three nodes and its Redis (forum.deploy's ``Cluster``, as
``forum cluster`` and scripts/demo start them, each node with ``--lens-url``),
and in this process a worker of an app of a few tasks, one periodic
(tests/dashboard/showcase.py, which the browser tests use too), given a job a
second for ``--warm`` seconds and then a job in every state (done, retrying,
dead, delayed, running, cancelled); raw tuples are written and taken all
along, and the pages looked at, so the rates have something to draw. It opens
each page of the route table (the pages tests/dashboard/test_pages_browser.py
opens) in headless Chromium at a fixed 1280x800 viewport, in the light and
the dark theme (the system's preference, as the browser reports it), and
writes ``<out>/<page>-<light|dark>.png`` (squeezed with pngquant and optipng
when they are on PATH), removes the screenshots of pages that are gone, and
rewrites docs/dashboard.md's list of them (between its ``screenshots``
markers). Everything it started is stopped on the way out, SIGINT and
SIGTERM included.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # tests.dashboard: the showcase and the browser

from forum.dashboard.pages import ROOT  # noqa: E402
from forum.deploy.cluster import Cluster, ClusterConfig  # noqa: E402
from forum.node.client.remote import ForumClient  # noqa: E402
from forum.node.core.space import Pattern  # noqa: E402
from forum.tasks import App  # noqa: E402
from tests.dashboard.appearance import prefer  # noqa: E402
from tests.dashboard.browser import FLAGS, Browser, binaries, chrome  # noqa: E402
from tests.dashboard.showcase import (  # noqa: E402
    HEIGHT,
    SHOT,
    THEMES,
    WIDTH,
    page_name,
    pages,
    samples,
    showcase,
)

DOC = REPO / "docs" / "dashboard.md"
#: docs/dashboard.md's lines between these are the script's.
START, END = "<!-- screenshots: start (scripts/screenshots) -->", "<!-- screenshots: end -->"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument(
        "--out", type=Path, default=REPO / "docs" / "screenshots", help="where the PNGs go"
    )
    parser.add_argument(
        "--warm", type=float, default=60.0, help="seconds of a trickle of jobs before the shots"
    )
    parser.add_argument("--no-doc", action="store_true", help="leave docs/dashboard.md as it is")
    return parser.parse_args()


async def busy(node: str, stop: asyncio.Event) -> None:
    """Until ``stop``: a tuple written under ``events/`` four times a second
    and most of them taken (the Overview's writes/s and takes/s, the
    Prefixes' rates), and those two pages looked at every 2 s (a node
    samples, and counts a group's rates, only while someone looks)."""
    async with ForumClient(node) as client, aiohttp.ClientSession() as http:
        n = 0
        while not stop.is_set():
            n += 1
            await client.write(f"events/page-view/{n}".encode())
            if n % 4:
                await client.take(Pattern(b"events/"), timeout=0)
            if n % 8 == 1:
                for page in (ROOT, f"{ROOT}/prefixes"):
                    async with http.get(node + page) as answer:
                        await answer.read()
            await asyncio.sleep(0.25)


def jobs_for(seconds: float) -> Callable[[App], Awaitable[None]]:
    """A job of the app a second for ``seconds``, done by its worker (the
    per-task figures draw them), before the showcase's jobs in every state."""

    async def warm(app: App) -> None:
        for n in range(int(seconds)):
            await app.enqueue("resize", 100 + n, 320 * (1 + n % 4))
            await asyncio.sleep(1.0)

    return warm


def shoot(profile: Path, node: str, paths: list[str], out: Path) -> tuple[list[Path], list[str]]:
    """Each page in each theme, at :data:`WIDTH` x :data:`HEIGHT`; the files
    written, and each page's title (the last part of its ``<title>``)."""
    found = binaries()
    if found is None:
        raise SystemExit("chromium and chromedriver are needed (scripts/install-tools)")
    flags = [f for f in FLAGS if not f.startswith("--window-size=")]
    driver = chrome(found, profile, *flags, f"--window-size={WIDTH},{HEIGHT}")
    written: list[Path] = []
    titles: dict[str, str] = {}
    try:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )
        page = Browser(driver, out)
        for theme in THEMES:
            prefer(page, theme)
            for path in paths:
                page.open(node + path)
                titles.setdefault(path, driver.title.rpartition(" · ")[2])
                written.append(page.screenshot(f"{page_name(path)}-{theme}"))
                print(f"  {written[-1].name}")
    finally:
        driver.quit()
    return written, [titles[path] for path in paths]


def squeeze(files: list[Path]) -> None:
    """Make the PNGs smaller with the tools at hand: pngquant (a 256-colour
    palette, which a page of flat colours keeps), then optipng (lossless)."""
    if shutil.which("pngquant"):
        subprocess.run(
            ["pngquant", "--force", "--skip-if-larger", "--ext", ".png", "--quality", "70-95",
             *map(str, files)],
            check=False,
        )  # fmt: skip
    if shutil.which("optipng"):
        subprocess.run(["optipng", "-quiet", "-o2", *map(str, files)], check=True)


def forget_others(out: Path, written: list[Path]) -> None:
    """Remove the screenshots of pages there are no longer."""
    for old in out.iterdir():
        if SHOT.fullmatch(old.name) and old not in written:
            old.unlink()


def rewrite_doc(out: Path, paths: list[str], titles: list[str]) -> None:
    """docs/dashboard.md's list of screenshots: a light/dark pair per page."""
    where = out.relative_to(DOC.parent).as_posix()
    lines = [START]
    for path, title in zip(paths, titles, strict=True):
        name = page_name(path)
        lines += [
            "",
            f"**{title}** (`{path.partition('?')[0]}`)",
            "",
            "| light | dark |",
            "| --- | --- |",
            f"| ![{title}, light]({where}/{name}-light.png) "
            f"| ![{title}, dark]({where}/{name}-dark.png) |",
        ]
    lines.append(END)
    text = DOC.read_text()
    before, start, rest = text.partition(START)
    _, end, after = rest.partition(END)
    if not (start and end):
        raise SystemExit(f"{DOC} has no {START} ... {END} block to fill")
    DOC.write_text(before + "\n".join(lines) + after)


async def main(args: argparse.Namespace) -> None:
    this = asyncio.current_task()
    assert this is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):  # stop everything on the way out
        loop.add_signal_handler(signum, this.cancel)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="forum-screenshots-") as tmp:
        print("starting a cluster of 3 nodes and its Redis")
        async with (
            Cluster(ClusterConfig(nodes=3, root=Path(tmp) / "cluster")) as cluster,
            asyncio.TaskGroup() as group,
        ):
            node = cluster.nodes[0].url
            print(f"a worker on {node}, {args.warm:g} s of jobs, then jobs in every state")
            stop = asyncio.Event()
            group.create_task(busy(node, stop))
            try:
                async with showcase(node, cluster.redis_url, warm=jobs_for(args.warm)) as shown:
                    paths = await pages(node, samples(shown))
                    print(f"{len(paths)} pages x {len(THEMES)} themes at {WIDTH}x{HEIGHT}")
                    # In a thread: the worker runs on this loop meanwhile.
                    written, titles = await asyncio.to_thread(
                        shoot, Path(tmp) / "chromium", node, paths, args.out
                    )
            finally:
                stop.set()
    squeeze(written)
    forget_others(args.out, written)
    if not args.no_doc:
        rewrite_doc(args.out, paths, titles)
    size = sum(f.stat().st_size for f in written)
    print(f"{len(written)} screenshots, {size / 1024:.0f} KiB, in {args.out}")


if __name__ == "__main__":
    try:
        asyncio.run(main(arguments()))
    except asyncio.CancelledError:
        raise SystemExit("stopped: what it had started is stopped") from None
