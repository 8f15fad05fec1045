"""The schedules' registry (forum.tasks.schedules) on a real ``redis-server``:
two workers publishing the same slots advance a task's record once per slot;
the slot before is settled as run (with its state) or expired unrun; slots no
worker wrote are counted skipped; a reader adds the slots that fell while no
worker ran. Slot times are chosen, not waited for: the registry takes them as
given (Redis's clock only ages its index)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC
from zoneinfo import ZoneInfo

import pytest

from forum.coordinator import Lens, LensConfig
from forum.coordinator.memory import MemoryAuthority
from forum.tasks.cron import CronSchedule, Interval, Periodic, Slot, slot_key
from forum.tasks.schedules import (
    GAP_COUNTED,
    Missed,
    Registry,
    Run,
    _Gaps,
    described,
    read_schedules,
    rebuilt,
    slots_between,
)

#: A slot of an interval of 1 s (2027-01-15 08:00:00 UTC).
NOON = 1_800_000_000.0
PREFIX = b"sched/"


def test_gaps_are_counted_from_the_schedule() -> None:
    every = Interval(1.0)
    assert slots_between(every, NOON, NOON + 1) == (0, [])
    assert slots_between(every, NOON, NOON + 4) == (3, [NOON + 1, NOON + 2, NOON + 3])
    count, newest = slots_between(every, NOON, NOON + 1001)
    assert count == 1000 and newest[-1] == NOON + 1000 and len(newest) == 20
    minutely = CronSchedule("* * * * *")
    minute = 1_800_000_000 // 60 * 60.0
    assert slots_between(minutely, minute, minute + 180) == (2, [minute + 60, minute + 120])
    every_second = CronSchedule("* * * * * *")
    count, newest = slots_between(every_second, NOON, NOON + 5000)
    assert (count, newest[-1]) == (GAP_COUNTED, NOON + GAP_COUNTED)  # at least, counted


def test_a_gap_counted_look_by_look_is_the_gap_counted_at_once() -> None:
    """A page counts a cron task's unwritten slots from its last look on."""
    gaps = _Gaps()
    five = CronSchedule("*/5 * * * *")
    start = 1_800_000_000 // 300 * 300.0
    for minutes in (0, 5, 15, 15, 20, 200, 300):
        before = start + minutes * 60
        assert gaps.between(five, start, before) == slots_between(five, start, before), minutes


@pytest.mark.parametrize(
    "when",
    [
        Interval(0.5),
        CronSchedule("*/5 * * * *"),
        CronSchedule("0 9 * * 1", ZoneInfo("Europe/Paris")),
    ],
)
def test_a_published_schedule_is_rebuilt(when: Interval | CronSchedule) -> None:
    fields = described(when)
    assert rebuilt(fields) == when
    assert fields["spec"]  # for people: "every 0.5 s", "*/5 * * * * (UTC)"


def test_a_schedule_in_a_zone_with_no_name_is_shown_not_rebuilt() -> None:
    from datetime import timedelta, timezone  # noqa: PLC0415

    fields = described(CronSchedule("0 9 * * *", timezone(timedelta(hours=2))))
    assert rebuilt(fields) is None and fields["spec"].startswith("0 9 * * * (")
    assert rebuilt(described(CronSchedule("0 9 * * *", UTC))) == CronSchedule("0 9 * * *")


@pytest.fixture
async def lens(redis_url: str) -> AsyncIterator[Lens]:
    async with Lens.from_url(redis_url) as lens:
        yield lens


def slot(at: float) -> Slot:
    return Slot("tick", slot_key("tick", at), at, 1.0)


async def test_slots_published_by_two_workers_are_counted_once(lens: Lens) -> None:
    entries = [Periodic("tick", Interval(1.0))]
    first, second = (Registry(lens.config, lens, PREFIX, entries) for _ in range(2))
    try:
        # Both workers write slot 0: the record advances once.
        await first.published(slot(NOON))
        await second.published(slot(NOON))
        (row,) = await read_schedules(lens, NOON + 0.5)
        assert (row.record.written, row.record.app, row.record.spec) == (1, "sched/", "every 1 s")
        assert row.last_run is None and row.missed_total == 0 and not row.overdue

        # Slot 0 runs; slot 1 is written and settles it as done.
        claim = await lens.claim(slot(NOON).key, "worker-a", 5.0)
        await claim.complete()
        await second.published(slot(NOON + 1))
        await first.published(slot(NOON + 1))
        (row,) = await read_schedules(lens, NOON + 1.5)
        assert row.record.written == 2
        assert (row.record.run_slot, row.record.run_state) == (NOON, "done")
        assert row.last_run is not None and (row.last_run.slot, row.last_run.state) == (
            NOON,
            "done",
        )

        # Slot 1 is never taken; no worker writes slots 2 and 3; slot 4 is
        # written: one expired unrun, two skipped.
        await first.published(slot(NOON + 4))
        (row,) = await read_schedules(lens, NOON + 4.5)
        assert (row.record.expired, row.record.skipped, row.missed_total) == (1, 2, 3)
        assert row.missed[:3] == (
            Missed(NOON + 3, "skipped"), Missed(NOON + 2, "skipped"), Missed(NOON + 1, "expired")
        )  # fmt: skip
        assert row.last_run == Run(NOON, slot(NOON).key, "done", row.last_run.at)

        # No worker runs from then on: the reader counts the slots that fell
        # (5 and 6, whose successors fell) and slot 4, expired unrun.
        (row,) = await read_schedules(lens, NOON + 7.5)
        assert row.overdue and row.unwritten == 2 and row.latest_expired
        assert row.missed_total == 6
        assert row.missed[0] == Missed(NOON + 6, "skipped")
        assert Missed(NOON + 4, "expired") in row.missed
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_changed_schedule_replaces_the_old(lens: Lens) -> None:
    every = Registry(lens.config, lens, PREFIX, [Periodic("tick", Interval(1.0))])
    minutely = Registry(lens.config, lens, PREFIX, [Periodic("tick", CronSchedule("* * * * *"))])
    try:
        await every.published(slot(NOON))
        await minutely.published(slot(NOON + 60))
        (row,) = await read_schedules(lens, NOON + 61)
        assert row.record.schedule == CronSchedule("* * * * *")
    finally:
        await every.aclose()
        await minutely.aclose()


async def test_a_running_last_slot_is_the_last_run(lens: Lens) -> None:
    registry = Registry(lens.config, lens, PREFIX, [Periodic("tick", Interval(1.0))])
    try:
        await registry.published(slot(NOON))
        await lens.claim(slot(NOON).key, "worker-a", 5.0)
        (row,) = await read_schedules(lens, NOON + 0.5)
        assert row.last_run is not None and row.last_run.state == "running"
    finally:
        await registry.aclose()


async def test_a_publication_redis_refuses_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The loop goes on: the next slot publishes again, and counts the gap."""
    nowhere = LensConfig(url="redis://127.0.0.1:1/0")
    registry = Registry(nowhere, MemoryAuthority(), PREFIX, [Periodic("tick", Interval(1.0))])
    try:
        await registry.published(slot(NOON))
    finally:
        await registry.aclose()
    assert f"{slot(NOON).key} not published" in caplog.text


def test_no_registry_without_a_lens() -> None:
    assert Registry.for_authority(MemoryAuthority(), PREFIX, []) is None
