"""The periodic tasks' schedules and slot loop (forum.tasks.cron), on a clock of the test's own.

The loop runs against :class:`FakeClock`, whose waits move its time forward
at once (by what was asked, or by more: a machine that slept), so a day of
slots takes no real time and every slot's time is known exactly.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from forum.node.core.errors import NodeUnavailable
from forum.tasks.cron import (
    SYSTEM_CLOCK,
    CronSchedule,
    Interval,
    Periodic,
    Slot,
    run_periodic,
    schedule,
    slot_key,
)

#: 2027-01-15 12:00:00 UTC, a Friday: a whole minute, hour and 5 minutes.
NOON = datetime(2027, 1, 15, 12, tzinfo=UTC).timestamp()


class FakeClock:
    """Wall-clock time that moves only when every loop waits: to the earliest
    time one waits for, plus whatever ``oversleep`` holds for that wait (a
    late wake: a machine that slept), or less (``undersleep``: a timer that
    fired early). ``sleepers`` is how many loops share it."""

    def __init__(self, now: float, sleepers: int = 1) -> None:
        self.now = now
        self.sleepers = sleepers
        self.oversleep: list[float] = []
        self.undersleep: list[float] = []
        self._waits: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = 0

    def time(self) -> float:
        return self.now

    async def wait(self, stop: asyncio.Event, seconds: float) -> bool:
        if self.oversleep:
            seconds += self.oversleep.pop(0)
        elif self.undersleep:
            seconds -= self.undersleep.pop(0)
        woken = asyncio.get_running_loop().create_future()
        self._order += 1
        heapq.heappush(self._waits, (self.now + seconds, self._order, woken))
        if len(self._waits) == self.sleepers:  # everyone waits: time moves on
            when, _, first = heapq.heappop(self._waits)
            self.now = max(self.now, when)
            first.set_result(None)
        await woken
        return stop.is_set()

    def wake_all(self) -> None:
        while self._waits:
            heapq.heappop(self._waits)[2].set_result(None)


async def slots_of(entries: list[Periodic], clock: FakeClock, count: int) -> list[Slot]:
    """Run the loop until it has asked for ``count`` slots; those slots."""
    seen: list[Slot] = []
    stop = asyncio.Event()
    clock.sleepers = len(entries)

    async def enqueue(slot: Slot) -> None:
        seen.append(slot)
        if len(seen) >= count:
            stop.set()
            clock.wake_all()

    async with asyncio.timeout(10):
        await run_periodic(entries, enqueue, stop, clock=clock)
    return seen


# -- schedules ---------------------------------------------------------------------


def test_an_interval_falls_on_its_multiples_since_the_epoch() -> None:
    every = Interval(0.5)
    assert every.next_after(NOON + 0.2) == NOON + 0.5
    assert every.next_after(NOON) == NOON + 0.5  # strictly after
    assert every.latest(NOON + 0.7) == NOON + 0.5
    assert every.latest(NOON) == NOON  # at or before
    assert Interval(7).next_after(NOON) == (NOON // 7 + 1) * 7


def test_a_cron_expression_gives_its_slots() -> None:
    five = CronSchedule("*/5 * * * *")
    assert five.next_after(NOON) == NOON + 300
    assert five.next_after(NOON + 1) == NOON + 300
    assert five.latest(NOON + 299.9) == NOON
    assert five.latest(NOON + 300) == NOON + 300
    weekly = CronSchedule("0 9 * * MON")  # NOON is a Friday
    assert weekly.next_after(NOON) == datetime(2027, 1, 18, 9, tzinfo=UTC).timestamp()
    seconds = CronSchedule("*/2 * * * * *")  # six fields: seconds first
    assert seconds.next_after(NOON + 0.5) == NOON + 2


def test_a_cron_expression_is_read_in_its_time_zone() -> None:
    paris = CronSchedule("0 9 * * *", tz=ZoneInfo("Europe/Paris"))  # UTC+1 in January
    assert paris.next_after(NOON) == datetime(2027, 1, 16, 8, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("expression", "every", "message"),
    [
        (None, None, "one of them"),
        ("* * * * *", 5, "one of them"),
        ("*/5 * * *", None, "'*/5 * * *': Wrong number of fields"),
        ("61 * * * *", None, "'61 * * * *': Bad minute"),
        (None, 0, ">= 0.001"),
        (None, -1, ">= 0.001"),
        (None, float("nan"), ">= 0.001"),
    ],
)
def test_a_bad_schedule_is_one_clear_value_error(
    expression: str | None, every: float | None, message: str
) -> None:
    with pytest.raises(ValueError) as caught:
        schedule(expression, every=every)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_slot_key_names_the_task_and_the_slot_in_unix_seconds() -> None:
    assert slot_key("report", 1_800_000_000.0) == "cron:report:1800000000"
    assert slot_key("sweep", 1_800_000_000.5) == "cron:sweep:1800000000.5"
    assert slot_key("sweep", 1_800_000_000.25) == "cron:sweep:1800000000.25"
    # The same slot, however it was computed, is the same key on every worker:
    assert slot_key("t", Interval(0.1).next_after(NOON + 0.25)) == f"cron:t:{int(NOON)}.3"


# -- the loop ----------------------------------------------------------------------


async def test_each_slot_is_enqueued_with_its_key_and_a_ttl_until_the_next() -> None:
    clock = FakeClock(NOON + 0.2)
    slots = await slots_of([Periodic("tick", Interval(0.5))], clock, 4)
    assert [s.key for s in slots] == [
        f"cron:tick:{int(NOON)}.5",
        f"cron:tick:{int(NOON) + 1}",
        f"cron:tick:{int(NOON) + 1}.5",
        f"cron:tick:{int(NOON) + 2}",
    ]
    assert [s.at for s in slots] == [NOON + 0.5, NOON + 1, NOON + 1.5, NOON + 2]
    assert {s.task for s in slots} == {"tick"}
    assert [s.ttl for s in slots] == [0.5] * 4


async def test_a_cron_task_is_enqueued_at_its_slots() -> None:
    clock = FakeClock(NOON - 1)
    slots = await slots_of([Periodic("report", schedule("*/5 * * * *"))], clock, 3)
    assert [s.at for s in slots] == [NOON, NOON + 300, NOON + 600]
    assert [s.ttl for s in slots] == [300, 300, 300]


async def test_a_slot_that_passed_before_the_loop_started_is_not_run() -> None:
    clock = FakeClock(NOON)  # exactly on a slot: it is already past
    slots = await slots_of([Periodic("report", schedule("*/5 * * * *"))], clock, 1)
    assert slots[0].at == NOON + 300


async def test_slots_missed_while_the_loop_slept_are_skipped() -> None:
    """t0 slot NOON enqueued; the machine sleeps through NOON+300 and +600
    and wakes at NOON+700: the latest past slot (+600) is enqueued, with a
    TTL to +900; +300 never is."""
    clock = FakeClock(NOON - 1)
    clock.oversleep = [0.0, 400.0]  # the first wait on time, the second 400 s late
    slots = await slots_of([Periodic("report", CronSchedule("*/5 * * * *"))], clock, 3)
    assert [s.at for s in slots] == [NOON, NOON + 600, NOON + 900]
    assert slots[1].ttl == 200  # woke at +700: until +900
    assert slots[1].key == f"cron:report:{int(NOON) + 600}"


async def test_a_wake_before_the_slot_waits_out_the_rest_and_repeats_no_slot() -> None:
    clock = FakeClock(NOON + 0.2)
    clock.undersleep = [0.0, 0.004]  # the second slot's timer fires 4 ms early
    slots = await slots_of([Periodic("tick", Interval(0.5))], clock, 3)
    assert [s.at for s in slots] == [NOON + 0.5, NOON + 1, NOON + 1.5]


async def test_several_periodic_tasks_run_side_by_side() -> None:
    clock = FakeClock(NOON - 0.1)
    slots = await slots_of(
        [Periodic("often", Interval(1)), Periodic("rarely", Interval(60))], clock, 61
    )
    assert {s.key for s in slots if s.task == "rarely"} == {f"cron:rarely:{int(NOON)}"}
    assert len({s.key for s in slots if s.task == "often"}) == 60


async def test_a_failed_enqueue_is_logged_and_the_next_slot_still_comes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(NOON + 0.2)
    stop = asyncio.Event()
    asked: list[str] = []

    async def enqueue(slot: Slot) -> None:
        asked.append(slot.key)
        if len(asked) == 1:
            raise NodeUnavailable("http://127.0.0.1:7000", "connection refused")
        stop.set()

    with caplog.at_level(logging.WARNING, logger="forum.tasks.cron"):
        async with asyncio.timeout(10):
            await run_periodic([Periodic("tick", Interval(1))], enqueue, stop, clock=clock)
    assert asked == [f"cron:tick:{int(NOON) + 1}", f"cron:tick:{int(NOON) + 2}"]
    assert (
        f"could not enqueue cron:tick:{int(NOON) + 1}: http://127.0.0.1:7000: connection refused"
        in caplog.text
    )


class WaitingClock:
    """The real clock, saying when the loop has begun to wait."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()

    def time(self) -> float:
        return SYSTEM_CLOCK.time()

    async def wait(self, stop: asyncio.Event, seconds: float) -> bool:
        self.waiting.set()
        return await SYSTEM_CLOCK.wait(stop, seconds)


async def test_the_loop_stops_when_told_and_when_cancelled() -> None:
    """A real clock and an hour-long interval: once the loop waits, a stop
    (or a cancellation) ends it at once, enqueueing nothing."""
    enqueued: list[Slot] = []

    async def enqueue(slot: Slot) -> None:
        enqueued.append(slot)

    hourly = [Periodic("hourly", Interval(3600))]
    stop, clock = asyncio.Event(), WaitingClock()
    loop = asyncio.create_task(run_periodic(hourly, enqueue, stop, clock=clock))
    async with asyncio.timeout(5):
        await clock.waiting.wait()
        stop.set()
        await loop
    clock = WaitingClock()
    cancelled = asyncio.create_task(run_periodic(hourly, enqueue, asyncio.Event(), clock=clock))
    async with asyncio.timeout(5):
        await clock.waiting.wait()
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await cancelled
    assert enqueued == []
