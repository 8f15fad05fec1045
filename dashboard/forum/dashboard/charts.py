"""Line charts as inline SVG, drawn on the server: axes with labelled ticks
and units, one line per series, no script and nothing fetched.

A chart is plain markup (:class:`markupsafe.Markup`, every text escaped):
the page embeds it as is, and it needs only the ``.chart`` rules at the end
of dashboard.css (colours from the theme's variables, so light and dark
both work). A series' missing point (``None``: a minute with nothing to
measure) is a gap in its line, not a zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

#: The margins around the plot, in CSS pixels: room for the tick labels.
LEFT, RIGHT, TOP, BOTTOM = 46, 8, 8, 20
#: How many lines a chart draws at most (a class each: .s0 .. .s3).
MAX_SERIES = 4


@dataclass(frozen=True, slots=True)
class Series:
    """One line: a name for the legend, and ``(x, y)`` points in order of ``x``
    (``y`` ``None``: no value there, a gap)."""

    name: str
    points: Sequence[tuple[float, float | None]]


@dataclass(frozen=True, slots=True)
class Axis:
    """The x axis: its range and its labelled ticks (``(x, label)``)."""

    start: float
    end: float
    ticks: Sequence[tuple[float, str]]


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """Ticks from 0 to at least ``top``, about ``count`` of them, each a
    multiple of 1, 2 or 5 times a power of ten."""
    if not top > 0 or not math.isfinite(top):
        return [0.0, 1.0]
    rough = top / count
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    n = math.ceil(top / step - 1e-9)
    return [i * step for i in range(n + 1)]


def figure(value: float) -> str:
    """A tick's or a reading's number, short (``0.25``, ``1.5k``, ``12``)."""
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.3g}"


def line_chart(
    series: Sequence[Series],
    x: Axis,
    *,
    unit: str,
    title: str,
    width: int = 320,
    height: int = 120,
    fmt: Callable[[float], str] = figure,
) -> Markup:
    """An SVG chart of ``series`` over ``x``, its y axis from 0 in ``unit``
    (named on the axis), with a legend when there are several series."""
    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM
    values = [y for s in series for _, y in s.points if y is not None]
    ticks = nice_ticks(max(values, default=0.0))
    top = ticks[-1]
    span = (x.end - x.start) or 1.0

    def px(at: float) -> float:
        return LEFT + plot_w * (at - x.start) / span

    def py(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    out = [
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>'
    ]
    for value in ticks:  # the y axis: gridlines and their labels, in the unit
        y = py(value)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        out.append(
            f'<text class="tick y" x="{LEFT - 4}" y="{y + 3:.1f}">{escape(fmt(value))}</text>'
        )
    unit_y = TOP + plot_h / 2
    out.append(
        f'<text class="unit" x="10" y="{unit_y:.1f}" '
        f'transform="rotate(-90 10 {unit_y:.1f})">{escape(unit)}</text>'
    )
    base = TOP + plot_h
    out.append(f'<line class="axis" x1="{LEFT}" x2="{width - RIGHT}" y1="{base}" y2="{base}"/>')
    out.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{base}"/>')
    for at, label in x.ticks:  # the x axis: tick marks and their labels
        tx = px(at)
        out.append(f'<line class="axis" x1="{tx:.1f}" x2="{tx:.1f}" y1="{base}" y2="{base + 3}"/>')
        out.append(f'<text class="tick x" x="{tx:.1f}" y="{height - 5}">{escape(label)}</text>')
    for i, each in enumerate(series[:MAX_SERIES]):
        for run in _runs(each.points):
            if len(run) == 1:  # a point alone between gaps: a dot, as no line can be drawn
                ((a, b),) = run
                out.append(f'<circle class="s{i}" cx="{px(a):.1f}" cy="{py(b):.1f}" r="2"/>')
                continue
            points = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in run)
            out.append(f'<polyline class="s{i}" points="{points}"/>')
    if len(series) > 1:
        out.append(_legend(series[:MAX_SERIES], width))
    out.append("</svg>")
    return Markup("".join(out))


def _runs(points: Sequence[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    """The stretches of ``points`` without a gap, in order."""
    runs: list[list[tuple[float, float]]] = [[]]
    for at, value in points:
        if value is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((at, value))
    return [run for run in runs if run]


def _legend(series: Sequence[Series], width: int) -> str:
    parts = []
    x = width - RIGHT
    for i, each in reversed(list(enumerate(series))):
        x -= 8 + 7 * len(each.name)
        parts.append(
            f'<rect class="key s{i}" x="{x}" y="{TOP}" width="6" height="6"/>'
            f'<text class="legend" x="{x + 8}" y="{TOP + 6}">{escape(each.name)}</text>'
        )
    return "".join(parts)
