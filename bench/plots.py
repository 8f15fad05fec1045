"""The benchmarks' plots: grouped bar charts and line charts, one PNG each,
under bench/results/.

matplotlib is in the benchmarks' environment only (scripts/bench-env), not in
the tests' one: the benches import this module only when they draw, and
check that matplotlib is there before they start (a missing one is one line
at the start, not a traceback after the run; ``--no-plot`` does without).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display

import matplotlib.pyplot as plt

#: Forum first and always in the same colour; the others after it.
COLOURS = ("#1f5fa8", "#d9822b", "#5aa454", "#b04a8f", "#8c8c8c", "#c9b23a")


def grouped_bars(
    path: Path,
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    ylabel: str,
    notes: Mapping[str, Sequence[str]] | None = None,
    log: bool = False,
    fmt: str = ",.0f",
) -> None:
    """One group of bars per entry of ``groups`` (e.g. a concurrency), one bar
    per series in it (e.g. a system), each labelled with its value and, under
    it, its note (e.g. Forum's ratio to it). ``log``: a log scale, for
    series whose groups differ by orders of magnitude. ``fmt``: the values'
    labels' format (e.g. ``",.2f"`` for small figures)."""
    notes = notes or {}
    width = 0.8 / len(series)
    figure, axes = plt.subplots(figsize=(max(8.0, 1.1 * len(groups) * len(series)), 5.0))
    for k, (name, values) in enumerate(series.items()):
        xs = [g + (k - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = axes.bar(xs, values, width, label=name, color=COLOURS[k % len(COLOURS)])
        labels = [
            f"{v:{fmt}}" + (f"\n{n}" if n else "")
            for v, n in zip(values, notes.get(name, [""] * len(values)), strict=True)
        ]
        axes.bar_label(bars, labels=labels, fontsize=7, padding=2)
    axes.set_xticks(range(len(groups)), groups)
    if log:
        axes.set_yscale("log")
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.margins(y=0.18)
    axes.legend(fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def lines(
    path: Path,
    title: str,
    panels: Sequence[tuple[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]]],
    xlabel: str,
    log: bool = False,
) -> None:
    """Side by side panels of line charts, one per ``(ylabel, series)``; each
    series is named and holds its xs and ys (NaN: no point). ``log``: both
    axes logarithmic, for sizes that grow by orders of magnitude."""
    figure, axes_row = plt.subplots(1, len(panels), figsize=(6.0 * len(panels), 4.8))
    axes_list = axes_row if len(panels) > 1 else [axes_row]
    for axes, (ylabel, series) in zip(axes_list, panels, strict=True):
        for k, (name, (xs, ys)) in enumerate(series.items()):
            style = "--" if name.startswith(("ideal", "target")) else "-"
            axes.plot(xs, ys, style, marker="o", label=name, color=COLOURS[k % len(COLOURS)])
        if log:
            axes.set_xscale("log")
            axes.set_yscale("log")
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
