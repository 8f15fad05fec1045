"""The Strand: a node's append-only log of entries, on disk.

The byte format of the files is in :mod:`forum.node.storage.segment`. This module owns the
directory (its segments and the ``ORIGIN`` file), appending with the fsync
policy, replaying on open, and finding any stored entry again by its id so
that entries can be served on to peers.

Durability (``StrandConfig.fsync``):

``always`` (default)
    An append returns only after its bytes are fsynced. Appends that arrive
    while an fsync is running wait for the next one and share it (group
    commit), so many concurrent appenders cost one fsync per batch; each
    group commit is one batch record (``forum.node.storage.segment``). The writer writes
    them to the OS meanwhile (the page cache: as the other policies do, on
    the loop), and the next fsync starts the moment the previous one ends,
    before its appenders are answered: the disk and the loop work at once.
    fsyncs run in a worker thread, never on the event loop.
``interval``
    Appends return once written to the OS; a background task fsyncs every
    ``fsync_interval`` seconds. A power loss or kernel crash can lose that
    window (plus a roll: a full segment is fsynced before the next starts).
``never``
    Appends return once written to the OS; only the OS decides when (Linux:
    ``vm.dirty_expire_centisecs``, 30 s by default, plus up to one writeback
    period). A crash of the process alone loses nothing under any policy.

Faults (a full disk, EIO, a read-only filesystem): a failed append is cut
back off the file and its ids are given back, so the log holds no part of
it; the next append tries again, so the Strand works again once the cause is
gone. A fault after which the file's content cannot be trusted (a failed
fsync: the kernel may have dropped the pages it could not write; a failed
cut-back; a bug in the writer) makes the Strand *broken*: every append is
refused at once until it is reopened (the node restarted). ``health()``
says which, for the readiness probe. No record is written that replay would
not read back (``RecordTooLarge``), and one directory is held by one open
Strand at a time (an exclusive ``flock`` on its ``LOCK`` file).

What the directory should hold is in its ``MANIFEST`` (:mod:`forum.node.storage.manifest`):
the segments, each sealed one's length and entries, and a durable length
checkpoint of the current one. On open every file is checked against it,
and a segment missing, cut or emptied (the last one included) is refused
with ``StrandDamaged``, one line, before anything is changed. With
``StrandConfig.repair`` the damaged files are set aside instead
(:mod:`forum.node.storage.damage`), what can be read is replayed, and ``damage`` says
what was found; ``missing_own()`` lists the own seqs to fetch from peers.

Ids: the local origin's seqs are given out in the batch that writes them,
and given back if the batch fails, so an origin's seqs never have gaps
(peers rely on that to find what they miss).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import os
import secrets
import socket
import threading
import time
from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Container,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from forum.node.core.codec import (
    MAX_KEY_BYTES,
    EntryEncoder,
    RawEntry,
    decode_entry,
    decode_raw,
    encode_entry,
)
from forum.node.core.entries import (
    MAX_ORIGIN_LENGTH,
    PLAIN,
    Entry,
    EntryId,
    Properties,
    Take,
    Write,
    check_origin,
)
from forum.node.core.errors import (
    DataDirLocked,
    RecordTooLarge,
    SerializationError,
    StrandCorrupt,
    StrandDamaged,
    StrandError,
)
from forum.node.core.reports import CompactionReport
from forum.node.core.resource import AsyncResource
from forum.node.storage import compaction, damage, segment
from forum.node.storage.checked_file import fsync_dir
from forum.node.storage.damage import Damage, Problem
from forum.node.storage.manifest import (
    Manifest,
    Sealed,
    manifest_path,
    read_manifest,
    write_manifest,
)

log = logging.getLogger(__name__)

#: When appends reach the disk: the Strand owns durability, so the one
#: definition lives here and NodeConfig imports it. docs/operations.md
#: says what each can lose.
FsyncPolicy = Literal["always", "interval", "never"]
ORIGIN_FILE = "ORIGIN"
#: Held (flock, exclusive) by the open Strand; it holds the holder's pid.
LOCK_FILE = "LOCK"
#: Written and removed by ``health()`` to find out whether the disk has room again.
PROBE_FILE = "PROBE.tmp"
MIN_SEGMENT_BYTES = 4096
#: A position packs (segment number, byte offset) into one int: 40 bits of offset.
_OFFSET_BITS = 40
_ABSENT = -1
_DEAD = -2


#: The most a Write's record body holds beyond its payload: the longest origin,
#: the largest seq, every property at its longest, a 32-bit length for the
#: payload (3 more than the 8-bit length the empty payload measured here
#: gets), and its head in a batch.
_LONGEST_WRITE = Write(
    EntryId("o" * MAX_ORIGIN_LENGTH, 2**64 - 1),
    b"",
    Properties(2**64 - 1, 2**64 - 1, -128, b"k" * MAX_KEY_BYTES, 2**64 - 1, True),
)
_WRITE_OVERHEAD = len(encode_entry(_LONGEST_WRITE)) + 3 + segment.ENTRY.size


def payload_limit(segment_bytes: int) -> int:
    """The largest payload a Strand with ``segment_bytes`` segments stores
    (its Write fits one record: ``segment.max_body``)."""
    return segment.max_body(segment_bytes) - _WRITE_OVERHEAD


def _default_node_name() -> str:
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())
    return name[:64] or "node"


@dataclass(frozen=True, slots=True)
class StrandConfig:
    """Where and how a Strand stores its log. Immutable: each ``with_*`` returns a copy."""

    storage: Path = Path("forum-data")
    fsync: FsyncPolicy = "always"
    fsync_interval: float = 0.05
    segment_bytes: int = 64 * 1024 * 1024
    node_name: str = field(default_factory=_default_node_name)
    #: Open a damaged directory anyway: set the damaged files aside, replay
    #: what can be read, and say what was found (``Strand.damage``). Without
    #: it, damage is refused (``StrandDamaged``).
    repair: bool = False
    #: Seconds between two durable checkpoints of the current segment's
    #: length in the ``MANIFEST`` (see :mod:`forum.node.storage.manifest`): a cut of the
    #: current segment is found down to the last one.
    checkpoint_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.fsync not in get_args(FsyncPolicy):
            raise ValueError(f"fsync must be always, interval or never, not {self.fsync!r}")
        if not self.fsync_interval > 0:
            raise ValueError("fsync_interval must be positive")
        if self.segment_bytes < MIN_SEGMENT_BYTES:
            raise ValueError(f"segment_bytes must be at least {MIN_SEGMENT_BYTES}")
        if not self.checkpoint_interval > 0:
            raise ValueError("checkpoint_interval must be positive")
        check_origin(self.node_name)

    def with_storage(self, path: str | os.PathLike[str]) -> StrandConfig:
        return dataclasses.replace(self, storage=Path(path))

    def with_fsync(self, policy: FsyncPolicy, interval: float | None = None) -> StrandConfig:
        return dataclasses.replace(
            self, fsync=policy, fsync_interval=interval or self.fsync_interval
        )

    def with_segment_bytes(self, n: int) -> StrandConfig:
        return dataclasses.replace(self, segment_bytes=n)

    def with_node_name(self, name: str) -> StrandConfig:
        return dataclasses.replace(self, node_name=name)

    def with_repair(self, repair: bool = True) -> StrandConfig:
        return dataclasses.replace(self, repair=repair)

    def with_checkpoint_interval(self, seconds: float) -> StrandConfig:
        return dataclasses.replace(self, checkpoint_interval=seconds)


@dataclass(frozen=True, slots=True)
class Page:
    """A page of one origin's entries, as served to a peer.

    ``entries`` are the stored entries, oldest first; ``dead`` the ranges of
    seqs ``(first, last)`` among them that compaction dropped (held once,
    dead for good); ``upto`` the last seq the page covers: every seq up to it
    is in ``entries`` or in ``dead``.
    """

    entries: list[Entry]
    dead: list[tuple[int, int]]
    upto: int


@dataclass(frozen=True, slots=True)
class StrandStats:
    entries: int
    bytes: int
    segments: int
    tails_cut: int
    compactions: int = 0
    bytes_reclaimed: int = 0
    entries_dropped: int = 0


#: Called by the writer with an append's entries once they are durable.
Durable = Callable[[list[Entry]], None]


class _Batch:
    """Appends waiting for the writer: what to write, who waits for it, and
    what to call once it is durable."""

    __slots__ = ("future", "payloads", "props", "remote", "targets", "then")

    def __init__(
        self,
        future: asyncio.Future[list[Entry]],
        payloads: Sequence[bytes] = (),
        targets: Sequence[EntryId] = (),
        remote: Sequence[Entry] = (),
        then: Durable | None = None,
        *,
        props: Properties = PLAIN,
    ) -> None:
        self.future = future
        self.payloads = payloads
        self.props = props
        self.targets = targets
        self.remote = remote
        self.then = then


#: Answer at least this many appends in two halves (see ``Strand._answer``).
_SPLIT_ANSWERS = 8


class _Written:
    """Appends written to the OS, waiting to be durable: the appends with
    their entries, where each entry lies, the first seq when all of them are
    local (else 0), and the offsets the write began and ended at."""

    __slots__ = ("appends", "end", "entries", "first", "positions", "start")

    def __init__(
        self,
        appends: list[tuple[_Batch, list[Entry]]],
        entries: list[Entry],
        positions: list[int],
        first: int,
        start: int,
        *,
        end: int,
    ) -> None:
        self.appends = appends
        self.entries = entries
        self.positions = positions
        self.first = first
        self.start = start
        self.end = end


class _OriginLog:
    """Where each seq of one origin lies in the files, and how far it is contiguous.

    Seqs up to ``base`` (the compaction floor) are all held here or dead
    (dropped by compaction): the few survivors among them are in ``below``,
    so the memory kept is that of the survivors, not of the history. Above
    ``base``, ``positions`` has one slot per seq: a packed position,
    ``_ABSENT`` (never seen) or ``_DEAD`` (dropped).
    """

    __slots__ = ("base", "below", "below_seqs", "contiguous", "count", "positions")

    def __init__(self, base: int = 0) -> None:
        self.base = base
        self.below: dict[int, int] = {}
        self.below_seqs = array("q")  # the keys of ``below``, ascending
        self.positions = array("q")  # index seq-base-1 -> packed position, _ABSENT or _DEAD
        self.contiguous = base
        self.count = 0

    def __contains__(self, seq: int) -> bool:
        """Held here, or dead: either way, never to be taken in again."""
        if seq <= self.base:
            return True
        i = seq - self.base - 1
        return i < len(self.positions) and self.positions[i] != _ABSENT

    def get(self, seq: int) -> int | None:
        """The position of a stored entry; ``None`` if never seen or dead."""
        if seq <= self.base:
            return self.below.get(seq)
        i = seq - self.base - 1
        if i >= len(self.positions):
            return None
        position = self.positions[i]
        return None if position < 0 else position

    def add(self, seq: int, position: int) -> bool:
        """Note where ``seq`` lies; ``False`` (and nothing changes) if it is
        already held or dead."""
        if seq in self:
            return False
        self.count += 1
        positions = self.positions
        i = seq - self.base - 1
        if i == len(positions):  # the common case: the next seq
            positions.append(position)
            if self.contiguous == seq - 1:
                self.contiguous = seq
            return True
        gap = i - len(positions)
        if gap > 0:
            positions.extend([_ABSENT] * gap)
            positions.append(position)
        else:
            positions[i] = position
        if seq == self.contiguous + 1:
            self._extend_contiguous()
        return True

    def add_next(self, first: int, positions: list[int]) -> bool:
        """:meth:`add` for seqs ``first``, ``first + 1``, ... when they are the
        next ones and nothing is missing below them; ``False`` (and nothing
        changes) otherwise."""
        if first != self.highest + 1 or self.contiguous != self.highest:
            return False
        self.positions.extend(positions)
        self.count += len(positions)
        self.contiguous += len(positions)
        return True

    def replay(self, seq: int, position: int) -> bool:
        """:meth:`add` for an entry read back on open: below the floor too
        (a survivor of compaction; whatever is not on disk there is dead)."""
        if seq > self.base:
            return self.add(seq, position)
        if seq in self.below:
            return False
        self.below[seq] = position
        insort(self.below_seqs, seq)
        self.count += 1
        return True

    def move(self, seq: int, position: int) -> None:
        """A stored entry now lies at ``position`` (its segment was rewritten)."""
        if seq <= self.base:
            self.below[seq] = position  # it is in below_seqs already
        else:
            self.positions[seq - self.base - 1] = position

    def forget(self, seq: int) -> None:
        """A dropped seq is to be stored again (``Strand.replace``): absent, not dead."""
        if seq > self.base:
            self.positions[seq - self.base - 1] = _ABSENT

    def drop(self, seq: int) -> None:
        """A stored entry was dropped by compaction: dead from now on."""
        if seq <= self.base:
            if self.below.pop(seq, None) is not None:
                self.count -= 1
                del self.below_seqs[bisect_left(self.below_seqs, seq)]
            return
        i = seq - self.base - 1
        if self.positions[i] >= 0:
            self.count -= 1
        self.positions[i] = _DEAD

    def mark_dead(self, first: int, last: int) -> None:
        """Seqs ``first`` to ``last`` that were never seen here are dead: a
        peer dropped them (held once, gone for good). Held ones stay."""
        first = max(first, self.base + 1)
        if last < first:
            return
        if first <= self.contiguous + 1 and last >= self.highest:
            # Everything from the first gap on: the floor moves to ``last`` and
            # the few held above it are kept as survivors, with no slot per
            # seq (a new node passing a long compacted history).
            self._cover_to(last)
            return
        positions = self.positions
        end = last - self.base
        if end > len(positions):
            positions.extend([_ABSENT] * (end - len(positions)))
        for i in range(first - self.base - 1, end):
            if positions[i] == _ABSENT:
                positions[i] = _DEAD
        if first <= self.contiguous + 1:
            self._extend_contiguous()

    def _cover_to(self, last: int) -> None:
        """Every seq above ``base`` up to ``last`` is held or dead, and none above it is held."""
        base = self.base
        for i, position in enumerate(self.positions):
            if position >= 0:
                self.below[base + 1 + i] = position
                self.below_seqs.append(base + 1 + i)
        del self.positions[:]
        self.base = self.contiguous = last

    def lower_base(self, floor: int) -> None:
        """Seqs above ``floor`` are no longer known to be held or dead (a
        file that held some was lost): those not held are absent again, so
        that peers' copies are taken in (repair mode)."""
        if floor >= self.base:
            return
        slots = array("q", [_ABSENT]) * (self.base - floor)
        cut = bisect_right(self.below_seqs, floor)
        for seq in self.below_seqs[cut:]:
            slots[seq - floor - 1] = self.below.pop(seq)
        del self.below_seqs[cut:]
        self.positions = slots + self.positions
        self.base = self.contiguous = floor
        self._extend_contiguous()

    def raise_base(self, floor: int) -> None:
        """Seqs up to ``floor`` (at most ``contiguous``) are now all held or
        dead: keep only the survivors' positions among them."""
        floor = min(floor, self.contiguous)
        if floor <= self.base:
            return
        cut = floor - self.base
        for i in range(cut):
            position = self.positions[i]
            if position >= 0:
                self.below[self.base + 1 + i] = position
                self.below_seqs.append(self.base + 1 + i)
        del self.positions[:cut]
        self.base = floor

    def scan(self, after: int, limit: int) -> tuple[list[int], list[tuple[int, int]], int]:
        """From seq ``after + 1`` on: the positions of up to ``limit`` stored
        entries, the dead ranges ``(first, last)`` among them, and the last
        seq covered; stops at the first seq not held."""
        seq = after + 1
        found: list[int] = []
        dead: list[tuple[int, int]] = []
        base, below_seqs = self.base, self.below_seqs
        i = bisect_left(below_seqs, seq)
        while seq <= base and len(found) < limit:
            survivor = below_seqs[i] if i < len(below_seqs) else base + 1
            if survivor > seq:  # seq .. survivor-1 were dropped
                dead.append((seq, survivor - 1))
                seq = survivor
            else:
                found.append(self.below[survivor])
                seq += 1
                i += 1
        positions = self.positions
        while len(found) < limit and seq <= base + len(positions):
            position = positions[seq - base - 1]
            if position == _ABSENT:
                break
            if position == _DEAD:
                if dead and dead[-1][1] == seq - 1:
                    dead[-1] = (dead[-1][0], seq)
                else:
                    dead.append((seq, seq))
            else:
                found.append(position)
            seq += 1
        return found, dead, seq - 1

    def absent(self, upto: int) -> list[tuple[int, int]]:
        """The ranges ``(first, last)`` of seqs up to ``upto`` never seen here
        (neither held nor dead), ascending."""
        ranges: list[tuple[int, int]] = []
        positions, base = self.positions, self.base
        end = min(upto - base, len(positions))
        i = max(0, self.contiguous - base)
        while i < end:
            try:
                i = positions.index(_ABSENT, i, end)
            except ValueError:
                break
            first = i
            while i < end and positions[i] == _ABSENT:
                i += 1
            ranges.append((base + 1 + first, base + i))
        if upto > self.highest:
            first = self.highest + 1
            if ranges and ranges[-1][1] == first - 1:
                first = ranges.pop()[0]
            ranges.append((first, upto))
        return ranges

    def _extend_contiguous(self) -> None:
        positions, base = self.positions, self.base
        c = self.contiguous - base
        n = len(positions)
        while c < n and positions[c] != _ABSENT:
            c += 1
        self.contiguous = base + c

    @property
    def highest(self) -> int:
        return self.base + len(self.positions)


class _Gate:
    """Segment files are read in threads at positions taken on the loop; a
    compaction renames a rewritten segment over the old one. The gate keeps
    the two apart: a swap waits for the reads under way, new reads wait for it."""

    def __init__(self) -> None:
        self._readers = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()
        self._open.set()

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[None]:
        await self._open.wait()
        self._readers += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._readers -= 1
            if not self._readers:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def swapping(self) -> AsyncIterator[None]:
        self._open.clear()
        try:
            await self._idle.wait()
            yield
        finally:
            self._open.set()


class Strand(AsyncResource):
    """An open log. Use ``await Strand.open(cfg)``; close with ``await strand.close()``."""

    def __init__(self, cfg: StrandConfig, origin: str) -> None:
        self.config = cfg
        self.origin = origin
        self._dir = cfg.storage
        self._logs: dict[str, _OriginLog] = {}
        self._pending: list[_Batch] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._syncer: asyncio.Task[None] | None = None
        self._fd = -1
        self._lock_fd = -1
        self._record_limit = segment.max_body(cfg.segment_bytes)
        self._segment = 0
        self._segment_size = 0
        self._sealed_bytes = 0
        self._segments = 0
        self._entries = 0
        self._tails_cut = 0
        self._closed = False
        self._broken: str | None = None  # why appends are refused until reopened
        self._failing: str | None = None  # why the last append failed (it may work again)
        self._rolling = False
        self._dirty = False
        self._unsynced: list[_Written] = []  # fsync "always": written, not yet fsynced
        self._syncing: asyncio.Future[None] | None = None  # the fsync under way and its answers
        self._ahead = 0  # local seqs given to appends written but not yet durable
        self._encoder = EntryEncoder()  # used by the writer alone
        self._fsync_observers: list[Callable[[float], None]] = []
        self._replayed: list[RawEntry] | None = []
        self._gate = _Gate()
        self._compacting = asyncio.Lock()
        self._swaps: set[asyncio.Future[compaction.Rewritten]] = set()
        self._roll_request: asyncio.Future[None] | None = None
        self._compactions = 0
        self._bytes_reclaimed = 0
        self._entries_dropped = 0
        #: What repair mode found on open (``None``: the directory was whole).
        self.damage: Damage | None = None
        self._own_floor = 0  # no local seq at or below it is ever issued again
        self._manifest = Manifest(origin)  # as written last (or about to be)
        self._manifest_lock = threading.Lock()
        self._active_entries = 0  # entries written to the current segment
        self._active_ranges: dict[str, list[int]] = {}  # per origin, its lowest and highest seq
        #: (segment, length, own seq) known durable; and as last written to the MANIFEST.
        self._mark = self._mark_saved = (0, 0, 0)
        self._checkpointer: asyncio.Task[None] | None = None
        self._checkpoint_failing = False

    # -- opening ---------------------------------------------------------------

    @classmethod
    async def open(cls, cfg: StrandConfig | None = None) -> Strand:
        """Open (creating if needed) the log in ``cfg.storage`` and replay it."""
        cfg = cfg or StrandConfig()
        try:
            strand = await asyncio.to_thread(cls._open_blocking, cfg)
        except OSError as exc:
            raise StrandError(f"cannot open the Strand in {cfg.storage}: {exc}") from exc
        strand._writer = asyncio.create_task(strand._write_loop(), name="strand-writer")
        strand._writer.add_done_callback(strand._on_writer_done)
        if cfg.fsync == "interval":
            strand._syncer = asyncio.create_task(strand._sync_loop(), name="strand-syncer")
        if cfg.fsync != "never":  # under never, only a roll makes a length durable
            strand._checkpointer = asyncio.create_task(
                strand._checkpoint_loop(), name="strand-checkpointer"
            )
        return strand

    @classmethod
    def _open_blocking(cls, cfg: StrandConfig) -> Strand:
        directory = cfg.storage
        directory.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock_directory(directory)
        strand: Strand | None = None
        try:
            strand = cls(cfg, _load_or_create_origin(directory, cfg.node_name))
            strand._lock_fd = lock_fd
            strand._replay_files()
        except BaseException:
            if strand is not None and strand._fd >= 0:
                os.close(strand._fd)
            os.close(lock_fd)  # also releases the lock
            raise
        return strand

    def _replay_files(self) -> None:
        """Read every segment back into the index, check the directory
        against its MANIFEST (damage is refused, or set aside in repair mode:
        see :mod:`forum.node.storage.damage`), and open the last segment for appending."""
        directory = self._dir
        compaction.remove_leftovers(directory)
        problems: list[Problem] = []
        try:
            found = read_manifest(directory)
        except StrandDamaged as exc:
            found = None
            problems.append(Problem(Path(exc.path), exc.reason, None, True))
        if found is not None and found.origin != self.origin:
            reason = f"it belongs to origin {found.origin}, the directory's is {self.origin}"
            problems.append(Problem(manifest_path(directory), reason, None, True))
            found = None
        expected, missing = damage.plan(directory, found, segment.segment_numbers(directory))
        problems += missing
        try:
            floors = compaction.read_floors(directory)
        except StrandCorrupt as exc:  # no floor is known: every seq may come in again
            floors = {}
            problems.append(Problem(Path(exc.path), exc.reason, None, True))
        for origin, floor in floors.items():
            self._logs[origin] = _OriginLog(base=floor)
        replayed: list[RawEntry] = []
        kept: list[tuple[damage.Expected, segment.SegmentScan, dict[str, list[int]]]] = []
        flagged = False
        for exp in expected:
            path = segment.segment_path(directory, exp.number)
            try:
                scan = segment.read_segment(path, exp.number, last=exp.last, tolerant=True)
            except StrandCorrupt as exc:  # its header: nothing in it can be read
                problems.append(Problem(path, exc.reason, exp.ranges, True))
                continue
            flagged = flagged or bool(scan.flags & segment.MANIFESTED)
            problem = damage.check(path, exp, scan, scan.good_end + scan.torn_bytes)
            if problem is not None:
                problems.append(problem)
                if not problem.keep:
                    continue
            kept.append((exp, scan, self._replay_scan(path, exp.number, scan, replayed)))
        if found is None and flagged and not problems:
            reason = "missing, but the segments say a MANIFEST accounted for them"
            problems.append(Problem(manifest_path(directory), reason, None, False))
        if found is not None:
            # Own seqs it shows as issued are never issued again; those not
            # held (a repaired directory's, not yet fetched) are missing.
            self._own_floor = found.own
        if problems:
            self._repair(problems, found)
        self._replayed = replayed
        self._open_last(kept, found, problems)

    def _replay_scan(
        self, path: Path, number: int, scan: segment.SegmentScan, replayed: list[RawEntry]
    ) -> dict[str, list[int]]:
        """Index one segment's entries (the hot loop of start-up: plain
        values, no entry objects); per origin, the lowest and highest seq."""
        logs = self._logs
        ranges: dict[str, list[int]] = {}
        base = number << _OFFSET_BITS
        for offset, body in scan.records:
            try:
                raw = decode_raw(body)
            except SerializationError as exc:
                raise StrandCorrupt(str(path), offset, str(exc)) from exc
            origin, seq = raw[0], raw[1]
            origin_log = logs.get(origin)
            if origin_log is None:
                origin_log = logs[origin] = _OriginLog()
            # False for a second copy of an entry (should a crash ever
            # leave one): it is replayed once.
            if origin_log.replay(seq, base | offset):
                replayed.append(raw)
                self._entries += 1
            seqs = ranges.get(origin)
            if seqs is None:
                ranges[origin] = [seq, seq]
            elif seq > seqs[1]:
                seqs[1] = seq
            elif seq < seqs[0]:
                seqs[0] = seq
        return ranges

    def _repair(self, problems: list[Problem], found: Manifest | None) -> None:
        """Refuse a damaged directory (``StrandDamaged``, one line) or, in
        repair mode, set the damaged files aside, lower the floors of the
        origins they held (so peers' copies are taken in again), and keep
        the own seqs they held from being issued again."""
        lines = tuple(problem.line() for problem in problems)
        first = problems[0]
        more = len(problems) - 1
        reason = first.reason + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")
        if not self.config.repair:
            raise StrandDamaged(str(first.path), reason, lines, first.offset)
        where, moved = damage.set_aside(self._dir, problems, time.time())
        own_floor = found.own if found is not None else 0
        floors: dict[str, int] = {}
        for problem in problems:
            if problem.ranges is None:  # what it held is unknown: every origin's floor
                floors = {origin: 0 for origin in self._logs}
                break
            for origin, (lo, _) in problem.ranges.items():
                floors[origin] = min(floors.get(origin, lo - 1), lo - 1)
        for problem in problems:
            own = (problem.ranges or {}).get(self.origin)
            own_floor = max(own_floor, own[1] if own else 0)
        lowered = False
        for origin, floor in floors.items():
            origin_log = self._logs.get(origin)
            if origin_log is not None and floor < origin_log.base:
                origin_log.lower_base(max(floor, 0))
                lowered = True
        if lowered:
            compaction.write_floors(self._dir, self.floors())
        self._own_floor = max(self._own_floor, own_floor)
        self.damage = Damage(
            f"{first.path}: {reason}", lines, tuple(moved), where, self.own_seq_floor
        )
        for line in lines:
            log.warning("strand: repair: %s", line)
        log.warning(
            "strand: repair: %s; own seqs up to %d were issued, missing: %s",
            f"{len(moved)} file(s) set aside in {where}" if moved else "no file to set aside",
            self.own_seq_floor,
            self.missing_own() or "none",
        )

    def _open_last(
        self,
        kept: list[tuple[damage.Expected, segment.SegmentScan, dict[str, list[int]]]],
        found: Manifest | None,
        problems: list[Problem],
    ) -> None:
        """Seal every replayed segment but the last, cut the last one's torn
        tail and open it for appending (or start a new one), and write the
        MANIFEST if it changed."""
        directory = self._dir
        last = None
        if kept and kept[-1][0].last and kept[-1][0].role != "sealed":
            last = kept.pop()
        sealed = {}
        for exp, scan, ranges in kept:
            sealed[exp.number] = Sealed(scan.good_end, len(scan.records), _frozen(ranges))
            self._sealed_bytes += scan.good_end
        self._segments = len(kept)
        self._manifest = Manifest(self.origin, own=self.own_seq_floor, sealed=sealed)
        if last is None:  # none, or the last one was set aside: the next number
            numbers = set(sealed) | {p.number for p in problems}
            if found is not None:
                numbers |= set(found.sealed) | {found.active}
            self._start_segment(max(numbers, default=0) + 1)
            return
        exp, scan, ranges = last
        path = segment.segment_path(directory, exp.number)
        self._segments += 1
        if scan.torn_bytes and os.path.getsize(path) > scan.good_end:  # not set aside
            log.warning(
                "strand: cut a torn tail of %d bytes from %s at offset %d",
                scan.torn_bytes,
                path,
                scan.good_end,
            )
            self._tails_cut += 1
            with open(path, "r+b") as f:
                f.truncate(scan.good_end)
                os.fsync(f.fileno())
        self._segment_size = scan.good_end
        self._active_entries = len(scan.records)
        self._active_ranges = ranges
        if scan.version != segment.FORMAT_VERSION and self._segment_size > segment.HEADER.size:
            # Batches go into segments of their own format: seal the old one
            # (durably, as a roll does) and go on in the next.
            _sync_and_close(os.open(path, os.O_WRONLY), True)
            self._manifest = dataclasses.replace(self._manifest, active=exp.number)
            self._start_segment(exp.number + 1, self._sealing())
            self._sealed_bytes += scan.good_end
        elif self._segment_size >= segment.HEADER.size:
            self._segment = exp.number
            self._fd = os.open(path, os.O_WRONLY)
            os.lseek(self._fd, self._segment_size, os.SEEK_SET)
            # What replay found is the checkpoint: fsynced first, as a crash
            # of the process alone leaves written bytes in the page cache.
            os.fsync(self._fd)
            self._mark = (exp.number, self._segment_size, self.own_seq_floor)
            self._manifest = self._manifest.rolled(
                None, exp.number, self._segment_size, self.own_seq_floor
            ).checkpointed(exp.number, self._segment_size, self.own_seq_floor, self._ranges())
            if self._manifest != found:
                self._save_manifest()
            if not scan.flags & segment.MANIFESTED:  # an old directory's: flagged from now on
                os.pwrite(self._fd, segment.FLAGS.pack(segment.MANIFESTED), segment.FLAGS_AT)
                os.fsync(self._fd)
            self._mark_saved = self._mark
        else:  # the last segment lost even its header in a crash mid-roll: start it again
            self._segments -= 1
            self._start_segment(exp.number)

    def take_replayed(self) -> list[RawEntry]:
        """The entries found on open, in log order, as plain values; handed out
        once (to the Forum)."""
        replayed, self._replayed = self._replayed, None
        if replayed is None:
            raise StrandError("the replayed entries were already handed out")
        return replayed

    # -- what is stored --------------------------------------------------------

    def __contains__(self, entry_id: EntryId) -> bool:
        origin_log = self._logs.get(entry_id.origin)
        return origin_log is not None and entry_id.seq in origin_log

    def position(self, entry_id: EntryId) -> int | None:
        """Where the entry lies in the log, as a number that grows in log order."""
        origin_log = self._logs.get(entry_id.origin)
        return None if origin_log is None else origin_log.get(entry_id.seq)

    def vector(self) -> dict[str, int]:
        """Per origin, the highest seq up to which every entry is held."""
        return {origin: o.contiguous for origin, o in self._logs.items()}

    def highest(self) -> dict[str, int]:
        """Per origin, the highest seq held (there may be gaps below it)."""
        return {origin: o.highest for origin, o in self._logs.items()}

    def floors(self) -> dict[str, int]:
        """Per origin, the compaction floor: every seq up to it is held here
        or was dropped (dead); origins with no floor are left out."""
        return {origin: o.base for origin, o in self._logs.items() if o.base}

    @property
    def own_seq_floor(self) -> int:
        """The highest seq of this node's origin ever issued, as far as the
        Strand knows (held, or shown by the ``MANIFEST`` of a damaged
        directory, or given to :meth:`reserve_own`): its next local entry
        gets a higher one."""
        own = self._logs.get(self.origin)
        return max(self._own_floor, own.highest if own is not None else 0)

    def reserve_own(self, seq: int) -> None:
        """Never issue a local seq at or below ``seq`` (a peer was found to
        hold this node's own entries up to it: a damaged directory lost
        them). The seqs up to it that are not held are then missing
        (:meth:`missing_own`). The MANIFEST has it within
        ``checkpoint_interval`` (under fsync ``never``, at the next roll or
        close), or sooner with the next durable append's checkpoint."""
        self._own_floor = max(self._own_floor, seq)
        number, size, own = self._mark
        self._mark = (number, size, max(own, seq))

    def missing_own(self) -> list[tuple[int, int]]:
        """The ranges ``(first, last)`` of this node's own seqs, up to
        :attr:`own_seq_floor`, that it neither holds nor knows to be dead:
        what a damaged directory lost, to be fetched back from peers (a
        range may include seqs compaction dropped; a peer's page says so).
        Empty for a whole directory."""
        own = self._logs.get(self.origin)
        floor = self.own_seq_floor
        if own is None:
            return [(1, floor)] if floor else []
        return own.absent(floor)

    def stats(self) -> StrandStats:
        return StrandStats(
            entries=self._entries,
            bytes=self._sealed_bytes + self._segment_size,
            segments=self._segments,
            tails_cut=self._tails_cut,
            compactions=self._compactions,
            bytes_reclaimed=self._bytes_reclaimed,
            entries_dropped=self._entries_dropped,
        )

    @property
    def current_segment_bytes(self) -> int:
        """Bytes of the segment appends go to now (the one compaction seals first)."""
        return self._segment_size

    def add_fsync_observer(self, callback: Callable[[float], None]) -> None:
        """Call ``callback(seconds)`` after every fsync (for metrics)."""
        self._fsync_observers.append(callback)

    async def read_range(self, origin: str, after_seq: int, limit: int) -> list[Entry]:
        """Entries of ``origin`` with seq > ``after_seq``, oldest first, up to
        ``limit``, stopping at the first seq not held; dead (compacted) seqs
        are passed over: :meth:`read_page` says which they are."""
        return (await self.read_page(origin, after_seq, limit)).entries

    async def read_page(self, origin: str, after_seq: int, limit: int) -> Page:
        """Like :meth:`read_range`, with the dead ranges among the entries and
        the last seq the page covers (see :class:`Page`)."""
        origin_log = self._logs.get(origin)
        if origin_log is None or limit <= 0:
            return Page([], [], after_seq)
        positions, dead, upto = origin_log.scan(after_seq, limit)
        if not positions:
            return Page([], dead, upto)
        async with self._gate.reading():
            try:
                bodies = await asyncio.to_thread(self._read_positions, positions)
            except OSError as exc:
                raise StrandError(f"cannot read entries of {origin}: {exc}") from exc
        return Page([decode_entry(body) for body in bodies], dead, upto)

    def _read_positions(self, positions: Sequence[int]) -> list[bytes]:
        bodies = []
        fds: list[int] = []
        readers: dict[int, segment.RecordReader] = {}
        mask = (1 << _OFFSET_BITS) - 1
        try:
            for position in positions:
                number = position >> _OFFSET_BITS
                reader = readers.get(number)
                if reader is None:
                    path = segment.segment_path(self._dir, number)
                    fds.append(fd := os.open(path, os.O_RDONLY))
                    reader = readers[number] = segment.RecordReader(fd, str(path), number)
                bodies.append(reader.read(position & mask))
        finally:
            for fd in fds:
                os.close(fd)
        return bodies

    # -- compaction ------------------------------------------------------------

    async def compact(
        self,
        horizon: Mapping[str, int],
        live: Callable[[], Awaitable[Collection[compaction.Key]]],
        *,
        seal: bool = False,
    ) -> CompactionReport:
        """Drop from the sealed segments every Write at or below ``horizon``
        that a Take at or below it killed, and that ``live()`` (asked once the
        segments are read) does not name; and the Takes of Writes dropped, now
        or before. With ``seal``, the current segment is sealed first, so its
        entries can go too. One pass at a time; see :mod:`forum.node.storage.compaction`."""
        async with self._compacting:
            if self._closed:
                raise StrandError("the Strand is closed")
            started = time.perf_counter()
            if seal:
                await self._seal()
            bytes_before = self.stats().bytes
            # Never above what is held here: the floor promises every seq up to it.
            stable = {
                origin: min(seq, self._logs[origin].contiguous)
                for origin, seq in horizon.items()
                if origin in self._logs and seq > 0
            }
            current = self._segment
            try:
                # Listing the directory is I/O too: in the thread, with the reads.
                now_ms = int(time.time() * 1000)
                found = await asyncio.to_thread(
                    compaction.survey, self._dir, lambda n: n < current, stable, now_ms
                )
                alive = await live()
                writes = self._doomed(found, alive)
                floors = {o: max(self._logs[o].base, seq) for o, seq in stable.items()}
                raised = floors != {o: self._logs[o].base for o in floors}
                if raised:
                    every = self._floors(floors)
                    await asyncio.to_thread(compaction.write_floors, self._dir, every)
                try:
                    rewritten, removed, dropped = await self._drop(found, writes)
                finally:
                    # After the drops, not before: raised first, every stable
                    # entry (dropped in a moment) would move to ``below`` and
                    # then out of it one at a time (memory and time the size of
                    # the pass); after, only the survivors move.
                    if raised:
                        for origin, floor in floors.items():
                            self._logs[origin].raise_base(floor)
                if rewritten and not self._closed:  # what was rewritten is in place
                    await asyncio.to_thread(self._save_manifest, Manifest.settled)
            except OSError as exc:
                raise StrandError(f"compaction failed: {exc}") from exc
            self._compactions += 1
            # Only the Strand's size: appends go on during a pass, so it may
            # have grown. What the pass gave back is counted by each rewrite.
            bytes_after = self.stats().bytes
            self._entries_dropped += dropped
            return CompactionReport(
                bytes_before=bytes_before,
                bytes_after=bytes_after,
                entries_dropped=dropped,
                segments_rewritten=rewritten,
                segments_removed=removed,
                floors={o: log.base for o, log in self._logs.items() if log.base},
                seconds=time.perf_counter() - started,
            )

    async def mark_dead(self, origin: str, ranges: Sequence[tuple[int, int]]) -> None:
        """Seqs of ``origin`` in ``ranges`` (``(first, last)``) that a peer
        dropped: those never seen here are dead from now on, here and after
        a restart (the floor is raised over them durably), so they are never
        taken in again. Entries held here are left to the caller."""
        origin_log = self._logs.get(origin)
        if origin_log is None:
            origin_log = self._logs[origin] = _OriginLog()
        base = origin_log.base
        for first, last in ranges:
            origin_log.mark_dead(first, last)
        if origin_log.contiguous > base:
            async with self._compacting:
                floors = self._floors({origin: origin_log.contiguous})
                try:
                    await asyncio.to_thread(compaction.write_floors, self._dir, floors)
                except OSError as exc:
                    raise StrandError(f"cannot record dropped entries: {exc}") from exc
                origin_log.raise_base(floors[origin])

    def _floors(self, raised: Mapping[str, int]) -> dict[str, int]:
        """Every origin's floor, with ``raised`` in."""
        floors = {o: log.base for o, log in self._logs.items() if log.base}
        floors.update(raised)
        return floors

    @staticmethod
    def _doomed(found: compaction.Survey, alive: Collection[compaction.Key]) -> compaction.IdIndex:
        """The Writes of ``found`` to drop: dead, and not named ``alive``;
        each with the segment it lies in."""
        dead = compaction.IdIndex(found.dead)
        doomed = compaction.Ids()
        for origin, seqs, numbers in found.writes.columns():
            for seq, number in zip(seqs, numbers, strict=True):
                if dead.get(origin, seq) is not None and (origin, seq) not in alive:
                    doomed.add(origin, seq, number)
        return compaction.IdIndex(doomed)

    async def _drop(
        self, found: compaction.Survey, writes: compaction.IdIndex
    ) -> tuple[int, int, int]:
        """Rewrite, oldest first, each segment with something to drop; a Take
        goes only with or after its target. Returns segments rewritten and
        removed, and entries dropped."""
        writes_in: dict[int, compaction.Ids] = {}
        for origin, seq, number in writes.items():
            ids = writes_in.get(number)
            if ids is None:
                ids = writes_in[number] = compaction.Ids()
            ids.add(origin, seq)
        rewritten = removed = dropped = 0
        for number in sorted(found.sizes):
            if self._closed:
                break  # what is done holds; the rest waits for the next pass
            drop = writes_in.pop(number, None) or compaction.Ids()
            for (origin, target_origin), (seqs, targets) in found.takes.get(number, {}).items():
                for seq, target in zip(seqs, targets, strict=True):
                    # Gone: dropped with this segment or an earlier one, or by an earlier pass.
                    at = writes.get(target_origin, target)
                    if (at is not None and at <= number) or self._dead((target_origin, target)):
                        drop.add(origin, seq)
            if not drop:
                continue
            result = await self._rewrite(number, compaction.IdIndex(drop))
            rewritten += 1
            removed += result.bytes_after == 0
            dropped += len(result.dropped)
        return rewritten, removed, dropped

    def _dead(self, key: compaction.Key) -> bool:
        """Dropped by an earlier pass: held once, on disk no more."""
        origin_log = self._logs.get(key[0])
        return origin_log is not None and key[1] in origin_log and origin_log.get(key[1]) is None

    async def _rewrite(self, number: int, drop: Container[compaction.Key]) -> compaction.Rewritten:
        """Swap segment ``number`` for a copy without ``drop``, and move the
        survivors' positions, with no read of the segment under way.

        Once the new file may be renamed in, the positions must follow it
        whatever happens to the caller: the swap runs to its end in a task of
        its own (``close()`` waits for it)."""
        swap = asyncio.ensure_future(self._swap(number, drop))
        self._swaps.add(swap)
        swap.add_done_callback(self._swaps.discard)
        return await asyncio.shield(swap)

    async def _swap(self, number: int, drop: Container[compaction.Key]) -> compaction.Rewritten:
        async with self._gate.swapping():
            result = await asyncio.to_thread(self._rewrite_segment, number, drop)
            base = number << _OFFSET_BITS
            for origin, seqs, offsets in result.survivors.columns():
                origin_log = self._logs[origin]
                for seq, offset in zip(seqs, offsets, strict=True):
                    origin_log.move(seq, base | offset)
            for origin, seqs, _ in result.dropped.columns():
                origin_log = self._logs[origin]
                for seq in seqs:
                    origin_log.drop(seq)
        self._entries -= len(result.dropped)
        self._sealed_bytes -= result.bytes_before - result.bytes_after
        # The segment's own shrinking, never the Strand's size before and
        # after a pass: appends made meanwhile would count against it (the
        # Overview once showed a negative "bytes reclaimed"). Never below 0
        # either, as the counter it is: a version 1 segment rewritten in
        # batches may grow by a frame per batch (forum.node.storage.segment).
        self._bytes_reclaimed += max(0, result.bytes_before - result.bytes_after)
        if result.bytes_after == 0:
            self._segments -= 1
        return result

    async def replace(self, entries: Sequence[Entry]) -> list[Entry]:
        """Store each of ``entries`` in place of the stored entry with its id
        (an origin's own entry replacing a copy that differs: a forgery, or a
        buggy peer's); returns those replaced (ids not stored are left out).

        The old record is dropped from its segment (the current one is
        sealed first if it holds one), then the new one appended: replay
        keeps the first copy of an id, so the old one goes first. A crash in
        between leaves the id absent: above the floor a gap, which
        anti-entropy fills from the origin again."""
        async with self._compacting:
            held = {e.id: e for e in entries if self.position(e.id) is not None}
            if not held:
                return []
            where = {entry_id: self.position(entry_id) or 0 for entry_id in held}
            if any(position >> _OFFSET_BITS == self._segment for position in where.values()):
                await self._seal()
            by_segment: dict[int, set[compaction.Key]] = {}
            for entry_id, position in where.items():
                keys = by_segment.setdefault(position >> _OFFSET_BITS, set())
                keys.add((entry_id.origin, entry_id.seq))
            try:
                for number, keys in sorted(by_segment.items()):
                    await self._rewrite(number, keys)
            except OSError as exc:
                raise StrandError(f"cannot replace entries: {exc}") from exc
            for entry_id in held:
                self._logs[entry_id.origin].forget(entry_id.seq)
            await self.append_remote(list(held.values()))
        return list(held.values())

    def _rewrite_segment(
        self, number: int, drop: Container[compaction.Key]
    ) -> compaction.Rewritten:
        """Rewrite one sealed segment (blocking), the MANIFEST told first
        that the new file is whole too, and then that it is the one."""

        def accept(length: int, entries: int) -> None:
            self._save_manifest(lambda m: m.rewriting(number, length, entries))

        result = compaction.rewrite(self._dir, number, drop, accept)
        with self._manifest_lock:  # written with the next change (or the pass's end)
            self._manifest = self._manifest.rewritten(
                number, result.bytes_after, len(result.survivors)
            )
        return result

    async def _seal(self) -> None:
        """Have the writer roll to a new segment now (if the current one holds
        any entry), so that compaction can rewrite the one it sealed."""
        if self._segment_size <= segment.HEADER.size:
            return
        if self._roll_request is None:
            self._roll_request = asyncio.get_running_loop().create_future()
            self._wake.set()
        await asyncio.shield(self._roll_request)

    # -- appending -------------------------------------------------------------

    async def append_writes(self, payloads: Sequence[bytes]) -> list[Write]:
        """Append one Write per payload under new local ids; all or nothing."""
        return await asyncio.shield(self.submit_writes(payloads))

    def submit_writes(
        self,
        payloads: Sequence[bytes],
        then: Callable[[list[Write]], None] | None = None,
        props: Properties = PLAIN,
    ) -> asyncio.Future[list[Write]]:
        """Like :meth:`append_writes`, but hand back the future of the append
        (its done callbacks run in log order, whatever happens to the caller).

        ``then``, if given, is called with the Writes by the writer itself once
        they are durable, in log order, in the step that resolves the future
        (before any caller wakes), and whether or not the future was
        cancelled meanwhile: a caller that passes it can await the future
        directly (no shield, no callback scheduled per append), and its
        cancellation stops nothing. Every Write gets ``props``. Appends next
        to each other in a group commit that pass the same ``then`` (the
        same object) and ``props`` are told in one call, with all their
        Writes."""
        for payload in payloads:
            if type(payload) is not bytes and not isinstance(payload, bytes):
                raise TypeError(f"a payload is bytes, not {type(payload).__name__}")
        return self._submit(payloads=payloads, then=then, props=props)  # type: ignore[arg-type,return-value]

    async def append_takes(self, targets: Sequence[EntryId]) -> list[Take]:
        """Append one Take per target under new local ids; all or nothing."""
        return await asyncio.shield(self.submit_takes(targets))

    def submit_takes(self, targets: Sequence[EntryId]) -> asyncio.Future[list[Take]]:
        """Like :meth:`append_takes`, but hand back the future of the append:
        the write goes ahead whatever happens to the caller, who can find out
        how it ended even after being cancelled."""
        return self._submit(targets=targets)  # type: ignore[return-value]

    async def append_remote(self, entries: Sequence[Entry]) -> None:
        """Append entries that already have ids (from peers). The caller filters
        out those already held."""
        await asyncio.shield(self.submit_remote(entries))

    def submit_remote(self, entries: Sequence[Entry]) -> asyncio.Future[list[Entry]]:
        """Like :meth:`append_remote`, handing back the future of the append."""
        return self._submit(remote=entries)

    def _submit(
        self,
        payloads: Sequence[bytes] = (),
        targets: Sequence[EntryId] = (),
        remote: Sequence[Entry] = (),
        then: Durable | None = None,
        props: Properties = PLAIN,
    ) -> asyncio.Future[list[Entry]]:
        """Queue an append for the writer. The future is shared with nobody, but
        the batch it is written in is, so callers await it shielded (or pass
        ``then`` and let it be cancelled)."""
        future: asyncio.Future[list[Entry]] = asyncio.get_running_loop().create_future()
        if self._closed:
            future.set_exception(StrandError("the Strand is closed"))
        elif self._broken is not None:
            future.set_exception(self._broken_error())
        elif not (payloads or targets or remote):
            future.set_result([])
        else:
            self._pending.append(_Batch(future, payloads, targets, remote, then, props=props))
            self._wake.set()
        return future

    # -- the writer ------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batches, self._pending = self._pending, []
            if batches:
                try:
                    await self._write_batches(batches)
                except Exception as exc:  # a bug, not a disk fault: refuse from now on, say why
                    log.exception("strand: the writer failed")
                    self._break(f"the writer failed: {exc!r}")
                    self._fail(batches, self._broken_error())
            if self._roll_request is not None:
                await self._synced()
                await self._roll_on_request(self._roll_request)
                self._roll_request = None
            elif not batches and self._closed:
                await self._synced()
                return

    def _on_writer_done(self, writer: asyncio.Task[None]) -> None:
        """The writer ends only on close; if it ended otherwise (cancelled with
        the loop), nothing would ever answer the appends: refuse them instead."""
        if self._closed and not writer.cancelled() and writer.exception() is None:
            return
        self._break("the writer stopped")
        pending, self._pending = self._pending, []
        self._fail(pending, self._broken_error())

    async def _write_batches(self, batches: list[_Batch]) -> None:
        """Write what the appenders queued as batch records (one length and
        checksum per record, most often one record), with one write and one
        fsync for all, then answer them in log order."""
        if self._broken is not None:
            self._fail(batches, self._broken_error())
            return
        own = self._logs.get(self.origin)
        first = max(own.highest if own else 0, self._own_floor) + 1 + self._ahead
        written, entries, bodies = self._encode_all(batches, first)
        if not written:
            return
        data, offsets = self._records(bodies)
        given = sum(len(batch.payloads) + len(batch.targets) for batch, _ in written)
        try:
            number, start = await self._append(data)
        except OSError as exc:
            self._failing = f"append failed: {exc}"
            error = self._broken_error() if self._broken else StrandError(self._failing)
            self._fail([batch for batch, _ in written], error)
            return
        self._failing = None
        base = (number << _OFFSET_BITS) | start
        positions = [base + offset for offset in offsets]
        local = first if given == len(entries) else 0
        done = _Written(written, entries, positions, local, start, end=start + len(data))
        if self.config.fsync == "always":
            # Durable once an fsync that starts after this write ends: the
            # syncer's next one. Meanwhile the writer goes on with the next.
            self._ahead += given
            if self._syncing is None:  # the disk is idle: this fsync starts now
                running = asyncio.get_running_loop().run_in_executor(None, self._fdatasync)
                self._syncing = asyncio.ensure_future(self._sync_written([done], running))
            else:
                self._unsynced.append(done)
            return
        self._durable(done)

    def _durable(self, done: _Written) -> None:
        self._record_all(done.entries, done.positions, done.first)
        self._answer(done.appends)

    async def _sync_written(self, group: list[_Written], running: asyncio.Future[float]) -> None:
        """Wait for the fsync ``running`` of ``group``, then fsync what the
        writer wrote meanwhile, and so on, one fsync at a time, each covering
        all that was written before it started, and answer each; the next fsync
        starts before the answers go out, so the appends they wake are
        written while it runs (the disk and the loop work at once)."""
        loop = asyncio.get_running_loop()
        finished: list[_Written] = []
        fsync: asyncio.Future[float] | None = running
        try:
            while fsync is not None:
                try:
                    seconds = await fsync
                except Exception as exc:  # broken now: what waits for it is refused
                    self._break(f"fsync failed: {exc!r}")
                    # Here, not in the thread: the writer's writes are on the loop too.
                    self._cut_back(group[0].start)
                    self._segment_size = group[0].start
                    self._fail_written(group + self._unsynced)
                    return
                finished, group, self._unsynced = group, self._unsynced, []
                fsync = loop.run_in_executor(None, self._fdatasync) if group else None
                for callback in self._fsync_observers:
                    callback(seconds)
                for done in finished:
                    self._ahead -= sum(len(b.payloads) + len(b.targets) for b, _ in done.appends)
                    self._durable(done)
                self._mark = (self._segment, finished[-1].end, self.own_seq_floor)
        except Exception as exc:  # a bug, not a disk fault: refuse from now on, say why
            log.exception("strand: the syncer failed")
            self._break(f"the syncer failed: {exc!r}")
            self._fail_written(finished + group + self._unsynced)  # those not answered yet
        finally:
            self._syncing = None

    def _fail_written(self, groups: list[_Written]) -> None:
        self._unsynced = []
        self._fail([batch for done in groups for batch, _ in done.appends], self._broken_error())

    def _fdatasync(self) -> float:
        """fdatasync the current segment (blocking); on failure refuse every
        append from now on (the caller cuts off what it covered)."""
        t0 = time.perf_counter()
        try:
            # fdatasync: the data and the file size, not the timestamps.
            os.fdatasync(self._fd)
        except BaseException as exc:
            # The kernel may have dropped the pages it could not write, and
            # a retried fsync can succeed without them: trust nothing now.
            self._break(f"fsync failed: {exc}")
            raise
        return time.perf_counter() - t0

    async def _synced(self) -> None:
        """Wait until nothing written waits for its fsync (before a roll swaps
        the descriptor, or the Strand closes)."""
        while self._syncing is not None:
            await asyncio.wait([self._syncing])

    def _answer(self, written: list[tuple[_Batch, list[Entry]]]) -> None:
        """Tell each durable append's caller, in log order.

        With ``always``, many callers are woken in two halves, the second a
        step later: the writer then gets to write what the first half appends
        next while the second half is still to come, so the next fsync starts
        without waiting for all of them, and group commits settle into two
        that take turns, one on the disk while the other's callers run."""
        if len(written) >= _SPLIT_ANSWERS and self.config.fsync == "always":
            half = len(written) // 2
            self._answer_now(written[:half])
            # Before anything later is answered: call_soon keeps the order.
            asyncio.get_running_loop().call_soon(self._answer_now, written[half:])
        else:
            self._answer_now(written)

    def _answer_now(self, written: list[tuple[_Batch, list[Entry]]]) -> None:
        """Call each append's ``then`` and answer it, in log order: one call
        for a row of appends with the same ``then`` and properties (a group
        commit's appends, most often), the row's answers set before it, in
        the same step (their callers run after this returns)."""
        then: Durable | None = None
        props: Properties | None = None
        row: list[Entry] = []
        first: list[Entry] = row  # the row's first answer, which the row must not extend
        for batch, made in written:
            if batch.then is then and then is not None and batch.props is props:
                if row is first:
                    row = row + made
                else:
                    row += made
            else:
                if then is not None:
                    self._then(then, row)
                then, props, row = batch.then, batch.props, made
                first = made
            if not batch.future.done():
                batch.future.set_result(made)
        if then is not None:  # the last row (most often the only one): inline
            try:
                then(row)
            except Exception:
                log.exception("strand: a durable-append callback failed")

    @staticmethod
    def _then(then: Durable, made: list[Entry]) -> None:
        try:
            then(made)
        except Exception:
            log.exception("strand: a durable-append callback failed")

    def _encode_all(
        self, batches: list[_Batch], seq: int
    ) -> tuple[list[tuple[_Batch, list[Entry]]], list[Entry], list[bytes]]:
        """The appends to write, each with its entries (the local ones
        numbered from ``seq`` on), and every entry with its encoding."""
        origin = self.origin
        written: list[tuple[_Batch, list[Entry]]] = []
        entries: list[Entry] = []
        for batch in batches:
            props = batch.props
            made: list[Entry] = [
                Write(EntryId(origin, seq + i), p, props) for i, p in enumerate(batch.payloads)
            ]
            seq += len(made)
            if batch.targets:
                made.extend(Take(EntryId(origin, seq + i), t) for i, t in enumerate(batch.targets))
                seq += len(batch.targets)
            if batch.remote:
                made.extend(batch.remote)
            entries.extend(made)
            written.append((batch, made))
        try:
            bodies = self._encoder.encode(entries)
            if max(map(len, bodies)) <= self._record_limit - segment.ENTRY.size:
                return written, entries, bodies
        except SerializationError:
            pass  # found again below, for the append it is in
        # An append that cannot be encoded (too large) fails alone, and gives
        # its seqs back, so the other callers' appends still go ahead.
        written, entries, bodies = [], [], []
        seq -= sum(len(b.payloads) + len(b.targets) for b in batches)
        for batch in batches:
            try:
                made, encoded = self._encode(batch, seq)
            except Exception as exc:
                self._fail([batch], exc if isinstance(exc, StrandError) else StrandError(str(exc)))
                continue
            seq += len(batch.payloads) + len(batch.targets)
            entries.extend(made)
            bodies.extend(encoded)
            written.append((batch, made))
        return written, entries, bodies

    def _encode(self, batch: _Batch, seq: int) -> tuple[list[Entry], list[bytes]]:
        """The batch's entries, the local ones numbered from ``seq``, and their
        encodings; ``RecordTooLarge`` if one does not fit a record."""
        origin = self.origin
        payloads = batch.payloads
        made: list[Entry] = [
            Write(EntryId(origin, seq + i), p, batch.props) for i, p in enumerate(payloads)
        ]
        seq += len(made)
        made.extend(Take(EntryId(origin, seq + i), t) for i, t in enumerate(batch.targets))
        made.extend(batch.remote)
        encoded = self._encoder.encode(made)
        limit = self._record_limit - segment.ENTRY.size
        for body in encoded:
            if len(body) > limit:
                segment.batch([body], self._record_limit)  # raises RecordTooLarge
        return made, encoded

    def _records(self, bodies: list[bytes]) -> tuple[bytes, list[int]]:
        """``bodies`` as batch records (as few as fit ``max_body``), and each
        entry's offset from the start of the first."""
        limit = self._record_limit
        with contextlib.suppress(RecordTooLarge):
            return segment.batch(bodies, limit)  # the common case: one record
        data: list[bytes] = []
        offsets: list[int] = []
        size = 0
        start = 0
        grown = 0
        for i, body in enumerate(bodies):
            grows = segment.batch_size(len(body))
            if grown + grows > limit:  # the run so far is one record
                size += self._batch_into(bodies[start:i], size, data, offsets)
                start, grown = i, 0
            grown += grows
        self._batch_into(bodies[start:], size, data, offsets)
        return b"".join(data) if len(data) > 1 else data[0], offsets

    @staticmethod
    def _batch_into(bodies: list[bytes], at: int, data: list[bytes], offsets: list[int]) -> int:
        record, within = segment.batch(bodies)
        data.append(record)
        offsets.extend(at + offset for offset in within)
        return len(record)

    async def _append(self, data: bytes) -> tuple[int, int]:
        """Roll if the segment is full, then write ``data`` to the OS (the fsync
        of ``always`` follows in ``_sync_written``). The roll is blocking work,
        in a thread, once what was written before is fsynced."""
        if self._segment_size >= self.config.segment_bytes:
            await self._synced()
            if self._broken is not None:
                raise OSError(self._broken)
            self._rolling = True  # the syncer keeps off the descriptor meanwhile
            try:
                await asyncio.to_thread(self._roll)
            finally:
                self._rolling = False
        return self._write(data)

    async def _roll_on_request(self, request: asyncio.Future[None]) -> None:
        """Seal the current segment for a compaction, between two appends."""
        try:
            if self._broken is not None:
                raise self._broken_error()
            if self._segment_size > segment.HEADER.size:
                self._rolling = True
                try:
                    await asyncio.to_thread(self._roll)
                finally:
                    self._rolling = False
        except (OSError, StrandError) as exc:
            if not request.done():
                error = exc if isinstance(exc, StrandError) else StrandError(f"roll failed: {exc}")
                request.set_exception(error)
                request.exception()  # read here, should its waiter be gone
            return
        if not request.done():
            request.set_result(None)

    def _fail(self, batches: Sequence[_Batch], error: BaseException) -> None:
        for batch in batches:
            if not batch.future.done():
                batch.future.set_exception(error)
            if not batch.future.cancelled():
                # A shielded future whose waiter left still has its exception read.
                batch.future.exception()

    def _break(self, reason: str) -> None:
        """Refuse every append from now on (the first reason is kept). Any thread."""
        if self._broken is None:
            log.error("strand: appends refused until the Strand is reopened: %s", reason)
            self._broken = reason

    def _broken_error(self) -> StrandError:
        return StrandError(
            f"the Strand cannot be written until reopened (restart the node): {self._broken}"
        )

    def _write(self, data: bytes) -> tuple[int, int]:
        """Write ``data`` to the OS at the end of the current segment.

        Returns the segment number and the offset it was written at. On
        failure the segment is cut back to where it was, so a failed append
        leaves no partial record behind.
        """
        start = self._segment_size
        try:
            _write_all(self._fd, data)
        except BaseException:
            self._cut_back(start)
            raise
        self._dirty = True
        self._segment_size = start + len(data)
        return self._segment, start

    def _cut_back(self, size: int) -> None:
        """Cut a failed append off the segment (blocking)."""
        try:
            os.ftruncate(self._fd, size)
            os.lseek(self._fd, size, os.SEEK_SET)
        except OSError as exc:
            self._break(f"could not cut back a failed append: {exc}")

    def _roll(self) -> None:
        """Seal the full segment (fsync) and start the next one (blocking).

        All or nothing: if the next segment cannot be made, the full one stays
        the current one, and the next append tries the roll again.
        """
        try:
            os.fsync(self._fd)
        except OSError as exc:
            self._break(f"sealing segment {self._segment} failed: {exc}")
            raise
        sealed = self._segment_size
        full = self._start_segment(self._segment + 1, self._sealing())
        self._sealed_bytes += sealed
        try:
            os.close(full)
        except OSError as exc:  # sealed already; nothing is lost
            log.warning("strand: closing a sealed segment failed: %s", exc)

    def _start_segment(self, number: int, sealed: Sealed | None = None) -> int:
        """Make segment ``number`` (header fsynced, and its directory entry) the
        current one, and the MANIFEST say so (with the one it replaces as
        ``sealed``); the descriptor of the one it replaces (-1 if none).

        On failure nothing changes, and the file is removed again; unless the
        MANIFEST on disk names it already (its rename done, the directory's
        fsync failed): then the Strand is broken, and the next open finds
        the directory as that MANIFEST says.
        """
        path = segment.segment_path(self._dir, number)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        own = self.own_seq_floor
        try:
            _write_all(fd, segment.header(number))
            os.fsync(fd)
            fsync_dir(self._dir)
            self._save_manifest(lambda m: m.rolled(sealed, number, segment.HEADER.size, own))
        except BaseException as exc:
            os.close(fd)
            if self._active_on_disk() == number:
                self._break(f"the MANIFEST naming segment {number} is not durable: {exc}")
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)  # a log that ends in an empty segment opens, too
            raise
        previous, self._fd = self._fd, fd
        self._segment = number
        self._segment_size = segment.HEADER.size
        self._segments += 1
        self._active_entries = 0
        self._active_ranges = {}
        self._mark = self._mark_saved = (number, segment.HEADER.size, own)
        return previous

    def _active_on_disk(self) -> int:
        """The active segment the MANIFEST on disk names (-1 if it cannot be read)."""
        try:
            found = read_manifest(self._dir)
        except (StrandError, OSError):
            return -1
        return -1 if found is None else found.active

    # -- the MANIFEST ----------------------------------------------------------

    def _save_manifest(self, change: Callable[[Manifest], Manifest] | None = None) -> None:
        """Write the MANIFEST, after ``change`` (blocking: the roll, compaction
        and the checkpoints write it from their threads, one at a time, each
        change made to the latest)."""
        with self._manifest_lock:
            new = self._manifest if change is None else change(self._manifest)
            write_manifest(self._dir, new)
            self._manifest = new

    def _sealing(self) -> Sealed:
        """What the MANIFEST is to say of the current segment once sealed."""
        return Sealed(self._segment_size, self._active_entries, self._ranges())

    def _ranges(self) -> dict[str, tuple[int, int]]:
        return _frozen(self._active_ranges)

    def _note_active(self, origin: str, lo: int, hi: int, count: int) -> None:
        """``count`` entries of ``origin``, seqs ``lo`` to ``hi``, were written
        to the current segment."""
        self._active_entries += count
        seqs = self._active_ranges.get(origin)
        if seqs is None:
            self._active_ranges[origin] = [lo, hi]
        else:
            seqs[0] = min(seqs[0], lo)
            seqs[1] = max(seqs[1], hi)

    async def _checkpoint_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.config.checkpoint_interval)
            await self._checkpoint()

    async def _checkpoint(self) -> None:
        """Write the current segment's durable length to the MANIFEST, if it grew."""
        mark = self._mark
        if mark == self._mark_saved or self._rolling or self._broken is not None:
            return
        number, size, own = mark
        ranges = self._ranges()
        try:
            await asyncio.to_thread(
                self._save_manifest, lambda m: m.checkpointed(number, size, own, ranges)
            )
        except OSError as exc:  # the last checkpoint still holds: a shorter one
            if not self._checkpoint_failing:  # once, not every interval of a full disk
                log.warning("strand: cannot write a checkpoint to the MANIFEST: %s", exc)
            self._checkpoint_failing = True
            return
        if self._checkpoint_failing:
            log.info("strand: checkpoints are written to the MANIFEST again")
            self._checkpoint_failing = False
        self._mark_saved = mark

    def _record_all(self, entries: list[Entry], positions: list[int], first: int) -> None:
        """Note where each entry now lies: in one go when all are local,
        numbered from ``first`` on (``first`` is 0 otherwise)."""
        if first:
            own = self._logs.get(self.origin)
            if own is None:
                own = self._logs[self.origin] = _OriginLog()
            if own.add_next(first, positions):
                self._entries += len(positions)
                self._note_active(self.origin, first, first + len(positions) - 1, len(positions))
                return
        for entry, position in zip(entries, positions, strict=True):
            self._record(entry, position)

    def _record(self, entry: Entry, position: int) -> None:
        origin, seq = entry.id.origin, entry.id.seq
        origin_log = self._logs.get(origin)
        if origin_log is None:
            origin_log = self._logs[origin] = _OriginLog()
        # replay(), not add(): an entry put back below the floor (replace) is a survivor.
        origin_log.replay(seq, position)
        self._entries += 1
        self._note_active(origin, seq, seq, 1)

    async def _sync_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.config.fsync_interval)
            await self._sync_if_dirty()

    async def _sync_if_dirty(self) -> None:
        # Not while the writer rolls: its thread swaps the descriptor (and
        # seals the full segment itself). Otherwise fsync a duplicate of the
        # descriptor, so a roll that closes the segment's own meanwhile is no harm.
        if not self._dirty or self._rolling or self._broken is not None:
            return
        self._dirty = False
        mark = (self._segment, self._segment_size, self.own_seq_floor)
        t0 = time.perf_counter()
        try:
            await asyncio.to_thread(_sync_and_close, os.dup(self._fd), True)
        except OSError as exc:
            self._break(f"background fsync failed: {exc}")
            return
        if mark[0] == self._segment:  # else a roll came between: it set its own
            self._mark = mark
        for callback in self._fsync_observers:
            callback(time.perf_counter() - t0)

    # -- health ----------------------------------------------------------------

    @property
    def broken(self) -> str | None:
        """Why every append is refused until the Strand is reopened, or ``None``."""
        return self._broken

    async def health(self) -> str | None:
        """Why appends cannot be made now, or ``None`` (for the readiness probe).

        After an append failed (a full disk), it writes a small file in the
        directory to find out whether the cause is gone: the node says it is
        ready again without waiting for an append that a load balancer, told
        it is not ready, would no longer send.
        """
        if self._closed:
            return "the Strand is closed"
        if self._broken is not None:
            return str(self._broken_error())
        failing = self._failing
        if failing is None:
            return None
        try:
            await asyncio.to_thread(_probe, self._dir)
        except OSError as exc:
            return f"{failing}; the data directory still cannot be written: {exc}"
        if self._failing == failing:
            self._failing = None
        return None

    # -- closing ---------------------------------------------------------------

    async def close(self) -> None:
        """Finish pending appends, fsync, close the files, release the
        directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        try:
            # A compaction stops at its next segment; a swap under way ends first.
            while self._swaps:
                await asyncio.wait(list(self._swaps))
            if self._writer is not None:
                await asyncio.wait([self._writer])  # never raises, nor cancels it
            for task in (self._syncer, self._checkpointer):
                if task is not None:
                    task.cancel()  # a thread under way finishes its own file work
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if self._fd >= 0:
                fd, self._fd = self._fd, -1
                synced = self.config.fsync != "never"
                try:
                    await asyncio.to_thread(_sync_and_close, fd, synced)
                except OSError as exc:
                    if self._broken is None:
                        raise StrandError(f"closing the Strand failed: {exc}") from exc
                    log.warning("strand: closing a broken Strand: %s", exc)
                if self._broken is None:
                    try:
                        await asyncio.to_thread(self._save_manifest, self._closing(synced))
                    except OSError as exc:  # all is durable; the last checkpoint is shorter
                        log.warning("strand: cannot write the MANIFEST on close: %s", exc)
        finally:
            if self._lock_fd >= 0:
                lock_fd, self._lock_fd = self._lock_fd, -1
                os.close(lock_fd)

    def _closing(self, synced: bool) -> Callable[[Manifest], Manifest]:
        """The MANIFEST's last change on a clean close: the whole current
        segment is the checkpoint, if it was fsynced (not under ``never``)."""
        number, size, own = (
            (self._segment, self._segment_size, self.own_seq_floor) if synced else self._mark
        )
        ranges = self._ranges()
        return lambda m: m.settled().checkpointed(number, size, own, ranges)

    async def aclose(self) -> None:
        """:meth:`close`, by the name every resource here is closed with."""
        await self.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _probe(directory: Path) -> None:
    """Write a page to a file in ``directory`` and remove it; ``OSError`` if it cannot."""
    path = directory / PROBE_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, b"\0" * 4096)
    finally:
        os.close(fd)
        os.unlink(path)


def _lock_directory(directory: Path) -> int:
    """Hold ``directory``'s lock (an exclusive flock on its LOCK file) for as
    long as the returned descriptor is open; ``DataDirLocked`` if it is held.

    Two Strands on one directory would hand out the same ids and overwrite
    each other's records; the kernel drops the lock when its holder exits.
    """
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise DataDirLocked(str(directory), holder if holder.isdigit() else None) from None
    except BaseException:
        os.close(fd)
        raise
    # Who holds it, for the message above; a full disk must not stop the start.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _sync_and_close(fd: int, sync: bool) -> None:
    try:
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _frozen(ranges: Mapping[str, list[int]]) -> dict[str, tuple[int, int]]:
    return {origin: (seqs[0], seqs[1]) for origin, seqs in ranges.items()}


def _load_or_create_origin(directory: Path, node_name: str) -> str:
    """The incarnation id of this data directory: made once, then read back.

    A wiped directory gets a new random suffix, so it never reuses the ids of
    its previous life.
    """
    path = directory / ORIGIN_FILE
    try:
        origin = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        origin = f"{node_name}-{secrets.token_hex(4)}"
        tmp = directory / (ORIGIN_FILE + ".tmp")
        with open(tmp, "w", encoding="ascii") as f:
            f.write(origin + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(directory)
        return origin
    try:
        return check_origin(origin)
    except ValueError as exc:
        raise StrandError(f"{path}: {exc}") from exc
