"""How a page the browser shows looks: its theme, the contrast of its text,
and what it fetched. Measured by the page's own computed styles (what the
browser painted from, after every stylesheet and variable), so a page's CSS
of its own is judged as the shared one is.

Contrast is WCAG 2's: the ratio of the relative luminances of a text's colour
and of the colour behind it (its and its ancestors' backgrounds, composed),
at least 4.5 for text, 3 for large text (24 px, or 18.66 px bold): level AA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.dashboard.browser import Browser

#: WCAG AA's least contrast for text, and for large text.
AA_TEXT = 4.5
AA_LARGE = 3.0

_MEASURE = """
const AA_TEXT = arguments[0], AA_LARGE = arguments[1];
// A computed colour as [r, g, b, a] (0-255, alpha 0-1): rgb(), rgba() or color(srgb ...).
function rgba(text) {
  let m = /^rgba?\\(([^)]*)\\)$/.exec(text);
  if (m) {
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  }
  m = /^color\\(srgb ([^)]*)\\)$/.exec(text);
  if (m) {
    const p = m[1].split(/[\\s\\/]+/).filter(Boolean).map(Number);
    return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1];
  }
  return null;  // none, a gradient, url(...): not a colour to judge
}
function over(top, below) {
  const a = top[3];
  return [0, 1, 2].map(i => top[i] * a + below[i] * (1 - a)).concat([1]);
}
// What is painted behind an element: the backgrounds from the body in.
function behind(element) {
  const layers = [];
  for (let e = element; e; e = e.parentElement) {
    const c = rgba(getComputedStyle(e).backgroundColor);
    if (c && c[3] > 0) {
      layers.push(c);
      if (c[3] >= 1) break;
    }
  }
  return layers.reverse().reduce((below, top) => over(top, below), [255, 255, 255, 1]);
}
function luminance(c) {
  const [r, g, b] = c.slice(0, 3).map(v => {
    v /= 255;
    return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}
function ratio(a, b) {
  const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}
const unreadable = [];
let judged = 0;
for (const element of document.body.querySelectorAll("*")) {
  const own = Array.from(element.childNodes).some(
    n => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
  if (!own || element.closest("option, :disabled, [hidden], script, style")) continue;
  const style = getComputedStyle(element);
  if (style.visibility !== "visible" || element.getClientRects().length === 0) continue;
  // SVG text is painted with its fill; HTML text with its colour.
  let colour = rgba(element instanceof SVGElement ? style.fill : style.color);
  if (!colour) continue;
  const ground = behind(element);
  colour = over(colour, ground);
  const size = parseFloat(style.fontSize), bold = parseInt(style.fontWeight, 10) >= 700;
  const least = size >= 24 || (size >= 18.66 && bold) ? AA_LARGE : AA_TEXT;
  const measured = ratio(colour, ground);
  judged += 1;
  if (measured < least) {
    unreadable.push({
      element: element.tagName.toLowerCase() + (element.id ? "#" + element.id : "")
        + (element.className && typeof element.className === "string"
           ? "." + element.className.trim().split(/\\s+/).join(".") : ""),
      text: element.textContent.trim().slice(0, 40),
      ratio: Math.round(measured * 100) / 100,
      least: least,
    });
  }
}
const navigation = performance.getEntriesByType("navigation")[0];
return {
  status: navigation ? navigation.responseStatus : 0,
  origin: location.origin,
  fetched: performance.getEntriesByType("resource").map(e => e.name),
  scheme: getComputedStyle(document.documentElement).colorScheme,
  background: getComputedStyle(document.body).backgroundColor,
  judged: judged,
  unreadable: unreadable,
  inline_scripts: document.querySelectorAll("script:not([src])").length,
};
"""


@dataclass(frozen=True, slots=True)
class Look:
    """What :func:`look` measured on the page the browser shows."""

    status: int  # the HTTP status the page came with
    origin: str  # its scheme, host and port
    #: Every URL the page fetched (stylesheet, scripts, its refreshes).
    fetched: tuple[str, ...]
    #: The root's computed ``color-scheme`` ("light" or "dark").
    scheme: str
    #: The body's computed background colour (``rgb(...)``).
    background: str
    #: How many elements with text were judged.
    judged: int
    #: Each text below AA: its element, its first words, its ratio and the least.
    unreadable: tuple[dict[str, Any], ...]
    #: Scripts written in the page (a strict CSP would refuse them).
    inline_scripts: int

    @property
    def foreign(self) -> list[str]:
        """What the page fetched from anywhere but its own node."""
        return [url for url in self.fetched if not url.startswith(self.origin + "/")]


def look(page: Browser) -> Look:
    """Measure the page ``page`` shows now."""
    measured: dict[str, Any] = page.driver.execute_script(_MEASURE, AA_TEXT, AA_LARGE)
    fetched, unreadable = tuple(measured.pop("fetched")), tuple(measured.pop("unreadable"))
    return Look(fetched=fetched, unreadable=unreadable, **measured)


def prefer(page: Browser, scheme: str) -> None:
    """Have the browser say the system prefers ``scheme`` ("light" or
    "dark"), as an operating system's setting would, for the pages opened
    from now on (Chromium's DevTools protocol: emulated media)."""
    page.driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
    )
