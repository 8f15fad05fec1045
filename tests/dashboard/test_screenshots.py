"""docs/ holds a light and a dark screenshot of every page of the route
table, and docs/dashboard.md shows each pair (scripts/screenshots takes
them): a page added to :data:`forum.dashboard.pages.ROUTES` fails this until
the script has been run, and a page removed until its images are gone."""

from __future__ import annotations

import re
from pathlib import Path

from forum.dashboard.openapi import describe
from forum.dashboard.pages import NEXT, ROOT
from tests.dashboard.showcase import HEIGHT, SHOT, THEMES, WIDTH, html_routes, page_name

DOCS = Path(__file__).resolve().parents[2] / "docs"
SHOTS = DOCS / "screenshots"
#: The first bytes of a PNG, and where its IHDR chunk holds width and height.
PNG = b"\x89PNG\r\n\x1a\n"


def size(png: Path) -> tuple[int, int]:
    head = png.read_bytes()[:24]
    assert head.startswith(PNG), png
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_each_page_has_a_light_and_a_dark_screenshot_shown_in_the_docs() -> None:
    names = [page_name(path) for path in html_routes(describe(ROOT, NEXT, lens=True))]
    expected = {f"{name}-{theme}.png" for name in names for theme in THEMES}
    on_disk = {p.name for p in SHOTS.iterdir() if SHOT.fullmatch(p.name)}
    assert on_disk == expected, "run scripts/screenshots"
    assert {size(SHOTS / name) for name in expected} == {(WIDTH, HEIGHT)}
    doc = (DOCS / "dashboard.md").read_text()
    shown = set(re.findall(r"\]\(screenshots/([a-z0-9-]+-(?:light|dark)\.png)\)", doc))
    assert expected <= shown, "run scripts/screenshots"
