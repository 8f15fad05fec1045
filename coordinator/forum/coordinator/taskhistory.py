"""Per-task history: what each task did, minute by minute, kept in the Lens's
Redis for :data:`KEEP` seconds, so the dashboard can show throughput,
failure rate and run-time percentiles over the last day, across a restart
of any node or worker.

Why the Lens's Redis and not a node's data dir: a job runs in a worker,
never in a node. A node stores and hands out tuples; it does not see a run
start, end or fail, nor how long it took. The workers do, cluster-wide, and
every worker already talks to the Lens's Redis; every node's dashboard reads
the same Redis (``forum serve --lens-url``), so each shows the same history,
and a node restarted (or a new one) shows it at once.

How a worker counts (:class:`TaskHistory`): each attempt its task runner
ends is added in memory to its task's current minute (done, retried, dead,
its run time and its wait as fixed-bucket histograms, :data:`BUCKETS`); no
Redis call per job. Every :data:`FLUSH_EVERY` seconds the minutes counted
since the last flush go out in one pipelined round trip (``HINCRBY`` per
field, ``EXPIRE`` per key), into the minute's hash and into its quarter
hour's (:data:`SPANS`: a day's chart reads 96 hashes, not 1,440). A flush
that fails keeps its counts and the next one adds them again (one that
timed out after Redis applied part of it counts that part twice: a count
is never lost, rarely doubled); at most :data:`MAX_PENDING` minutes wait so
(the oldest are dropped past that, logged), so a Redis down for hours costs
bounded memory and never holds a job.

The wait of an attempt is its start minus ``max(enqueued, due)``: the job
record's ``due`` (the producer writes the enqueue time, or the later time a
delayed job is due; a failed attempt writes when the next is due). A
worker reads the records of the attempts it started, one pipelined ``HMGET``
per flush, of the first :data:`MAX_WAITS` attempts started since the last
(past 20 attempts a second the waits are a sample: reading one back costs
the worker some 60 us of CPU, off the job's path, so at most 1.2 ms a
second whatever the rate). An attempt whose record has
no ``due`` yet, or already names the next attempt's (it failed fast), has
no wait sample: the wait histogram counts fewer attempts than the run
histogram.

=====================================  ======  ====================================  =======
key                                    type    holds                                 expires
=====================================  ======  ====================================  =======
``{<ns>:0}:taskhistory:<span>:<slot>`` hash    field ``<task> <counter>`` -> count   KEEP
                                               (:data:`COUNTERS`, ``run <i>``,
                                               ``wait <i>`` for bucket ``i``,
                                               ``run_ms``, ``wait_ms`` the sums)
=====================================  ======  ====================================  =======

``<span>`` is 60 (a minute) or 900 (a quarter hour), ``<slot>`` Unix time //
span. The key carries shard 0's hash tag, as the workers' presence records
do (forum.coordinator.presence). Bound: 2,880 + 192 keys (48 h of minutes
and of quarters); each holds at most ``5 + 2 * len(BUCKETS)`` = 37 fields
per task that ran in it, some 40 bytes each: at most ~1.5 KiB per task per
minute, ~4.5 MiB per task over the 48 h with its quarters (far less in
practice: a bucket nothing fell into is no field).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from redis import exceptions as redis_errors

from forum.coordinator.errors import LensUnavailable
from forum.coordinator.keys import KeySchema
from forum.coordinator.lens import Lens, LensConfig
from forum.coordinator.presence import client_for
from forum.coordinator.redis_url import RedisClient, close
from forum.node.core.cancellation import keep_cancellation

log = logging.getLogger(__name__)

#: How long a minute is kept (seconds): 48 hours.
KEEP = 48 * 3600
#: Seconds between a worker's flushes.
FLUSH_EVERY = 5.0
#: The most minutes a worker keeps unwritten while Redis fails (a day).
MAX_PENDING = 1440
#: The most attempts' waits read back in one flush (a sample of 20 a second
#: at most: ~1,200 a minute, plenty for a percentile, at a bounded cost).
MAX_WAITS = 100
#: The longest a flush waits on Redis (seconds).
FLUSH_WITHIN = 2.0
#: The histograms' bucket upper bounds, in seconds (Prometheus ``le``); the
#: last, +Inf, catches the rest.
BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
    math.inf,
)  # fmt: skip
#: What an attempt's outcome counts as.
Outcome = Literal["done", "retried", "dead"]
#: The spans history is kept in (seconds): minutes, and quarter hours.
SPANS = (60, 900)
#: The plain counters of a task's minute.
COUNTERS: tuple[Outcome, ...] = ("done", "retried", "dead")


def history_key(schema: KeySchema, span: int, slot: int) -> str:
    """The hash of ``slot`` (Unix time // ``span``), ``span`` one of :data:`SPANS`."""
    return f"{schema.tag(0)}:taskhistory:{span}:{slot}"


def bucket_of(seconds: float) -> int:
    """The index of the bucket ``seconds`` falls in (``le`` its bound)."""
    return bisect.bisect_left(BUCKETS, seconds)


@dataclass(slots=True)
class Histogram:
    """Counts per bucket of :data:`BUCKETS`, and their sum in seconds."""

    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0

    def add(self, seconds: float) -> None:
        self.counts[bucket_of(seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def merge(self, other: Histogram) -> None:
        counts = self.counts
        for i, n in enumerate(other.counts):
            if n:
                counts[i] += n
        self.total += other.total

    def percentile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the ``q`` quantile (0..1),
        ``None`` when empty; the last finite bound when it is past them."""
        count = self.count
        if not count:
            return None
        rank = max(1, math.ceil(q * count))
        seen = 0
        for bound, n in zip(BUCKETS, self.counts, strict=True):
            seen += n
            if seen >= rank:
                return bound if bound != math.inf else BUCKETS[-2]
        return BUCKETS[-2]  # pragma: no cover - the counts sum to count


@dataclass(slots=True)
class TaskMinute:
    """One task's figures over one minute (a worker's share, or the sum of all)."""

    done: int = 0
    retried: int = 0
    dead: int = 0
    run: Histogram = field(default_factory=Histogram)
    wait: Histogram = field(default_factory=Histogram)

    def merge(self, other: TaskMinute) -> None:
        self.done += other.done
        self.retried += other.retried
        self.dead += other.dead
        self.run.merge(other.run)
        self.wait.merge(other.wait)

    def fields(self, task: str) -> dict[str, int]:
        """The hash fields to add, non-zero only (times as whole milliseconds)."""
        out = {f"{task} {name}": getattr(self, name) for name in COUNTERS}
        for kind, hist in (("run", self.run), ("wait", self.wait)):
            out.update({f"{task} {kind} {i}": n for i, n in enumerate(hist.counts)})
            out[f"{task} {kind}_ms"] = round(hist.total * 1000)
        return {name: n for name, n in out.items() if n}


@dataclass(frozen=True, slots=True)
class Started:
    """An attempt started, whose wait is read back at the next flush."""

    key: str
    task: str
    at: float
    attempt: int


class TaskHistory:
    """One worker's per-task counts, flushed to the Lens's Redis (see the
    module docstring), and its run and wait histograms since it started (its
    ``/metrics``: :meth:`times`).

    Made by :meth:`for_lens` for a :class:`~forum.coordinator.lens.Lens`
    (the in-memory authority has no Redis to keep history in), with a
    connection of its own: a flush never queues behind the claims' calls.
    """

    def __init__(self, config: LensConfig) -> None:
        self._config = config
        #: Opened at the first flush: a worker made and never run opens none.
        self._redis: RedisClient | None = None
        self._schema = KeySchema(config.namespace, config.shards)
        #: (minute, task) -> counts not yet written.
        self._pending: dict[tuple[int, str], TaskMinute] = {}
        self._started: list[Started] = []
        #: task -> (run, wait) since the worker started.
        self._times: dict[str, tuple[Histogram, Histogram]] = {}
        self.dropped = 0

    @classmethod
    def for_lens(cls, authority: object) -> TaskHistory | None:
        """A history for a worker of ``authority``; ``None`` if it is no Lens."""
        return cls(authority.config) if isinstance(authority, Lens) else None

    def started(self, key: str, task: str, at: float, attempt: int) -> None:
        """Attempt ``attempt`` of job ``key`` started at ``at`` (Unix s): its
        wait is read back at the next flush (the first :data:`MAX_WAITS`)."""
        if len(self._started) < MAX_WAITS:
            self._started.append(Started(key, task, at, attempt))

    def ended(self, task: str, outcome: Outcome, started: float, ended: float) -> None:
        """An attempt of ``task`` ran from ``started`` to ``ended`` (Unix s)."""
        minute = self._minute(task, int(ended // 60))
        setattr(minute, outcome, getattr(minute, outcome) + 1)
        seconds = max(ended - started, 0.0)
        minute.run.add(seconds)
        self._times_of(task)[0].add(seconds)

    def times(self) -> dict[str, tuple[Histogram, Histogram]]:
        """Each task's run and wait histograms since the worker started,
        copies (a scrape reads them in a thread while the loop counts on:
        ``dict()`` and ``list()`` of built-in containers copy under the GIL)."""
        return {
            task: (Histogram(list(run.counts), run.total), Histogram(list(wait.counts), wait.total))
            for task, (run, wait) in dict(self._times).items()
        }

    async def run(self, stop: asyncio.Event) -> None:
        """Flush every :data:`FLUSH_EVERY` seconds until ``stop`` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_EVERY):
                    await stop.wait()
            await self.flush()

    async def flush(self) -> bool:
        """Read the waits of the attempts started, then write every pending
        minute, in two round trips; ``False`` (logged, counts kept) when Redis
        fails."""
        started, self._started = self._started, []
        try:
            async with asyncio.timeout(FLUSH_WITHIN):
                if started:
                    await self._read_waits(started)
                if not self._pending:
                    return True
                pending = self._pending
                self._pending = {}
                try:
                    await self._write(pending)
                except BaseException:
                    self._keep(pending)
                    raise
        except (redis_errors.RedisError, OSError, TimeoutError) as exc:
            log.warning(
                "task history not written, kept for the next flush (%s)", exc or "timed out"
            )
            return False
        return True

    async def aclose(self) -> None:
        """A last flush (bounded by :data:`FLUSH_WITHIN`), then close the connection."""
        try:
            await self.flush()
        finally:
            if self._redis is not None:
                await close(self._redis)

    def _client(self) -> RedisClient:
        if self._redis is None:
            self._redis = client_for(self._config)
        return self._redis

    async def _read_waits(self, started: Sequence[Started]) -> None:
        async with self._client().pipeline(transaction=False) as pipe:
            for each in started:
                pipe.hmget(self._schema.task(each.key), ["due", "state", "attempt"])
            replies = await keep_cancellation(pipe.execute())
        for each, (due, state, attempt) in zip(started, replies, strict=True):
            if due is None:
                continue  # no record yet: no sample
            if state == b"retrying" and attempt == str(each.attempt).encode():
                continue  # this attempt failed already: its due is the next one's
            wait = max(each.at - float(due), 0.0)  # clocks of two machines: never below 0
            self._minute(each.task, int(each.at // 60)).wait.add(wait)
            self._times_of(each.task)[1].add(wait)

    async def _write(self, pending: Mapping[tuple[int, str], TaskMinute]) -> None:
        slots: dict[tuple[str, str], TaskMinute] = {}  # (key, task) -> counts, every span
        for (minute, task), counts in pending.items():
            for span in SPANS:
                name = history_key(self._schema, span, minute * 60 // span)
                slots.setdefault((name, task), TaskMinute()).merge(counts)
        async with self._client().pipeline(transaction=False) as pipe:
            for (name, task), counts in slots.items():
                for each, n in counts.fields(task).items():
                    pipe.hincrby(name, each, n)
            for name in {name for name, _ in slots}:
                pipe.expire(name, KEEP)
            await keep_cancellation(pipe.execute())

    def _keep(self, pending: Mapping[tuple[int, str], TaskMinute]) -> None:
        """Put ``pending`` back for the next flush, at most :data:`MAX_PENDING`
        minutes in all (the oldest dropped)."""
        for slot, counts in pending.items():
            self._minute(slot[1], slot[0]).merge(counts)
        minutes = sorted({minute for minute, _ in self._pending})
        if len(minutes) > MAX_PENDING:
            cut = minutes[-MAX_PENDING]
            gone = [slot for slot in self._pending if slot[0] < cut]
            for slot in gone:
                del self._pending[slot]
            self.dropped += len(gone)
            log.warning("task history: %d task-minutes dropped (Redis down too long)", len(gone))

    def _minute(self, task: str, minute: int) -> TaskMinute:
        slot = (minute, task)
        counts = self._pending.get(slot)
        if counts is None:
            counts = self._pending[slot] = TaskMinute()
        return counts

    def _times_of(self, task: str) -> tuple[Histogram, Histogram]:
        times = self._times.get(task)
        if times is None:
            times = self._times[task] = (Histogram(), Histogram())
        return times


def parse_minute(record: Mapping[bytes, bytes]) -> dict[str, TaskMinute]:
    """A slot's hash, task by task (fields it does not know are skipped)."""
    tasks: dict[str, TaskMinute] = {}
    for raw, value in record.items():
        task, _, name = raw.decode(errors="replace").partition(" ")
        counts = tasks.get(task)
        if counts is None:
            counts = tasks[task] = TaskMinute()
        try:
            _FIELDS[name](counts, int(value))
        except (KeyError, ValueError):
            continue
    return tasks


def _setter(kind: str, index: int) -> Callable[[TaskMinute, int], None]:
    def put(counts: TaskMinute, n: int) -> None:
        getattr(counts, kind).counts[index] = n

    return put


def _counter(name: str) -> Callable[[TaskMinute, int], None]:
    return lambda counts, n: setattr(counts, name, n)


def _sum(kind: str) -> Callable[[TaskMinute, int], None]:
    return lambda counts, n: setattr(getattr(counts, kind), "total", n / 1000)


#: How each field of a slot's hash (after its task) is read into a TaskMinute.
_FIELDS: dict[str, Callable[[TaskMinute, int], None]] = {
    **{name: _counter(name) for name in COUNTERS},
    **{f"{kind}_ms": _sum(kind) for kind in ("run", "wait")},
    **{f"{kind} {i}": _setter(kind, i) for kind in ("run", "wait") for i in range(len(BUCKETS))},
}


async def read_history(
    config: LensConfig, span: int, slots: Iterable[int]
) -> dict[int, dict[str, TaskMinute]]:
    """Each of ``slots``' figures (of ``span`` seconds, one of :data:`SPANS`),
    task by task (a slot with none is left out), in one pipelined round trip
    on a connection opened for it. :class:`LensUnavailable` when Redis does
    not answer."""
    wanted = list(slots)
    schema = KeySchema(config.namespace, config.shards)
    redis = client_for(config)
    try:
        async with redis.pipeline(transaction=False) as pipe:
            for slot in wanted:
                pipe.hgetall(history_key(schema, span, slot))
            records = await keep_cancellation(pipe.execute())
    except (redis_errors.RedisError, OSError) as exc:
        raise LensUnavailable(f"cannot read the task history: {exc}") from exc
    finally:
        await close(redis)
    return {m: parse_minute(r) for m, r in zip(wanted, records, strict=True) if r}
