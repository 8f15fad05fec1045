"""The Overview's per-task trends: throughput, failure rate and run-time
percentiles of each task over the last hour or day, read from the history
the workers keep in the Lens's Redis (forum.coordinator.taskhistory), so a
restarted node shows them at once.

A window (:data:`WINDOWS`) is read in one pipelined round trip (60 or
1,440 minute hashes) and summed into steps (a minute for the last hour,
15 minutes for the day). Percentiles are the upper bound of the histogram
bucket they fall in (forum.coordinator.taskhistory.BUCKETS): "p95 <= 0.5 s".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from markupsafe import Markup

from forum.coordinator import LensConfig
from forum.coordinator.taskhistory import TaskMinute, now_minute, read_history
from forum.dashboard.charts import Axis, Series, line_chart
from forum.dashboard.keys import lens_view
from forum.dashboard.lensview import FAILURES


@dataclass(frozen=True, slots=True)
class Window:
    """A span the Overview shows: its name in the menu, its length and step
    (seconds), and how far apart its time axis's ticks are."""

    label: str
    seconds: int
    step: int
    tick_every: int


#: The windows, by their ``?window=`` value; the first is the default.
WINDOWS: Mapping[str, Window] = {
    "1h": Window("last hour", 3600, 60, 600),
    "24h": Window("last 24 h", 86400, 900, 4 * 3600),
}


@dataclass(frozen=True, slots=True)
class TaskTrend:
    """One task over a window: its totals, and its three charts."""

    task: str
    total: TaskMinute
    throughput: Markup
    failures: Markup
    runtime: Markup

    @property
    def attempts(self) -> int:
        return self.total.done + self.total.retried + self.total.dead

    @property
    def failure_rate(self) -> float | None:
        """Failed attempts (retried or dead) per attempt, in percent."""
        return None if not self.attempts else 100 * failed(self.total) / self.attempts

    def run(self, q: float) -> float | None:
        return self.total.run.percentile(q)

    def wait(self, q: float) -> float | None:
        return self.total.wait.percentile(q)


def failed(minute: TaskMinute) -> int:
    return minute.retried + minute.dead


def window_of(raw: str) -> Window:
    """The window ``?window=`` names (``""``: the first); ``ValueError``, one line, otherwise."""
    if not raw:
        return next(iter(WINDOWS.values()))
    found = WINDOWS.get(raw)
    if found is None:
        raise ValueError(f"no window {raw!r}: one of {', '.join(WINDOWS)}")
    return found


async def task_trends(
    config: LensConfig, window: Window, now: float | None = None
) -> list[TaskTrend]:
    """Each task with an attempt in ``window`` up to ``now``, by name
    (``LensUnavailable`` when Redis does not answer)."""
    end = now_minute(now) + 1  # the minute after the current one
    per = window.step // 60
    first = end - window.seconds // 60
    found = await read_history(config, range(first, end))
    steps: dict[str, dict[int, TaskMinute]] = {}
    for minute, tasks in found.items():
        step = (minute - first) // per
        for task, counts in tasks.items():
            steps.setdefault(task, {}).setdefault(step, TaskMinute()).merge(counts)
    starts = [(first + i * per) * 60 for i in range(window.seconds // window.step)]
    axis = _axis(first * 60, end * 60, window)
    return [_trend(task, steps[task], starts, axis, per) for task in sorted(steps)]


def _trend(
    task: str, steps: Mapping[int, TaskMinute], starts: list[int], axis: Axis, per: int
) -> TaskTrend:
    total = TaskMinute()
    for counts in steps.values():
        total.merge(counts)
    empty = TaskMinute()
    rows = [(start + per * 30, steps.get(i, empty)) for i, start in enumerate(starts)]

    def line(name: str, value: Callable[[TaskMinute], float | None]) -> Series:
        return Series(name, [(at, value(counts)) for at, counts in rows])

    throughput = line_chart(
        [line("done", lambda c: c.done / per), line("failed", lambda c: failed(c) / per)],
        axis, unit="jobs/min", title=f"{task}: attempts ended per minute",
    )  # fmt: skip
    failures = line_chart(
        [line("failed", _failure_rate)], axis, unit="%",
        title=f"{task}: failed attempts, percent of attempts",
    )  # fmt: skip
    runtime = line_chart(
        [line(f"p{round(q * 100)}", _percentile(q)) for q in (0.5, 0.95, 0.99)],
        axis, unit="s", title=f"{task}: run time percentiles (bucket bounds)",
    )  # fmt: skip
    return TaskTrend(task, total, throughput, failures, runtime)


def _failure_rate(counts: TaskMinute) -> float | None:
    attempts = counts.done + failed(counts)
    return None if not attempts else 100 * failed(counts) / attempts


def _percentile(q: float) -> Callable[[TaskMinute], float | None]:
    return lambda counts: counts.run.percentile(q)


def _axis(start: int, end: int, window: Window) -> Axis:
    """Time from ``start`` to ``end`` (Unix s), a tick every
    ``window.tick_every`` seconds labelled in UTC."""
    every = window.tick_every
    first = -(-start // every) * every
    ticks = [
        (float(at), datetime.fromtimestamp(at, UTC).strftime("%H:%M"))
        for at in range(first, end + 1, every)
    ]
    return Axis(float(start), float(end), ticks)


async def overview_values(request: web.Request) -> dict[str, Any]:
    """The Overview's task part (``?window=``): none without a Lens; a bad
    window is a 400 (the page says why)."""
    view = lens_view(request)
    if view is None:
        return {}
    raw = request.query.get("window", "")
    values: dict[str, Any] = {
        "windows": WINDOWS, "window": raw or next(iter(WINDOWS)), "trends": None,
        "trends_error": None,
    }  # fmt: skip
    try:
        window = window_of(raw)
    except ValueError as exc:
        return values | {"error": str(exc), "http_status": 400, "window": ""}
    try:
        values["trends"] = await task_trends(view.lens.config, window)
    except FAILURES as exc:
        values["trends_error"] = str(exc)
    return values
