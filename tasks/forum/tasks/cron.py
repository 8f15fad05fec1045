"""Periodic tasks: when their slots fall (:class:`Schedule`), and the loop that
enqueues one job per slot (:func:`run_periodic`).

A periodic task is an ordinary task plus a schedule::

    @app.cron("*/5 * * * *")          # a cron expression (5 fields, or 6 with seconds)
    def report(ctx): ...

    @app.cron(every=30)               # every 30 s, on multiples of 30 s since the epoch
    async def sweep(ctx): ...

Every worker of the app runs the loop, and at each slot time enqueues the
task with the key ``cron:<task>:<slot unix seconds>``, a TTL that ends at
the next slot, and the highest priority (:data:`SLOT_PRIORITY`): a backlog
in its queue does not hold it up past its TTL, since the worker of its queue
that frees a slot next takes it first. One slot is one key, and one key is
one job done once (the write's dedup window, then the Lens's claim and done
marker), so however many workers enqueue a slot, it runs once; a slot no
worker took before the next slot expires unrun rather than running late
(arq#196: its cron ran twice when two workers' clocks disagreed; here they
agree on the slot, because slots are computed from the schedule, not from
when a worker started)::

    t0  slot 1800000000 falls due
    t0  worker A enqueues cron:report:1800000000   (a new job)
    t0' worker B enqueues cron:report:1800000000   (deduplicated by the node,
                                                    or turned away by the Lens)
    t1  the job runs once; its TTL ends at the next slot

Missed slots are skipped, never made up: a loop enqueues only slots that fall
while it runs, so slots that passed while no worker ran are not run (as
cron does), and a loop that wakes late (a suspended machine, a stalled
event loop) enqueues the latest slot that has passed and skips the ones
before it.

Each slot written is published to the schedules' registry in the Lens's
Redis (:mod:`forum.tasks.schedules`: the first worker to publish a slot
counts what the one before it came to), which the dashboard's Schedules
page reads without the app's code.

Slot times are wall clock (``time.time``): every worker computes the same
slots, and a worker whose clock is off enqueues its slots early or late by
the offset, still once each. Cron expressions are read by ``cronsim``
(healthchecks.io's parser: Debian cron's rules, ``L``/``#`` and a seconds
field), in UTC unless a time zone is given.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Protocol

from cronsim import CronSim, CronSimError

from forum.coordinator.errors import LensError
from forum.node.core.cancellation import wait_event
from forum.node.core.entries import MAX_PRIORITY
from forum.node.core.errors import ForumError
from forum.tasks.errors import InvalidJob, TaskError

__all__ = [
    "SLOT_PRIORITY",
    "SYSTEM_CLOCK",
    "Clock",
    "CronSchedule",
    "Enqueue",
    "Interval",
    "Periodic",
    "Published",
    "Schedule",
    "Slot",
    "run_periodic",
    "schedule",
    "slot_key",
]

log = logging.getLogger(__name__)

#: The priority a slot's job is written at: the highest there is, so it is
#: served before any backlog of its queue and runs before its TTL ends the
#: slot (docs/tasks.md, "Periodic tasks").
SLOT_PRIORITY = MAX_PRIORITY


class Schedule(Protocol):
    """When a periodic task's slots fall, in Unix seconds."""

    def next_after(self, when: float) -> float:
        """The first slot strictly after ``when``."""
        ...

    def latest(self, when: float) -> float:
        """The last slot at or before ``when``."""
        ...


@dataclass(frozen=True, slots=True)
class Interval:
    """A slot every ``every`` seconds, on its multiples since the Unix epoch
    (so workers started at different times agree), in whole milliseconds."""

    every: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.every) and round(self.every * 1000) >= 1):
            raise InvalidJob(f"every= is a finite number of seconds >= 0.001, not {self.every!r}")

    @property
    def _step_ms(self) -> int:
        return round(self.every * 1000)

    def next_after(self, when: float) -> float:
        step = self._step_ms
        return (math.floor(when * 1000) // step + 1) * step / 1000

    def latest(self, when: float) -> float:
        step = self._step_ms
        return (math.floor(when * 1000) // step) * step / 1000


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """The slots of a cron expression: 5 fields (minute hour day month
    weekday) or 6 (a seconds field first), in ``tz``."""

    expression: str
    tz: tzinfo = UTC

    def __post_init__(self) -> None:
        try:
            CronSim(self.expression, datetime.now(self.tz))
        except CronSimError as exc:
            raise InvalidJob(f"cron expression {self.expression!r}: {exc}") from None

    def next_after(self, when: float) -> float:
        # CronSim ticks a second forward first: its first slot is after `when`.
        start = datetime.fromtimestamp(math.floor(when), self.tz)
        return next(CronSim(self.expression, start)).timestamp()

    def latest(self, when: float) -> float:
        # Reversed, CronSim ticks a second back first: the first slot before
        # the next whole second is the last one at or before `when`.
        start = datetime.fromtimestamp(math.floor(when), self.tz) + timedelta(seconds=1)
        return next(CronSim(self.expression, start, reverse=True)).timestamp()


def schedule(
    expression: str | None = None, *, every: float | None = None, tz: tzinfo = UTC
) -> Schedule:
    """The schedule of ``@app.cron(expression)`` or ``@app.cron(every=seconds)``;
    :class:`~forum.tasks.errors.InvalidJob` (a ``ValueError``) unless exactly one
    is given, and valid."""
    if (expression is None) == (every is None):
        raise InvalidJob("a periodic task has a cron expression or every=seconds (one of them)")
    if expression is None:
        return Interval(float(every or 0))
    return CronSchedule(expression, tz)


def slot_key(task: str, slot: float) -> str:
    """``cron:<task>:<slot unix seconds>``: whole seconds, or with the
    milliseconds of an interval's slot (``cron:sweep:1800000000.5``)."""
    ms = round(slot * 1000)
    seconds, fraction = divmod(ms, 1000)
    text = f"{seconds}.{fraction:03d}".rstrip("0").rstrip(".") if fraction else str(seconds)
    return f"cron:{task}:{text}"


@dataclass(frozen=True, slots=True)
class Periodic:
    """A task to enqueue at each slot of its schedule."""

    task: str
    schedule: Schedule


@dataclass(frozen=True, slots=True)
class Slot:
    """One slot's job, as the loop asks for it: the task, its key, the slot's
    time, and the TTL that ends it at the next slot."""

    task: str
    key: str
    at: float
    ttl: float


#: Writes one slot's job (the App: ``enqueue(slot.task, _key=slot.key, _ttl=slot.ttl)``).
Enqueue = Callable[[Slot], Awaitable[object]]
#: Told of each slot once its job is written (the schedules' registry,
#: forum.tasks.schedules ``Registry.published``); it logs its own failures.
Published = Callable[[Slot], Awaitable[None]]


class Clock(Protocol):
    """Wall-clock time and a stoppable wait (tests give one of their own)."""

    def time(self) -> float: ...

    async def wait(self, stop: asyncio.Event, seconds: float) -> bool:
        """Wait ``seconds`` or until ``stop`` is set; whether it is set."""
        ...


class _SystemClock:
    def time(self) -> float:
        return time.time()

    async def wait(self, stop: asyncio.Event, seconds: float) -> bool:
        return await wait_event(stop, seconds)


SYSTEM_CLOCK: Clock = _SystemClock()


async def run_periodic(
    entries: Sequence[Periodic],
    enqueue: Enqueue,
    stop: asyncio.Event,
    *,
    clock: Clock = SYSTEM_CLOCK,
    published: Published | None = None,
) -> None:
    """Enqueue each entry's slots as they fall, until ``stop`` is set (or the
    task is cancelled), telling ``published`` of each slot written. An
    enqueue that fails (no node, no Redis) is logged and that slot left to
    the other workers: the loop goes on."""

    async def write(slot: Slot) -> None:
        if await _enqueue(enqueue, slot) and published is not None:
            await published(slot)

    async with asyncio.TaskGroup() as tasks:
        for entry in entries:
            tasks.create_task(_run_one(entry, write, stop, clock), name=f"cron:{entry.task}")


async def _run_one(entry: Periodic, write: Published, stop: asyncio.Event, clock: Clock) -> None:
    planned = entry.schedule.next_after(clock.time())
    while not stop.is_set():
        # A timer may fire a little before the wall clock reaches the slot
        # (the loop's clock is not the wall clock): wait out the rest.
        while (now := clock.time()) < planned:
            if await clock.wait(stop, planned - now):
                return
        slot = entry.schedule.latest(now)
        following = entry.schedule.next_after(slot)
        if slot > planned:
            log.warning(
                "cron %s: woke late at %.3f; slots from %s to before %s skipped",
                entry.task,
                now,
                slot_key(entry.task, planned),
                slot_key(entry.task, slot),
            )
        await write(Slot(entry.task, slot_key(entry.task, slot), slot, following - now))
        planned = following


async def _enqueue(enqueue: Enqueue, slot: Slot) -> bool:
    """Whether ``slot``'s job was written."""
    try:
        await enqueue(slot)
    except (ForumError, LensError, TaskError, OSError) as exc:
        # Every worker enqueues every slot: another may have written this one.
        log.warning("cron %s: could not enqueue %s: %s", slot.task, slot.key, exc)
        return False
    return True
