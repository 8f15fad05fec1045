"""The Overview's tasks: the jobs counted by state and task (``App.counts()``,
from the Lens's job index), and per-task trends: throughput, failure rate and run-time
percentiles of each task over the last hour or day, read from the history
the workers keep in the Lens's Redis (forum.coordinator.taskhistory), so a
restarted node shows them at once.

A window (:data:`WINDOWS`) is read in one pipelined round trip: the last
hour's 60 minute hashes, or the day's 96 quarter-hour hashes (the workers
write both), a point each. Percentiles are the upper bound of the histogram
bucket they fall in (forum.coordinator.taskhistory.BUCKETS): "p95 <= 0.5 s".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from markupsafe import Markup

from forum.coordinator import LensConfig
from forum.coordinator.taskhistory import TaskMinute, read_history
from forum.dashboard.charts import Axis, Series, line_chart
from forum.dashboard.keys import lens_view
from forum.dashboard.lensview import FAILURES
from forum.tasks import JobState


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


#: A slot ended this long ago (seconds) is closed: every worker flushed it
#: (each flushes every 5 s), so it is kept in :data:`_CLOSED` once read...
CLOSED_AFTER = 60.0
#: ...and read again after this long (seconds), for the counts a worker
#: kept through a Redis outage and flushed late.
REREAD = 600.0
#: The most closed slots kept (about four Lens namespaces' two windows).
MAX_CLOSED = 1024
#: (Redis URL, namespace, span, slot) -> (when read, its figures): the
#: closed slots, so the Overview, refreshed every 2 s, reads only the last
#: minute or two of its window from Redis.
_CLOSED: dict[tuple[str, str, int, int], tuple[float, dict[str, TaskMinute]]] = {}


async def task_trends(
    config: LensConfig, window: Window, now: float | None = None
) -> list[TaskTrend]:
    """Each task with an attempt in ``window`` up to ``now``, by name
    (``LensUnavailable`` when Redis does not answer)."""
    now = time.time() if now is None else now
    step = window.step  # a span the workers keep (forum.coordinator.taskhistory.SPANS)
    end = int(now // step) + 1  # the slot after now's
    slots = range(end - window.seconds // step, end)
    found = await _read(config, step, slots, now)
    steps: dict[str, dict[int, TaskMinute]] = {}
    for slot, tasks in found.items():
        for task, counts in tasks.items():
            steps.setdefault(task, {})[slot] = counts
    axis = _axis(slots.start * step, end * step, window)
    return [_trend(task, steps[task], slots, axis, step) for task in sorted(steps)]


async def _read(
    config: LensConfig, span: int, slots: range, now: float
) -> dict[int, dict[str, TaskMinute]]:
    """``slots``' figures: the closed ones from :data:`_CLOSED` while fresh,
    the rest from Redis (the closed among them kept)."""
    found: dict[int, dict[str, TaskMinute]] = {}
    wanted = []
    for slot in slots:
        kept = _CLOSED.get((config.url, config.namespace, span, slot))
        if kept is not None and now - kept[0] < REREAD:
            found[slot] = kept[1]
        else:
            wanted.append(slot)
    read = await read_history(config, span, wanted)
    if len(_CLOSED) + len(wanted) > MAX_CLOSED:
        _CLOSED.clear()
    for slot in wanted:
        figures = found[slot] = read.get(slot, {})
        if (slot + 1) * span < now - CLOSED_AFTER:
            _CLOSED[(config.url, config.namespace, span, slot)] = (now, figures)
    return {slot: figures for slot, figures in found.items() if figures}


def _trend(
    task: str, steps: Mapping[int, TaskMinute], slots: range, axis: Axis, step: int
) -> TaskTrend:
    total = TaskMinute()
    for counts in steps.values():
        total.merge(counts)
    empty = TaskMinute()
    per = step / 60  # minutes a point stands for
    rows = [(slot * step + step / 2, steps.get(slot, empty)) for slot in slots]

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
        "trends_error": None, "counts": None, "counts_error": None, "states": list(JobState),
    }  # fmt: skip
    try:
        window = window_of(raw)
    except ValueError as exc:
        return values | {"error": str(exc), "http_status": 400, "window": ""}
    try:
        values["trends"] = await task_trends(view.lens.config, window)
    except FAILURES as exc:
        values["trends_error"] = str(exc)
    try:
        values["counts"] = await (await view.app()).counts()
    except FAILURES as exc:
        values["counts_error"] = str(exc)
    return values
