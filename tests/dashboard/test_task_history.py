"""The charts and the per-task history's arithmetic, as pure functions of
real values: ticks, gaps, percentiles from buckets, a minute's hash read back
as it was written; and a history that cannot be written kept for the next
flush, bounded, then written whole to a real ``redis-server`` once it is back."""

from __future__ import annotations

import time
from xml.etree import ElementTree

from forum.coordinator import LensConfig
from forum.coordinator.taskhistory import (
    BUCKETS,
    MAX_PENDING,
    SPANS,
    Histogram,
    TaskHistory,
    TaskMinute,
    bucket_of,
    parse_minute,
    read_history,
)
from forum.dashboard.charts import Axis, Series, line_chart, nice_ticks
from tests.fixtures.redis_server import RedisServer


def test_ticks_are_round_and_reach_the_top() -> None:
    assert nice_ticks(7.3) == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert nice_ticks(0.0) == [0.0, 1.0]
    assert nice_ticks(100.0) == [0.0, 50.0, 100.0]


def test_a_chart_has_labelled_axes_a_legend_and_gaps() -> None:
    a = Series("p50", [(0.0, 1.0), (1.0, None), (2.0, 2.0), (3.0, 3.0)])
    b = Series("p99", [(0.0, 4.0), (3.0, 5.0)])
    svg = ElementTree.fromstring(line_chart([a, b], Axis(0, 3, [(0, "12:00"), (3, "12:03")]),
                                            unit="s", title="run <time>"))  # fmt: skip
    texts = [t.text for t in svg.iter("text")]
    assert {"12:00", "12:03", "s", "p50", "p99", "0", "6"} <= set(texts)  # ticks 0..6 by 2
    assert svg.find("title").text == "run <time>"  # escaped in the markup, read back whole
    lines = [p.get("class") for p in svg.iter("polyline")]
    dots = [p.get("class") for p in svg.iter("circle")]
    assert (lines, dots) == (["s0", "s1"], ["s0"])  # p50's first point, alone before its gap


def test_a_percentile_is_the_bound_of_its_bucket() -> None:
    hist = Histogram()
    for seconds in [0.3] * 90 + [2.0] * 9 + [40.0]:
        hist.add(seconds)
    assert hist.percentile(0.5) == 0.5  # 0.3 s falls in (0.25, 0.5]
    assert hist.percentile(0.95) == 2.5
    assert hist.percentile(0.99) == 2.5
    assert hist.percentile(1.0) == 60.0
    assert Histogram().percentile(0.5) is None
    assert bucket_of(10_000.0) == len(BUCKETS) - 1  # past every bound: +Inf


def test_a_minute_reads_back_as_written() -> None:
    minute = TaskMinute(done=3, retried=1, dead=2)
    minute.run.add(0.3)
    minute.wait.add(1.2)
    stored = {k.encode(): str(v).encode() for k, v in minute.fields("resize").items()}
    stored[b"resize bogus"] = b"1"  # a field of a later version: skipped
    (read,) = parse_minute(stored).values()
    assert (read.done, read.retried, read.dead) == (3, 1, 2)
    assert read.run.counts == minute.run.counts and read.run.total == 0.3
    assert read.wait.percentile(0.5) == 2.5


async def test_a_flush_that_fails_keeps_its_counts_bounded() -> None:
    history = TaskHistory(LensConfig(url="redis://127.0.0.1:1"))  # nothing listens there
    for minute in range(MAX_PENDING + 5):
        history.ended("resize", "done", minute * 60.0, minute * 60.0 + 0.1)
    assert await history.flush() is False
    assert history.dropped == 5  # the oldest minutes past the bound
    assert history.times()["resize"][0].count == MAX_PENDING + 5  # /metrics keeps all
    await history.aclose()


async def test_counts_kept_through_an_outage_are_written_after_it(
    volatile_redis: RedisServer,
) -> None:
    config = LensConfig(url=volatile_redis.url)
    history = TaskHistory(config)
    now = time.time()
    history.ended("resize", "done", now - 0.3, now)
    await volatile_redis.astop()
    history.ended("resize", "dead", now - 0.3, now)
    assert await history.flush() is False  # Redis down: nothing written, all kept
    await volatile_redis.astart()
    history.ended("resize", "retried", now - 0.3, now)
    assert await history.flush() is True
    await history.aclose()
    minute = int(now // 60)
    for span in SPANS:  # the minute, and its quarter hour
        found = await read_history(config, span, [minute * 60 // span])
        (counts,) = found.values()
        resize = counts["resize"]
        assert (resize.done, resize.retried, resize.dead) == (1, 1, 1)
        assert resize.run.percentile(0.5) == 0.5
