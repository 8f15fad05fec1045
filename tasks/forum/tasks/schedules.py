"""The schedules' registry: what the workers' periodic loops
(:mod:`forum.tasks.cron`) publish into the Lens's Redis for a dashboard that
never imports an app's code (``forum serve --lens-url``): each periodic
task's schedule, its last slot written and the next, its last run, and the
slots it missed, with counts.

A slot is written by every worker of the app; the first to publish it
advances the task's record (a script compares the slot with the record's, so
the others change nothing), and that worker alone then counts what the
previous slot came to:

* the slots that fell between the two were **skipped**: no worker wrote
  them (none ran, or a loop woke late); counted from the schedule
  (a cron schedule's gap counted up to :data:`GAP_COUNTED` slots);
* the previous slot **expired** unrun when the Lens holds no claim, done
  marker, retry or burial of its key (a job nobody took before its TTL,
  which ends at the next slot, ran out); otherwise it is the **last run**,
  with its state (done, cancelled, running, retrying, dead) and when.

A reader (:func:`read_schedules`) adds what no worker could publish: slots
that fell while no worker ran (the record's ``next`` passed, and the one
after it too), and the last slot written if it expired since. Nothing is
scanned: one sorted set names every record.

=========================================  ======  ===============================  ==============
key                                        type    holds                            expires
=========================================  ======  ===============================  ==============
``{<ns>:0}:schedules``                     zset    member ``<app prefix> <task>``,  never; members
                                                   score its last write (Redis      unwritten for
                                                   TIME, ms)                        :data:`RETAIN`
                                                                                    removed, and
                                                                                    all but the
                                                                                    newest
                                                                                    :data:`MOST`
``{<ns>:0}:schedule:<member>``             hash    :class:`ScheduleRecord`'s        :data:`RETAIN`
                                                   fields (text values)             after the last
                                                                                    write
``{<ns>:0}:schedule-missed:<member>``      list    ``<slot> skipped|expired``,      :data:`RETAIN`
                                                   newest first, the last           after the last
                                                   :data:`MISSED_KEPT`              write
=========================================  ======  ===============================  ==============

The keys carry shard 0's hash tag, as worker presence does
(forum.coordinator.presence): they belong to no job, and under Redis Cluster
one tag keeps every key a script touches in one slot. The registry is advice
for people, like presence: a failed write is logged and the next slot
writes again; its cost is two scripts per slot per task (and one
``inspect``), for the worker that publishes the slot first, and one script
for each other worker, whatever the job rate.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim
from redis import exceptions as redis_errors

from forum.coordinator.errors import LensError, LensUnavailable
from forum.coordinator.keys import KeySchema
from forum.coordinator.lens import Lens
from forum.coordinator.presence import client_for
from forum.coordinator.records import KeyState
from forum.coordinator.redis_url import close
from forum.coordinator.settings import LensConfig
from forum.node.core.cancellation import keep_cancellation
from forum.tasks.authority import TaskAuthority
from forum.tasks.cron import CronSchedule, Interval, Periodic, Schedule, Slot

__all__ = [
    "GAP_COUNTED",
    "MISSED_KEPT",
    "MOST",
    "RETAIN",
    "Missed",
    "Registry",
    "Run",
    "ScheduleRecord",
    "ScheduleRow",
    "read_schedules",
]

log = logging.getLogger(__name__)

#: How long a task's records outlive its last slot written (seconds): a
#: task taken out of the app leaves the page a week later.
RETAIN = 7 * 24 * 3600.0
#: The most periodic tasks the registry keeps (the most recently written).
MOST = 500
#: How many missed slots a task's list keeps (the newest).
MISSED_KEPT = 20
#: The most slots of a cron schedule's gap counted one by one (an interval's
#: gap is counted by division, whatever its length): a thousand slots take
#: cronsim some 25 ms, on the event loop of the worker that counts them, or in
#: a thread for a page.
GAP_COUNTED = 1000
#: How long one publication may take before it is given up (seconds).
_WITHIN = 2.0

#: Advances a task's record to a slot, unless it is there or past it already.
ADVANCE_SCRIPT = """
-- KEYS[1]  <tag>:schedules (zset: member -> last write, Redis TIME ms)
-- KEYS[2]  <tag>:schedule:<member> (hash)
-- ARGV[1]  the member; ARGV[2] the slot (unix s); ARGV[3] its job key;
-- ARGV[4]  the next slot; ARGV[5] the retention, ms; ARGV[6] the most members;
-- ARGV[7..] field, value pairs describing the schedule
-- returns  {the previous slot, its key} ('' and '' for the first), or nil
--          when the record is at this slot or past it (another worker's)
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = redis.call('HGET', KEYS[2], 'slot')
if last and tonumber(last) >= tonumber(ARGV[2]) then return nil end
local previous = redis.call('HGET', KEYS[2], 'key') or ''
redis.call('HSET', KEYS[2], 'slot', ARGV[2], 'key', ARGV[3], 'next', ARGV[4], 'written_at', ms)
redis.call('HDEL', KEYS[2], 'every', 'cron', 'tz')  -- a schedule changed: none of the old
for i = 7, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
if not last then redis.call('HSET', KEYS[2], 'since', ARGV[2]) end
redis.call('HINCRBY', KEYS[2], 'written', 1)
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('ZADD', KEYS[1], ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - tonumber(ARGV[5]))
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[6]) + 1))
return {last or '', previous}
"""

#: Records what a slot came to, and the slots skipped before the next.
SETTLE_SCRIPT = """
-- KEYS[1]  <tag>:schedule:<member> (hash); KEYS[2] <tag>:schedule-missed:<member> (list)
-- ARGV[1]  the slot settled; ARGV[2] its key; ARGV[3] its state ('': expired unrun);
-- ARGV[4]  when it ran (unix s); ARGV[5] the list's length; ARGV[6] the retention, ms;
-- ARGV[7]  how many slots were skipped after it; ARGV[8..] the newest of them, oldest first
-- returns  nothing
if ARGV[3] == '' then
  redis.call('HINCRBY', KEYS[1], 'expired', 1)
  redis.call('LPUSH', KEYS[2], ARGV[1] .. ' expired')
elseif tonumber(redis.call('HGET', KEYS[1], 'run_slot') or '-1') < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'run_slot', ARGV[1], 'run_key', ARGV[2], 'run_state', ARGV[3],
             'run_at', ARGV[4])
end
if tonumber(ARGV[7]) > 0 then redis.call('HINCRBY', KEYS[1], 'skipped', ARGV[7]) end
for i = 8, #ARGV do redis.call('LPUSH', KEYS[2], ARGV[i] .. ' skipped') end
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[5]) - 1)
redis.call('PEXPIRE', KEYS[2], ARGV[6])
"""


def index_key(schema: KeySchema) -> str:
    """The sorted set naming every task's record."""
    return f"{schema.tag(0)}:schedules"


def record_key(schema: KeySchema, member: str) -> str:
    """Task ``member``'s record (``<app prefix> <task>``)."""
    return f"{schema.tag(0)}:schedule:{member}"


def missed_key(schema: KeySchema, member: str) -> str:
    """Task ``member``'s newest missed slots."""
    return f"{schema.tag(0)}:schedule-missed:{member}"


def member(prefix: bytes, task: str) -> str:
    """A task's name in the registry: its app's prefix, a space, the task
    (a task name has no space, so the last one splits them)."""
    return f"{prefix.decode(errors='backslashreplace')} {task}"


def described(when: Schedule) -> dict[str, str]:
    """The fields that say ``when``: ``spec`` for people, and ``every`` (ms)
    or ``cron`` and ``tz`` to rebuild it (:func:`rebuilt`)."""
    if isinstance(when, Interval):
        return {"spec": f"every {when.every:g} s", "every": str(round(when.every * 1000))}
    if isinstance(when, CronSchedule):
        zone = "UTC" if when.tz is UTC else str(getattr(when.tz, "key", when.tz))
        return {"spec": f"{when.expression} ({zone})", "cron": when.expression, "tz": zone}
    return {"spec": repr(when)}


def rebuilt(fields: Mapping[str, str]) -> Schedule | None:
    """The schedule the fields of :func:`described` say; ``None`` when they
    cannot say it (a time zone that is no IANA name, a newer writer's)."""
    try:
        if "every" in fields:
            return Interval(int(fields["every"]) / 1000)
        if "cron" in fields:
            zone = fields.get("tz", "UTC")
            return CronSchedule(fields["cron"], UTC if zone == "UTC" else ZoneInfo(zone))
    except (ValueError, ZoneInfoNotFoundError):  # InvalidJob is a ValueError
        return None
    return None


def slots_between(when: Schedule, after: float, before: float) -> tuple[int, list[float]]:
    """How many slots fall strictly between ``after`` and ``before``, and the
    newest :data:`MISSED_KEPT` of them, oldest first. An interval's are
    counted by division; a cron schedule's one by one, up to
    :data:`GAP_COUNTED` (a count of ``GAP_COUNTED`` means at least that many)."""
    if before <= after:
        return 0, []
    if isinstance(when, Interval):
        # In whole milliseconds, as an interval's slots are.
        step = round(when.every * 1000)
        first = math.floor(round(after * 1000) / step) + 1
        last = math.ceil(round(before * 1000) / step) - 1
        count = max(0, last - first + 1)
        newest = [(last - i) * step / 1000 for i in range(min(count, MISSED_KEPT))]
        return count, newest[::-1]
    found: list[float] = []
    for slot in itertools.islice(_slots_after(when, after), GAP_COUNTED):
        if slot >= before:
            break
        found.append(slot)
    return len(found), found[-MISSED_KEPT:]


def _slots_after(when: Schedule, after: float) -> Iterator[float]:
    """``when``'s slots after ``after``, in order: a cron schedule's from one
    walk of its expression (a ``next_after`` per slot parses it each time)."""
    if isinstance(when, CronSchedule):
        # As CronSchedule.next_after: CronSim ticks a second forward first.
        start = datetime.fromtimestamp(math.floor(after), when.tz)
        yield from (slot.timestamp() for slot in CronSim(when.expression, start))
        return
    slot = after
    while True:
        slot = when.next_after(slot)
        yield slot


def outcome(state: KeyState) -> tuple[str, float] | None:
    """What a slot's job came to, from what the Lens holds of its key: its
    state and when (Unix s), or ``None`` when it never ran (no claim, done
    marker, retry or burial: queued or expired)."""
    record = state.record or {}
    stage = record.get("state", b"").decode(errors="replace")
    try:
        updated = float(record.get("updated", b"nan"))
    except ValueError:
        updated = math.nan
    if state.done_token is not None:
        cancelled = record.get("cancelled", b"").decode(errors="replace")
        return ("cancelled" if cancelled == str(state.done_token) else "done"), updated
    if state.claim is not None:
        return "running", state.claim.since
    if stage in ("retrying", "dead"):
        return stage, updated
    return None


class Registry:
    """Publishes an app's slots as its worker writes them (given to
    :func:`forum.tasks.cron.run_periodic`), on a Redis connection of its own
    to the Lens's Redis (as worker presence has), so its scripts never queue
    behind the claims' calls; the one ``inspect`` of a slot settled goes
    through the worker's Lens, once per slot."""

    def __init__(
        self,
        config: LensConfig,
        authority: TaskAuthority,
        prefix: bytes,
        entries: Sequence[Periodic],
    ) -> None:
        self._redis = client_for(config)
        self._schema = KeySchema(config.namespace, config.shards)
        self._authority = authority
        self._prefix = prefix
        self._schedules = {entry.task: entry.schedule for entry in entries}
        self._advance = self._redis.register_script(ADVANCE_SCRIPT)
        self._settle = self._redis.register_script(SETTLE_SCRIPT)

    @classmethod
    def for_authority(
        cls, authority: TaskAuthority, prefix: bytes, entries: Sequence[Periodic]
    ) -> Registry | None:
        """A registry for a worker of ``authority``; ``None`` if it is no Lens
        (the in-memory authority has no Redis to publish to)."""
        if not isinstance(authority, Lens):
            return None
        return cls(authority.config, authority, prefix, entries)

    async def published(self, slot: Slot) -> None:
        """Publish ``slot``, just written (best effort: a failure is logged,
        and the next slot publishes again; what the slots between came to is
        then counted as skipped)."""
        try:
            async with asyncio.timeout(_WITHIN):
                await self._publish(slot)
        except (redis_errors.RedisError, LensError, OSError, TimeoutError) as exc:
            log.warning("cron %s: %s not published (%s)", slot.task, slot.key, exc or "timed out")

    async def _publish(self, slot: Slot) -> None:
        when = self._schedules[slot.task]
        name = member(self._prefix, slot.task)
        keys = [index_key(self._schema), record_key(self._schema, name)]
        fields = described(when) | {"app": self._prefix.decode(errors="replace"), "task": slot.task}
        args = [name, repr(slot.at), slot.key, repr(when.next_after(slot.at))]
        args += [str(int(RETAIN * 1000)), str(MOST), *itertools.chain.from_iterable(fields.items())]
        answer = await keep_cancellation(self._advance(keys, args))
        if answer is None:
            return  # another worker published this slot first
        previous, previous_key = (part.decode() for part in answer)
        if not previous:
            return  # the task's first slot: nothing before it to settle
        ran = outcome(await self._authority.inspect(previous_key))
        count, newest = slots_between(when, float(previous), slot.at)
        state, at = ran or ("", math.nan)
        settle = [previous, previous_key, state, repr(at), MISSED_KEPT, int(RETAIN * 1000), count]
        keys = [record_key(self._schema, name), missed_key(self._schema, name)]
        await keep_cancellation(self._settle(keys, [*settle, *map(repr, newest)]))

    async def aclose(self) -> None:
        await close(self._redis)


@dataclass(frozen=True, slots=True)
class Missed:
    """A slot that did not run: ``skipped`` (no worker wrote it) or
    ``expired`` (written, and nobody took it before the next slot)."""

    at: float
    why: str


@dataclass(frozen=True, slots=True)
class Run:
    """A slot that ran: its time, job key, state (done, cancelled, running,
    retrying, dead) and when it reached it (``None``: not recorded)."""

    slot: float
    key: str
    state: str
    at: float | None


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A task's record as the workers published it. Times are Unix seconds."""

    app: str
    task: str
    spec: str
    #: The first slot published, the last, and the one after it.
    since: float
    slot: float
    key: str
    next: float
    written: int
    skipped: int
    expired: int
    #: The last slot known to have run (settled), its key, state and time.
    run_slot: float | None
    run_key: str | None
    run_state: str | None
    run_at: float | None
    schedule: Schedule | None

    @classmethod
    def parse(cls, raw: Mapping[bytes, bytes]) -> ScheduleRecord | None:
        """The record a hash holds; ``None`` for one unreadable (torn, or a
        newer writer's: left out, it expires by itself)."""
        text = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}
        try:
            return cls(
                app=text["app"],
                task=text["task"],
                spec=text["spec"],
                since=float(text["since"]),
                slot=float(text["slot"]),
                key=text["key"],
                next=float(text["next"]),
                written=int(text["written"]),
                skipped=int(text.get("skipped", "0")),
                expired=int(text.get("expired", "0")),
                run_slot=float(text["run_slot"]) if "run_slot" in text else None,
                run_key=text.get("run_key"),
                run_state=text.get("run_state"),
                run_at=_number(text.get("run_at")),
                schedule=rebuilt(text),
            )
        except (KeyError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A periodic task as a page shows it: its record, with what the Lens
    says now of its last slot, and what no worker published."""

    record: ScheduleRecord
    #: The last slot written as the Lens holds it now: its state and when
    #: (``None``: not run, so far).
    latest: tuple[str, float] | None
    #: Slots that fell since the last written with no worker writing them
    #: (``None``: the schedule could not be rebuilt to count them).
    unwritten: int | None
    #: The newest missed slots: published ones and those seen now.
    missed: tuple[Missed, ...]

    @property
    def overdue(self) -> bool:
        """Whether a slot was due and no worker wrote it: no scheduler runs."""
        return bool(self.unwritten)

    @property
    def latest_expired(self) -> bool:
        """Whether the last slot written expired unrun (its successor fell)."""
        return self.latest is None and self.unwritten is not None and self.unwritten > 0

    @property
    def missed_total(self) -> int:
        """Every slot missed since the first published."""
        return (
            self.record.skipped + self.record.expired + (self.unwritten or 0) + self.latest_expired
        )

    @property
    def last_run(self) -> Run | None:
        """The newest slot known to have run: the last written, if it has,
        else the last the workers settled."""
        r = self.record
        if self.latest is not None:
            state, at = self.latest
            return Run(r.slot, r.key, state, None if math.isnan(at) else at)
        if r.run_slot is None or r.run_key is None or r.run_state is None:
            return None
        return Run(r.run_slot, r.run_key, r.run_state, r.run_at)


async def read_schedules(lens: Lens, now: float | None = None) -> list[ScheduleRow]:
    """Every periodic task in ``lens``'s namespace (the newest :data:`MOST`),
    by app and task: one ``ZREVRANGE``, then one pipeline of the records and
    their missed lists, then one ``inspect`` of each last slot's key, on a
    connection opened for the reading. :class:`LensUnavailable` when Redis
    does not answer."""
    now = time.time() if now is None else now
    config = lens.config
    schema = KeySchema(config.namespace, config.shards)
    redis = client_for(config)
    try:
        listed = await redis.zrevrange(index_key(schema), 0, MOST - 1)
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in listed]
        replies: list[object] = []
        if names:
            async with redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hgetall(record_key(schema, name))
                    pipe.lrange(missed_key(schema, name), 0, MISSED_KEPT - 1)
                replies = await keep_cancellation(pipe.execute())
    except (redis_errors.RedisError, OSError) as exc:
        raise LensUnavailable(f"cannot read the schedules: {exc}") from exc
    finally:
        await close(redis)
    found: list[tuple[ScheduleRecord, list[bytes]]] = []
    for raw, missed in zip(replies[0::2], replies[1::2], strict=True):
        record = ScheduleRecord.parse(raw) if isinstance(raw, dict) and raw else None
        if record is not None and isinstance(missed, list):
            found.append((record, missed))
    states = await lens.inspect_many([record.key for record, _ in found])
    # Counting a cron schedule's slots is CPU work: off the node's event loop.
    return await asyncio.to_thread(_rows, found, states, now)


class _Gaps:
    """The gaps the pages counted last, by schedule and last slot written, so
    that each look walks a cron expression only over the slots that fell
    since the look before (a task a day overdue would otherwise be walked
    whole at each refresh). Bounded: the :data:`MOST` looked at last. The
    pages' rows are worked out in threads, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: OrderedDict[tuple[Schedule, float], tuple[float, int, list[float]]]
        self._known = OrderedDict()

    def between(self, when: Schedule, after: float, before: float) -> tuple[int, list[float]]:
        """:func:`slots_between` of ``after`` (a slot) and ``before`` (a slot,
        or ``after``), from the count up to the last ``before`` asked."""
        if isinstance(when, Interval):
            return slots_between(when, after, before)  # divided out: nothing to keep
        with self._lock:
            known = self._known.pop((when, after), None)
        if known is None or known[0] > before:
            count, newest = slots_between(when, after, before)
        else:
            upto, count, newest = known
            # The slots up to `upto`, then `upto` itself (a slot, once past
            # `after`), then those after it.
            middle = [upto] if after < upto < before else []
            more, latest = slots_between(when, upto, before)
            count, newest = count + len(middle) + more, (newest + middle + latest)[-MISSED_KEPT:]
        with self._lock:
            self._known[(when, after)] = (before, count, newest)
            while len(self._known) > MOST:
                self._known.popitem(last=False)
        return count, newest


#: The process's counted gaps (only pages read them).
_GAPS = _Gaps()


def _rows(
    found: list[tuple[ScheduleRecord, list[bytes]]], states: list[KeyState], now: float
) -> list[ScheduleRow]:
    rows = [
        _row(record, missed, state, now)
        for (record, missed), state in zip(found, states, strict=True)
    ]
    return sorted(rows, key=lambda row: (row.record.app, row.record.task))


def _row(
    record: ScheduleRecord, published: list[bytes], state: KeyState, now: float
) -> ScheduleRow:
    """A task's row: its record, and what happened since its last slot."""
    unwritten: int | None = None
    seen: list[Missed] = []
    if record.schedule is not None:
        # A slot no worker wrote is missed once the slot after it falls (its TTL would have ended).
        count, newest = _GAPS.between(record.schedule, record.slot, record.schedule.latest(now))
        unwritten = count
        seen = [Missed(at, "skipped") for at in newest]
    latest = outcome(state)
    if latest is None and unwritten:
        seen.append(Missed(record.slot, "expired"))
    for line in published:
        at, _, why = line.decode(errors="replace").partition(" ")
        try:
            seen.append(Missed(float(at), why))
        except ValueError:
            continue
    newest_first = sorted(set(seen), key=lambda m: m.at, reverse=True)[:MISSED_KEPT]
    return ScheduleRow(record, latest, unwritten, tuple(newest_first))


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    value = float(text)
    return None if math.isnan(value) else value
