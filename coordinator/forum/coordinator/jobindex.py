"""The job index: task jobs by state and task, kept as they change state, so
the dashboard and ``forum jobs list`` count, sort, page and search them
without a scan.

Kept by the Lens's own scripts (``lua/prelude.lua``: ``ix_move``), in the
same call that changes a job's state, per shard (keys under the shard's hash
tag, so one Cluster slot with the job's other keys):

===============================  ======  ==========================================
key                              type    holds
===============================  ======  ==========================================
``<tag>:ix:<state>``             zset    member the claim key, score when the job
                                         entered the state (Redis TIME ms); for
                                         ``delayed`` and ``retrying`` when it is due
``<tag>:ix:<state>:<task>``      zset    the same, of one task
``<tag>:ix:tasks``               set     the task names indexed (added to when a
                                         job is first indexed): the counts are the
                                         ``ZCARD``s of the per-task sets, so a move
                                         keeps no count
===============================  ======  ==========================================

The job record (``<tag>:task:<key>``) keeps the state a job is indexed under
(field ``ix``, the Lens's own, as ``token``), so a move takes it out of the
old sets. Only a key whose record names a task is indexed: a raw Worker's
keys are not. The moves:

* a producer's record (``record_enqueued``): ``delayed`` until its due time,
  else ``queued`` (``done`` or ``running`` when a worker got there first;
  when the worker's record came first, the producer's ``args`` and
  ``enqueued`` are added where it has none, and the job indexed if not yet);
* a claim: ``running``; a fenced record saying ``done``, ``dead`` or
  ``retrying``: that state (retrying scored by its due time);
* a completion: ``done``, or ``dead`` when the record says so (a buried job);
* a release: ``queued`` (plain), ``retrying`` (a failed attempt, scored when
  the next is due) or ``dead`` (the last); a hand-back: as its record says,
  else ``queued``; a re-offer of a dead worker's job (``reaped``): ``queued``;
* a cancel: ``cancelled``; ``forget_record``: out of the index; a dead
  job's letter requeued (``requeued``, by ``App.retry``): ``queued``.

A ``delayed`` job whose due time passed is queued: it is read so from its
score (:class:`JobCounts` and :class:`JobQuery` count and list it as
``queued``), no timer moves it.

Bounded: an entry lives no longer than its job's record. Each move into a
final state (done, dead, cancelled) looks at the task's two oldest entries
of that state and drops those whose record is gone (it expired: its life,
the task's ``result_ttl``, is over), so the sets shrink as fast as they grow
once records expire; and any entry a page meets whose record is gone is
dropped there (``lua/index_page.lua``). A job costs its claim key twice in
zsets (111 bytes an entry by ``MEMORY USAGE``, so about 220 bytes a job)
and a field of its record (docs/coordination.md).

Reading (:meth:`LensJobIndex.find_jobs`): each (shard, set) is a stream in
score order; a page is a k-way merge of the streams, each read in pages
after a position found by rank (``index_page.lua``: ZCOUNT and a binary
search among equal scores, O(log n) however deep), so paging costs the same
on the first page and the thousandth. The cursor is the last entry looked
at. A key-prefix or text filter is applied here, over the entries read in
pipelined batches (of up to :data:`BATCH` a stream), at most :data:`SEARCH_BUDGET` of them a
call: past that the page says ``complete=False`` and its cursor goes on
from there.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from forum.coordinator.connection import LensConnection
from forum.coordinator.scripts import Call

__all__ = [
    "INDEXED_STATES",
    "JobCounts",
    "JobFound",
    "JobQuery",
    "LensJobIndex",
    "MemoryJobIndex",
]

#: Every state a job is indexed under.
INDEXED_STATES = ("queued", "delayed", "running", "retrying", "done", "dead", "cancelled")
#: The states a job stays in once there (trimmed when their records go).
FINAL_STATES = frozenset({"done", "dead", "cancelled"})
#: The states scored by when a job is due (a move into one again moves the
#: score); a move into any other state a job is in writes nothing.
_DUE_SCORED = frozenset({"delayed", "retrying"})
#: The most jobs one page holds.
MAX_LIMIT = 500
#: How many index entries a key or text search looks at in one call.
SEARCH_BUDGET = 5_000
#: How many entries of each stream one read of a search takes.
BATCH = 500
#: The highest score: every ms score is below it (and exact in a double).
_TOP = 2**53 - 1


@dataclass(frozen=True, slots=True)
class JobCounts:
    """How many indexed jobs: ``by_task`` task -> state -> count (states
    with none left out)."""

    by_task: Mapping[str, Mapping[str, int]]

    def by_state(self) -> dict[str, int]:
        """The counts summed over tasks, state -> count."""
        summed: dict[str, int] = {}
        for states in self.by_task.values():
            for state, count in states.items():
                summed[state] = summed.get(state, 0) + count
        return summed

    @property
    def total(self) -> int:
        return sum(sum(states.values()) for states in self.by_task.values())


@dataclass(frozen=True, slots=True)
class JobQuery:
    """Which jobs :meth:`LensJobIndex.find_jobs` finds: in ``state`` (one of
    :data:`INDEXED_STATES`), of ``task``, whose key starts with ``key``,
    whose arguments (the record's ``args`` preview) hold ``text`` (ignoring
    case), that last changed state from ``since`` to ``until`` (Unix s;
    a delayed or retrying job by when it is due), newest first or oldest
    first, ``limit`` a page, from ``cursor`` (the last page's
    :attr:`JobFound.next_cursor`). ``ValueError`` for a bad one."""

    state: str | None = None
    task: str | None = None
    key: str | None = None
    text: str | None = None
    since: float | None = None
    until: float | None = None
    newest_first: bool = True
    limit: int = 50
    cursor: str | None = None
    #: Only jobs of these tasks (an app's: another app may share the Lens's
    #: namespace); a filter applied as ``key`` and ``text`` are.
    tasks: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in INDEXED_STATES:
            raise ValueError(f"state is one of {', '.join(INDEXED_STATES)}, not {self.state!r}")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int):
            raise ValueError(f"limit is a whole number, not {self.limit!r}")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise ValueError(f"limit must be from 1 to {MAX_LIMIT}, not {self.limit}")
        if self.cursor is not None:
            _decoded(self.cursor)

    @property
    def filtered(self) -> bool:
        """Whether a filter reads entries one by one (key or text)."""
        return bool(self.key or self.text) or self.tasks is not None

    def matches(self, entry: Entry) -> bool:
        if self.key and not entry.key.startswith(self.key):
            return False
        if self.tasks is not None and entry.task not in self.tasks:
            return False
        return not self.text or self.text.casefold() in entry.args.casefold()


@dataclass(frozen=True, slots=True)
class JobFound:
    """A page of :meth:`LensJobIndex.find_jobs`: ``keys`` in order; ``total``
    how many match (exact without a key or text filter, else ``None``);
    ``next_cursor`` for the next page (``None``: no more); ``searched`` how
    many entries a key or text filter looked at; ``complete`` ``False`` when
    such a search stopped at :data:`SEARCH_BUDGET` before the end."""

    keys: list[str]
    total: int | None
    next_cursor: str | None
    searched: int = 0
    complete: bool = True


class Stream(NamedTuple):
    """One sorted set to read: ``set`` (``<state>`` or ``<state>:<task>``)
    of ``shard``, scores ``lo`` to ``hi`` (ms)."""

    shard: int
    set: str
    lo: int
    hi: int


class Entry(NamedTuple):
    """An index entry: its ``score`` (ms), claim ``key``, ``args`` preview
    ("" unless asked for) and ``task``."""

    score: int
    key: str
    args: str = ""
    task: str = ""


class Read(NamedTuple):
    """One stream's reply: the range's ``total``, whether ``more`` may
    follow, the ``entries`` after the position asked for."""

    total: int
    more: bool
    entries: list[Entry]


class Ask(NamedTuple):
    """One read of a stream: up to ``size`` entries after ``after`` (from
    the start when ``None``), newest first or not, with their ``args``."""

    stream: Stream
    after: Entry | None
    size: int
    newest: bool
    args: bool


#: Reads each ask at once, in order.
Fetch = Callable[[Sequence[Ask]], Awaitable[list[Read]]]


def streams_of(query: JobQuery, shards: int, now_ms: int) -> list[Stream]:
    """The streams a query merges: each state's set (of the task, when
    given) in each shard; ``queued`` adds delayed jobs due by ``now_ms``,
    and ``delayed`` leaves those out."""
    lo = 0 if query.since is None else max(0, int(query.since * 1000))
    hi = _TOP if query.until is None else min(_TOP, int(query.until * 1000))
    suffix = "" if query.task is None else f":{query.task}"
    ranges: list[tuple[str, int, int]] = []
    for state in INDEXED_STATES if query.state is None else (query.state,):
        if query.state == "queued":
            ranges.append(("delayed", lo, min(hi, now_ms)))
        if query.state == "delayed":
            ranges.append(("delayed", max(lo, now_ms + 1), hi))
        else:
            ranges.append((state, lo, hi))
    return [
        Stream(shard, name + suffix, a, b)
        for shard in range(shards)
        for name, a, b in ranges
        if a <= b
    ]


def encode_cursor(entry: Entry) -> str:
    """An opaque cursor naming ``entry``: the next page starts after it."""
    raw = f"{entry.score}\n{entry.key}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decoded(cursor: str) -> Entry:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        score, key = raw.split("\n", 1)
        return Entry(int(score), key)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"not a cursor of a job listing: {cursor!r}") from None


def order(entry: Entry) -> tuple[int, bytes]:
    """An entry's place: by score, then bytewise by key (Redis's order)."""
    return entry.score, entry.key.encode()


class _Head:
    """A stream's next entry in the merge's heap: first the newest (a
    newest-first page) or the oldest, by :func:`order`."""

    __slots__ = ("newest_first", "place")

    def __init__(self, entry: Entry, newest_first: bool) -> None:
        self.place = order(entry)
        self.newest_first = newest_first

    def __lt__(self, other: _Head) -> bool:
        if self.newest_first:
            return self.place > other.place
        return self.place < other.place


@dataclass(slots=True)
class _Reading:
    """A stream being merged: where it was read to, what is buffered."""

    stream: Stream
    after: Entry | None
    size: int
    buffer: list[Entry] = field(default_factory=list)
    more: bool = True


def _batch(query: JobQuery, streams: int) -> int:
    """How many entries to read of each stream first: a page's share (twice
    it: streams are rarely even), or for a search the budget's, at least 4
    and at most a page (a search: :data:`BATCH`). A stream read dry before
    the page is full is read again, twice as many each time (one round trip
    for all the streams read dry at once): a page of every state reads
    112 streams (7 states, 16 shards), most of them nearly empty."""
    if query.filtered:
        return max(4, min(BATCH, SEARCH_BUDGET // max(1, streams)))
    return max(4, min(query.limit, -(-2 * query.limit // max(1, streams))))


async def find(query: JobQuery, streams: list[Stream], fetch: Fetch) -> JobFound:
    """A page of ``query`` merged over ``streams`` (see the module docstring)."""
    after = None if query.cursor is None else _decoded(query.cursor)
    filtered = query.filtered
    batch = _batch(query, len(streams))
    readings = [_Reading(stream, after, batch) for stream in streams]
    most = BATCH if filtered else query.limit
    keys: list[str] = []
    searched = 0
    total: int | None = None
    last: Entry | None = None
    # The streams' heads in a heap (a search merges up to the budget's
    # entries over 112 streams or more: a max() over them all per entry was
    # most of a search's time); the streams read dry wait in ``dry``, read
    # again all at once, before the next entry is taken.
    heads: list[tuple[_Head, int]] = []
    dry = list(range(len(readings)))
    while len(keys) < query.limit and not (filtered and searched >= SEARCH_BUDGET):
        if dry:
            todo = [readings[i] for i in dry]
            asks = [Ask(r.stream, r.after, r.size, query.newest_first, bool(query.text))
                    for r in todo]  # fmt: skip
            reads = await fetch(asks)
            if total is None:
                total = sum(read.total for read in reads)
            for i, reading, read in zip(dry, todo, reads, strict=True):
                reading.buffer = read.entries[::-1]  # popped from the end
                reading.more = read.more
                reading.size = min(most, 2 * reading.size)
                if reading.buffer:
                    heapq.heappush(heads, (_Head(reading.buffer[-1], query.newest_first), i))
            dry = []
            continue
        if not heads:
            break
        i = heapq.heappop(heads)[1]
        reading = readings[i]
        entry = reading.buffer.pop()
        reading.after = last = entry
        searched += 1
        if query.matches(entry):
            keys.append(entry.key)
        if reading.buffer:
            heapq.heappush(heads, (_Head(reading.buffer[-1], query.newest_first), i))
        elif reading.more:
            dry.append(i)
    left = any(r.buffer or r.more for r in readings)
    return JobFound(
        keys=keys,
        total=None if filtered else (total or 0),
        next_cursor=encode_cursor(last) if left and last is not None else None,
        searched=searched if filtered else 0,
        complete=not (filtered and left and len(keys) < query.limit),
    )


def _counts(flat: Mapping[str, int], due: Mapping[str, int]) -> JobCounts:
    """Counts from ``<state>:<task>`` -> n, with ``due`` (task -> delayed
    jobs due by now) moved from delayed to queued."""
    by_task: dict[str, dict[str, int]] = {}
    for name, count in flat.items():
        state, _, task = name.partition(":")
        if count > 0:
            by_task.setdefault(task, {})[state] = count
    for task, passed in due.items():
        states = by_task.setdefault(task, {})
        states["queued"] = states.get("queued", 0) + passed
        states["delayed"] = states.get("delayed", 0) - passed
        if states["delayed"] <= 0:
            del states["delayed"]
    return JobCounts(by_task)


class LensJobIndex(LensConnection):
    """The index as the Lens reads it (a part of :class:`forum.coordinator.Lens`)."""

    async def job_counts(self) -> JobCounts:
        """How many indexed jobs in each state, per task: one script per
        shard (``index_counts.lua``), one round trip, no scan."""
        calls = [Call("index_counts", shard, None, ()) for shard in range(self._keys.shards)]
        flat: dict[str, int] = {}
        due: dict[str, int] = {}
        for counts, passed in await self._send(calls):
            for i in range(0, len(counts), 2):
                name = bytes(counts[i]).decode(errors="replace")
                flat[name] = flat.get(name, 0) + int(counts[i + 1])
            for i in range(0, len(passed), 2):
                task = bytes(passed[i]).decode(errors="replace")
                due[task] = due.get(task, 0) + int(passed[i + 1])
        return _counts(flat, due)

    async def find_jobs(self, query: JobQuery) -> JobFound:
        """A page of the jobs ``query`` asks for (see the module docstring)."""
        streams = streams_of(query, self._keys.shards, int(time.time() * 1000))
        return await find(query, streams, self._fetch)

    async def requeued(self, key: str) -> bool:
        """Job ``key``'s dead letter was put back to work: index it queued
        unless it is no longer indexed dead (``requeued.lua``)."""
        return bool(await self._run("requeued", key))

    async def _fetch(self, asks: Sequence[Ask]) -> list[Read]:
        calls = [
            Call("index_page", ask.stream.shard, None, (
                ask.stream.set, "1" if ask.newest else "0", ask.stream.lo, ask.stream.hi,
                "" if ask.after is None else ask.after.score,
                "" if ask.after is None else ask.after.key,
                ask.size, "1" if ask.args else "0",
            ))
            for ask in asks
        ]  # fmt: skip
        reads = []
        for reply in await self._send(calls):
            flat = reply[2:]
            text = [bytes(part).decode(errors="replace") for part in flat]
            entries = [
                Entry(int(text[i + 1]), text[i], text[i + 2], text[i + 3])
                for i in range(0, len(text), 4)
            ]
            reads.append(Read(int(reply[0]), reply[1] == 1, entries))
        return reads


class MemoryJobIndex:
    """The index as :class:`forum.coordinator.memory.MemoryAuthority` keeps
    it, move for move as the scripts do, for its contract tests: each key's
    (task, state, score), read by a sort, and its state in the record's
    ``ix``. ``record_of(key)`` is the key's job record while it lives
    (``None`` once gone)."""

    def __init__(self, record_of: Callable[[str], dict[str, bytes] | None]) -> None:
        self._record_of = record_of
        self._entries: dict[str, tuple[str, str, int]] = {}

    def move(self, key: str, state: str | None, score: float) -> None:
        """Index ``key`` under ``state`` (``None``: out) from ``score`` (Unix
        s), as ``ix_move`` does: only a key whose record names a task, and
        nothing for a move into the state it is in (unless due-scored)."""
        record = self._record_of(key)
        task = None if record is None else record.get("task")
        if record is None or task is None:
            return
        if state is not None and state not in _DUE_SCORED and record.get("ix") == state.encode():
            return  # there already: its score is when it entered the state
        if state is None:
            self._entries.pop(key, None)
            record.pop("ix", None)
        else:
            self._entries[key] = (task.decode(errors="replace"), state, int(score * 1000))
            record["ix"] = state.encode()

    def requeued(self, key: str) -> bool:
        found = self._live().get(key)
        if found is None or found[1] != "dead":
            return False
        self.move(key, "queued", time.time())
        return True

    def settled(self, key: str) -> tuple[str, float] | None:
        """What ``key``'s record says its attempt ended as (``ix_settled``):
        ("dead", now) or ("retrying", its due); ``None`` otherwise."""
        record = self._record_of(key) or {}
        if record.get("state") == b"dead":
            return "dead", time.time()
        if record.get("state") == b"retrying":
            return "retrying", float(record.get("due", b"0"))
        return None

    def enqueued(self, key: str, *, done: bool, running: bool) -> None:
        """A producer's new record (``ix_enqueued``)."""
        now = time.time()
        due = float((self._record_of(key) or {}).get("due", b"0"))
        if done or running:
            self.move(key, "done" if done else "running", now)
        else:
            self.move(key, "delayed" if due > now else "queued", due if due > now else now)

    def _live(self) -> dict[str, tuple[str, str, int]]:
        """The entries whose records live (the others dropped, as a page drops them)."""
        for key in [k for k in self._entries if self._record_of(k) is None]:
            del self._entries[key]
        return self._entries

    def counts(self) -> JobCounts:
        now = int(time.time() * 1000)
        flat: dict[str, int] = {}
        due: dict[str, int] = {}
        for task, state, score in self._live().values():
            flat[f"{state}:{task}"] = flat.get(f"{state}:{task}", 0) + 1
            if state == "delayed" and score <= now:
                due[task] = due.get(task, 0) + 1
        return _counts(flat, due)

    async def find(self, query: JobQuery) -> JobFound:
        return await find(query, streams_of(query, 1, int(time.time() * 1000)), self._fetch)

    async def _fetch(self, asks: Sequence[Ask]) -> list[Read]:
        entries = self._live()
        reads = []
        for ask in asks:
            state, _, task = ask.stream.set.partition(":")
            found = [
                Entry(score, key, (self._record_of(key) or {}).get("args", b"").decode(), of)
                for key, (of, at, score) in entries.items()
                if at == state and (not task or of == task)
                and ask.stream.lo <= score <= ask.stream.hi
            ]  # fmt: skip
            found.sort(key=order, reverse=ask.newest)
            total = len(found)
            after = ask.after
            if after is not None:
                mark = order(after)
                found = [e for e in found if (order(e) < mark if ask.newest else order(e) > mark)]
            reads.append(Read(total, len(found) > ask.size, found[: ask.size]))
        return reads
