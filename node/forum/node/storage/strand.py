"""The Strand: a node's append-only log of entries, on disk.

The byte format of the files is in :mod:`forum.node.storage.segment`. This
module is the log as its users see it: it opens the directory and replays
it, finds any stored entry again by its id (so that entries can be served
on to peers), says what is stored, and whether it can be written
(``health``). Its parts, each a module of its own:

* :mod:`forum.node.storage.replay`: reading the directory back on open,
  checked against its ``MANIFEST``;
* :mod:`forum.node.storage.segments`: the segment files, where each entry
  lies in them, and the ``MANIFEST`` kept as they change;
* :mod:`forum.node.storage.writer`: appending, in group commits, under the
  fsync policy;
* :mod:`forum.node.storage.compaction_pass`: compaction run over the open
  log, beside its rules in :mod:`forum.node.storage.compaction`;
* :mod:`forum.node.storage.files`: the ``LOCK`` and ``ORIGIN`` files and the
  file calls the others share.

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
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

from forum.node.core.codec import (
    MAX_KEY_BYTES,
    EntryEncoder,
    RawEntry,
    decode_entry,
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
    StrandError,
)
from forum.node.core.reports import CompactionReport
from forum.node.core.resource import AsyncResource
from forum.node.storage import compaction, segment
from forum.node.storage.compaction_pass import Compaction
from forum.node.storage.damage import Damage
from forum.node.storage.files import load_or_create_origin, lock_directory, probe
from forum.node.storage.origin_log import OFFSET_BITS
from forum.node.storage.replay import replay
from forum.node.storage.segments import Segments
from forum.node.storage.writer import FsyncPolicy, Writer

log = logging.getLogger(__name__)

MIN_SEGMENT_BYTES = 4096


#: The most a Write's record body holds beyond its payload: the longest origin,
#: the largest seq, every property at its longest, a 32-bit length for the
#: payload (3 more than the 8-bit length the empty payload measured here
#: gets), and its head in a batch.
_LONGEST_WRITE = Write(
    EntryId("o" * MAX_ORIGIN_LENGTH, 2**64 - 1),
    b"",
    Properties(2**64 - 1, 2**64 - 1, -128, b"k" * MAX_KEY_BYTES, 2**64 - 1, True),
)
_WRITE_OVERHEAD = len(EntryEncoder().encode([_LONGEST_WRITE])[0]) + 3 + segment.ENTRY.size


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


class Strand(AsyncResource):
    """An open log. Use ``await Strand.open(cfg)``; close with ``await strand.close()``.

    The Strand is the log as its users see it: it opens the directory
    (replayed by :func:`~forum.node.storage.replay.replay`), reads entries
    back, answers what is stored, and says whether it can be written
    (``health``). Its parts do the rest: the files and the index in
    :class:`~forum.node.storage.segments.Segments`, appending in the
    :class:`~forum.node.storage.writer.Writer`, compaction in
    :class:`~forum.node.storage.compaction_pass.Compaction`.
    """

    def __init__(self, cfg: StrandConfig, origin: str) -> None:
        self.config = cfg
        self.origin = origin
        self._dir = cfg.storage
        self._segments = Segments(cfg.storage, origin)
        self._logs = self._segments.logs
        self._writer = Writer(self._segments, cfg.fsync, cfg.fsync_interval, cfg.segment_bytes)
        self._compaction = Compaction(self._segments, self._writer)
        self._lock_fd = -1
        self._replayed: list[RawEntry] | None = []
        self._checkpointer: asyncio.Task[None] | None = None
        #: What repair mode found on open (``None``: the directory was whole).
        self.damage: Damage | None = None

    # -- opening ---------------------------------------------------------------

    @classmethod
    async def open(cls, cfg: StrandConfig | None = None) -> Strand:
        """Open (creating if needed) the log in ``cfg.storage`` and replay it."""
        cfg = cfg or StrandConfig()
        try:
            strand = await asyncio.to_thread(cls._open_blocking, cfg)
        except OSError as exc:
            raise StrandError(f"cannot open the Strand in {cfg.storage}: {exc}") from exc
        strand._writer.start()
        if cfg.fsync != "never":  # under never, only a roll makes a length durable
            strand._checkpointer = asyncio.create_task(
                strand._segments.checkpoint_loop(cfg.checkpoint_interval),
                name="strand-checkpointer",
            )
        return strand

    @classmethod
    def _open_blocking(cls, cfg: StrandConfig) -> Strand:
        directory = cfg.storage
        directory.mkdir(parents=True, exist_ok=True)
        lock_fd = lock_directory(directory)
        strand: Strand | None = None
        try:
            strand = cls(cfg, load_or_create_origin(directory, cfg.node_name))
            strand._lock_fd = lock_fd
            strand._replayed, strand.damage = replay(strand._segments, cfg.repair)
        except BaseException:
            if strand is not None and strand._segments.fd >= 0:
                os.close(strand._segments.fd)
            os.close(lock_fd)  # also releases the lock
            raise
        return strand

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
        return self._segments.floors()

    @property
    def own_seq_floor(self) -> int:
        """The highest seq of this node's origin ever issued, as far as the
        Strand knows (held, or shown by the ``MANIFEST`` of a damaged
        directory, or given to :meth:`reserve_own`): its next local entry
        gets a higher one."""
        return self._segments.own_seq_floor

    def reserve_own(self, seq: int) -> None:
        """Never issue a local seq at or below ``seq`` (a peer was found to
        hold this node's own entries up to it: a damaged directory lost
        them). The seqs up to it that are not held are then missing
        (:meth:`missing_own`). The MANIFEST has it within
        ``checkpoint_interval`` (under fsync ``never``, at the next roll or
        close), or sooner with the next durable append's checkpoint."""
        self._segments.reserve_own(seq)

    def missing_own(self) -> list[tuple[int, int]]:
        """The ranges ``(first, last)`` of this node's own seqs, up to
        :attr:`own_seq_floor`, that it neither holds nor knows to be dead:
        what a damaged directory lost, to be fetched back from peers (a
        range may include seqs compaction dropped; a peer's page says so).
        Empty for a whole directory."""
        return self._segments.missing_own()

    def stats(self) -> StrandStats:
        segments, compacted = self._segments, self._compaction
        return StrandStats(
            entries=segments.entries,
            bytes=segments.sealed_bytes + segments.size,
            segments=segments.count,
            tails_cut=segments.tails_cut,
            compactions=compacted.passes,
            bytes_reclaimed=compacted.bytes_reclaimed,
            entries_dropped=compacted.entries_dropped,
        )

    @property
    def current_segment_bytes(self) -> int:
        """Bytes of the segment appends go to now (the one compaction seals first)."""
        return self._segments.size

    def add_fsync_observer(self, callback: Callable[[float], None]) -> None:
        """Call ``callback(seconds)`` after every fsync (for metrics)."""
        self._writer.fsync_observers.append(callback)

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
        async with self._compaction.gate.reading():
            try:
                bodies = await asyncio.to_thread(self._read_positions, positions)
            except OSError as exc:
                raise StrandError(f"cannot read entries of {origin}: {exc}") from exc
        return Page([decode_entry(body) for body in bodies], dead, upto)

    def _read_positions(self, positions: Sequence[int]) -> list[bytes]:
        bodies = []
        fds: list[int] = []
        readers: dict[int, segment.RecordReader] = {}
        mask = (1 << OFFSET_BITS) - 1
        try:
            for position in positions:
                number = position >> OFFSET_BITS
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
        live: compaction.Live,
        *,
        seal: bool = False,
    ) -> CompactionReport:
        """Drop from the sealed segments every Write at or below ``horizon``
        that a Take at or below it killed, and that ``live()`` (asked once the
        segments are read) does not name; and the Takes of Writes dropped, now
        or before. With ``seal``, the current segment is sealed first, so its
        entries can go too. One pass at a time; see :mod:`forum.node.storage.compaction`."""
        return await self._compaction.run(horizon, live, seal)

    async def mark_dead(self, origin: str, ranges: Sequence[tuple[int, int]]) -> None:
        """Seqs of ``origin`` in ``ranges`` (``(first, last)``) that a peer
        dropped: those never seen here are dead from now on, here and after
        a restart (the floor is raised over them durably), so they are never
        taken in again. Entries held here are left to the caller."""
        await self._compaction.mark_dead(origin, ranges)

    async def replace(self, entries: Sequence[Entry]) -> list[Entry]:
        """Store each of ``entries`` in place of the stored entry with its id
        (an origin's own entry replacing a copy that differs: a forgery, or a
        buggy peer's); returns those replaced (ids not stored are left out).

        The old record is dropped from its segment (the current one is
        sealed first if it holds one), then the new one appended: replay
        keeps the first copy of an id, so the old one goes first. A crash in
        between leaves the id absent: above the floor a gap, which
        anti-entropy fills from the origin again."""
        return await self._compaction.replace(entries)

    async def seal(self) -> None:
        """Seal the current segment now, if it holds any entry (the next
        append starts a new one), so that compaction can rewrite all that
        was appended before; ``compact(seal=True)`` seals first this way."""
        await self._writer.seal()

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
        return self._writer.submit(payloads=payloads, then=then, props=props)  # type: ignore[arg-type,return-value]

    async def append_takes(self, targets: Sequence[EntryId]) -> list[Take]:
        """Append one Take per target under new local ids; all or nothing."""
        return await asyncio.shield(self.submit_takes(targets))

    def submit_takes(self, targets: Sequence[EntryId]) -> asyncio.Future[list[Take]]:
        """Like :meth:`append_takes`, but hand back the future of the append:
        the write goes ahead whatever happens to the caller, who can find out
        how it ended even after being cancelled."""
        return self._writer.submit(targets=targets)  # type: ignore[return-value]

    async def append_remote(self, entries: Sequence[Entry]) -> None:
        """Append entries that already have ids (from peers). The caller filters
        out those already held."""
        await asyncio.shield(self.submit_remote(entries))

    def submit_remote(self, entries: Sequence[Entry]) -> asyncio.Future[list[Entry]]:
        """Like :meth:`append_remote`, handing back the future of the append."""
        return self._writer.submit(remote=entries)

    # -- health ----------------------------------------------------------------

    @property
    def broken(self) -> str | None:
        """Why every append is refused until the Strand is reopened, or ``None``."""
        return self._segments.broken

    async def health(self) -> str | None:
        """Why appends cannot be made now, or ``None`` (for the readiness probe).

        After an append failed (a full disk), it writes a small file in the
        directory to find out whether the cause is gone: the node says it is
        ready again without waiting for an append that a load balancer, told
        it is not ready, would no longer send.
        """
        segments, writer = self._segments, self._writer
        if segments.closed:
            return "the Strand is closed"
        if segments.broken is not None:
            return str(segments.broken_error())
        failing = writer.failing
        if failing is None:
            return None
        try:
            await asyncio.to_thread(probe, self._dir)
        except OSError as exc:
            return f"{failing}; the data directory still cannot be written: {exc}"
        if writer.failing == failing:
            writer.failing = None
        return None

    async def close(self) -> None:
        """Finish pending appends, fsync, close the files, release the
        directory. Idempotent."""
        segments = self._segments
        if segments.closed:
            return
        segments.closed = True
        self._writer.wake.set()
        try:
            # A compaction stops at its next segment; a swap under way ends first.
            await self._compaction.finish_swaps()
            await self._writer.close()
            if self._checkpointer is not None:
                self._checkpointer.cancel()  # a thread under way finishes its own file work
                with contextlib.suppress(asyncio.CancelledError):
                    await self._checkpointer
            await segments.close(synced=self.config.fsync != "never")
        finally:
            if self._lock_fd >= 0:
                lock_fd, self._lock_fd = self._lock_fd, -1
                os.close(lock_fd)

    async def aclose(self) -> None:
        """:meth:`close`, by the name every resource here is closed with."""
        await self.close()
