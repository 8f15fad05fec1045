"""The segment files of an open Strand, where each entry lies in them, and
the MANIFEST that accounts for them.

:class:`Segments` is the state the Strand's parts share: replay
(:mod:`forum.node.storage.replay`) fills it on open, the writer
(:mod:`forum.node.storage.writer`) appends to the current segment and rolls
to the next, compaction (:mod:`forum.node.storage.compaction_pass`) rewrites
sealed ones. It holds the current segment's descriptor, number and length;
the count and bytes of the sealed ones; the index of positions
(:class:`~forum.node.storage.origin_log.OriginLog` per origin); whether the
files can still be trusted (``broken``); and the MANIFEST as last written,
with the durable length of the current segment to checkpoint into it
(:mod:`forum.node.storage.manifest` says when it is written).

The file work here is blocking: the roll, the MANIFEST writes and the
checkpoints' writes run in a thread, one at a time under a lock; appends
(``write``) are made on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from forum.node.core.entries import Entry
from forum.node.core.errors import StrandError
from forum.node.storage import damage, segment
from forum.node.storage.files import fsync_dir, sync_and_close, write_all
from forum.node.storage.manifest import Manifest, Sealed, read_manifest, write_manifest
from forum.node.storage.origin_log import OriginLog

log = logging.getLogger("forum.node.storage.strand")  # the Strand's lines, under one name

#: A replayed segment: what the MANIFEST expected of it, what reading it
#: found, and per origin the lowest and highest seq in it.
Replayed = tuple[damage.Expected, segment.SegmentScan, dict[str, list[int]]]


class Segments:
    """What an open Strand's directory holds, and the MANIFEST that says so."""

    def __init__(self, directory: Path, origin: str) -> None:
        self.directory = directory
        self.origin = origin
        #: Per origin, where each of its seqs lies (the index of the log).
        self.logs: dict[str, OriginLog] = {}
        #: The current segment (the one appended to): descriptor, number, length.
        self.fd = -1
        self.number = 0
        self.size = 0
        #: Segments in the directory, and the bytes of the sealed ones.
        self.count = 0
        self.sealed_bytes = 0
        #: Entries stored, and torn tails cut on open.
        self.entries = 0
        self.tails_cut = 0
        self.closed = False
        self.broken: str | None = None  # why appends are refused until reopened
        self.rolling = False  # a roll swaps the descriptor: fsyncs keep off it
        self.dirty = False  # written since the last background fsync
        self.own_floor = 0  # no local seq at or below it is ever issued again
        self.manifest = Manifest(origin)  # as written last (or about to be)
        self._manifest_lock = threading.Lock()
        self.active_entries = 0  # entries written to the current segment
        self.active_ranges: dict[str, list[int]] = {}  # per origin, its lowest and highest seq
        #: (segment, length, own seq) known durable; and as last written to the MANIFEST.
        self.mark = self.mark_saved = (0, 0, 0)
        self._checkpoint_failing = False

    # -- this node's own seqs --------------------------------------------------

    @property
    def own_seq_floor(self) -> int:
        """The highest seq of this node's origin ever issued, as far as the
        Strand knows: held, or shown by the ``MANIFEST`` of a damaged
        directory, or reserved (``Strand.reserve_own``)."""
        own = self.logs.get(self.origin)
        return max(self.own_floor, own.highest if own is not None else 0)

    def reserve_own(self, seq: int) -> None:
        """Never issue a local seq at or below ``seq``; the next checkpoint says so."""
        self.own_floor = max(self.own_floor, seq)
        number, size, own = self.mark
        self.mark = (number, size, max(own, seq))

    def missing_own(self) -> list[tuple[int, int]]:
        """The ranges ``(first, last)`` of this node's own seqs, up to
        :attr:`own_seq_floor`, neither held nor known to be dead."""
        own = self.logs.get(self.origin)
        floor = self.own_seq_floor
        if own is None:
            return [(1, floor)] if floor else []
        return own.absent(floor)

    # -- where entries lie -----------------------------------------------------

    def floors(self) -> dict[str, int]:
        """Per origin, the compaction floor; origins with no floor are left out."""
        return {origin: o.base for origin, o in self.logs.items() if o.base}

    def record_all(self, entries: list[Entry], positions: list[int], first: int) -> None:
        """Note where each written entry now lies: in one go when all are
        local, numbered from ``first`` on (``first`` is 0 otherwise)."""
        if first:
            own = self.logs.get(self.origin)
            if own is None:
                own = self.logs[self.origin] = OriginLog()
            if own.add_next(first, positions):
                self.entries += len(positions)
                self.note_active(self.origin, first, first + len(positions) - 1, len(positions))
                return
        for entry, position in zip(entries, positions, strict=True):
            self._record(entry, position)

    def _record(self, entry: Entry, position: int) -> None:
        origin, seq = entry.id.origin, entry.id.seq
        origin_log = self.logs.get(origin)
        if origin_log is None:
            origin_log = self.logs[origin] = OriginLog()
        # replay(), not add(): an entry put back below the floor (replace) is a survivor.
        origin_log.replay(seq, position)
        self.entries += 1
        self.note_active(origin, seq, seq, 1)

    def note_active(self, origin: str, lo: int, hi: int, count: int) -> None:
        """``count`` entries of ``origin``, seqs ``lo`` to ``hi``, were written
        to the current segment."""
        self.active_entries += count
        seqs = self.active_ranges.get(origin)
        if seqs is None:
            self.active_ranges[origin] = [lo, hi]
        else:
            seqs[0] = min(seqs[0], lo)
            seqs[1] = max(seqs[1], hi)

    # -- faults ----------------------------------------------------------------

    def break_(self, reason: str) -> None:
        """Refuse every append from now on (the first reason is kept). Any thread."""
        if self.broken is None:
            log.error("strand: appends refused until the Strand is reopened: %s", reason)
            self.broken = reason

    def broken_error(self) -> StrandError:
        return StrandError(
            f"the Strand cannot be written until reopened (restart the node): {self.broken}"
        )

    # -- the current segment ---------------------------------------------------

    def write(self, data: bytes) -> tuple[int, int]:
        """Write ``data`` to the OS at the end of the current segment.

        Returns the segment number and the offset it was written at. On
        failure the segment is cut back to where it was, so a failed append
        leaves no partial record behind.
        """
        start = self.size
        try:
            write_all(self.fd, data)
        except BaseException:
            self.cut_back(start)
            raise
        self.dirty = True
        self.size = start + len(data)
        return self.number, start

    def cut_back(self, size: int) -> None:
        """Cut a failed append off the segment (blocking)."""
        try:
            os.ftruncate(self.fd, size)
            os.lseek(self.fd, size, os.SEEK_SET)
        except OSError as exc:
            self.break_(f"could not cut back a failed append: {exc}")

    def roll(self) -> None:
        """Seal the full segment (fsync) and start the next one (blocking).

        All or nothing: if the next segment cannot be made, the full one stays
        the current one, and the next append tries the roll again.
        """
        try:
            os.fsync(self.fd)
        except OSError as exc:
            self.break_(f"sealing segment {self.number} failed: {exc}")
            raise
        sealed = self.size
        full = self.start(self.number + 1, self._sealing())
        self.sealed_bytes += sealed
        try:
            os.close(full)
        except OSError as exc:  # sealed already; nothing is lost
            log.warning("strand: closing a sealed segment failed: %s", exc)

    def start(self, number: int, sealed: Sealed | None = None) -> int:
        """Make segment ``number`` (header fsynced, and its directory entry) the
        current one, and the MANIFEST say so (with the one it replaces as
        ``sealed``); the descriptor of the one it replaces (-1 if none).

        On failure nothing changes, and the file is removed again; unless the
        MANIFEST on disk names it already (its rename done, the directory's
        fsync failed): then the Strand is broken, and the next open finds
        the directory as that MANIFEST says.
        """
        path = segment.segment_path(self.directory, number)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        own = self.own_seq_floor
        try:
            write_all(fd, segment.header(number))
            os.fsync(fd)
            fsync_dir(self.directory)
            self.save_manifest(lambda m: m.rolled(sealed, number, segment.HEADER.size, own))
        except BaseException as exc:
            os.close(fd)
            if self._active_on_disk() == number:
                self.break_(f"the MANIFEST naming segment {number} is not durable: {exc}")
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)  # a log that ends in an empty segment opens, too
            raise
        previous, self.fd = self.fd, fd
        self.number = number
        self.size = segment.HEADER.size
        self.count += 1
        self.active_entries = 0
        self.active_ranges = {}
        self.mark = self.mark_saved = (number, segment.HEADER.size, own)
        return previous

    def _active_on_disk(self) -> int:
        """The active segment the MANIFEST on disk names (-1 if it cannot be read)."""
        try:
            found = read_manifest(self.directory)
        except (StrandError, OSError):
            return -1
        return -1 if found is None else found.active

    def open_last(
        self, kept: list[Replayed], found: Manifest | None, set_aside: Collection[int]
    ) -> None:
        """Seal every replayed segment of ``kept`` but the last, cut the last
        one's torn tail and open it for appending (or start a new one, after
        every number ``found`` names and those ``set_aside``), and write the
        MANIFEST if it changed (blocking, on open)."""
        last = None
        if kept and kept[-1][0].last and kept[-1][0].role != "sealed":
            last = kept.pop()
        sealed = {}
        for exp, scan, ranges in kept:
            sealed[exp.number] = Sealed(scan.good_end, len(scan.records), _frozen(ranges))
            self.sealed_bytes += scan.good_end
        self.count = len(kept)
        self.manifest = Manifest(self.origin, own=self.own_seq_floor, sealed=sealed)
        if last is None:  # none, or the last one was set aside: the next number
            numbers = set(sealed) | set(set_aside)
            if found is not None:
                numbers |= set(found.sealed) | {found.active}
            self.start(max(numbers, default=0) + 1)
            return
        exp, scan, ranges = last
        path = segment.segment_path(self.directory, exp.number)
        self.count += 1
        if scan.torn_bytes and os.path.getsize(path) > scan.good_end:  # not set aside
            log.warning(
                "strand: cut a torn tail of %d bytes from %s at offset %d",
                scan.torn_bytes,
                path,
                scan.good_end,
            )
            self.tails_cut += 1
            with open(path, "r+b") as f:
                f.truncate(scan.good_end)
                os.fsync(f.fileno())
        self.size = scan.good_end
        self.active_entries = len(scan.records)
        self.active_ranges = ranges
        if scan.version != segment.FORMAT_VERSION and self.size > segment.HEADER.size:
            # Batches go into segments of their own format: seal the old one
            # (durably, as a roll does) and go on in the next.
            sync_and_close(os.open(path, os.O_WRONLY), True)
            self.manifest = dataclasses.replace(self.manifest, active=exp.number)
            self.start(exp.number + 1, self._sealing())
            self.sealed_bytes += scan.good_end
        elif self.size >= segment.HEADER.size:
            self.number = exp.number
            self.fd = os.open(path, os.O_WRONLY)
            os.lseek(self.fd, self.size, os.SEEK_SET)
            # What replay found is the checkpoint: fsynced first, as a crash
            # of the process alone leaves written bytes in the page cache.
            os.fsync(self.fd)
            own = self.own_seq_floor
            self.mark = (exp.number, self.size, own)
            self.manifest = self.manifest.rolled(None, exp.number, self.size, own).checkpointed(
                exp.number, self.size, own, self._ranges()
            )
            if self.manifest != found:
                self.save_manifest()
            if (
                not scan.flags & segment.MANIFESTED
            ):  # no MANIFEST accounted for it: flagged from now on
                os.pwrite(self.fd, segment.FLAGS.pack(segment.MANIFESTED), segment.FLAGS_AT)
                os.fsync(self.fd)
            self.mark_saved = self.mark
        else:  # the last segment lost even its header in a crash mid-roll: start it again
            self.count -= 1
            self.start(exp.number)

    # -- the MANIFEST ----------------------------------------------------------

    def save_manifest(self, change: Callable[[Manifest], Manifest] | None = None) -> None:
        """Write the MANIFEST, after ``change`` (blocking: the roll, compaction
        and the checkpoints write it from their threads, one at a time, each
        change made to the latest)."""
        with self._manifest_lock:
            new = self.manifest if change is None else change(self.manifest)
            write_manifest(self.directory, new)
            self.manifest = new

    def rewritten(self, number: int, length: int, entries: int) -> None:
        """Sealed segment ``number`` was rewritten as ``(length, entries)``
        (0: removed); the MANIFEST has it with its next write."""
        with self._manifest_lock:
            self.manifest = self.manifest.rewritten(number, length, entries)

    def _sealing(self) -> Sealed:
        """What the MANIFEST is to say of the current segment once sealed."""
        return Sealed(self.size, self.active_entries, self._ranges())

    def _ranges(self) -> dict[str, tuple[int, int]]:
        return _frozen(self.active_ranges)

    async def checkpoint_loop(self, interval: float) -> None:
        while not self.closed:
            await asyncio.sleep(interval)
            await self._checkpoint()

    async def _checkpoint(self) -> None:
        """Write the current segment's durable length to the MANIFEST, if it grew."""
        mark = self.mark
        if mark == self.mark_saved or self.rolling or self.broken is not None:
            return
        number, size, own = mark
        ranges = self._ranges()
        try:
            await asyncio.to_thread(
                self.save_manifest, lambda m: m.checkpointed(number, size, own, ranges)
            )
        except OSError as exc:  # the last checkpoint still holds: a shorter one
            if not self._checkpoint_failing:  # once, not every interval of a full disk
                log.warning("strand: cannot write a checkpoint to the MANIFEST: %s", exc)
            self._checkpoint_failing = True
            return
        if self._checkpoint_failing:
            log.info("strand: checkpoints are written to the MANIFEST again")
            self._checkpoint_failing = False
        self.mark_saved = mark

    async def close(self, synced: bool) -> None:
        """Close the current segment, fsynced first if ``synced``, and, if the
        files can be trusted, write the MANIFEST's last change: the whole
        current segment is the checkpoint if it was fsynced."""
        if self.fd < 0:
            return
        fd, self.fd = self.fd, -1
        try:
            await asyncio.to_thread(sync_and_close, fd, synced)
        except OSError as exc:
            if self.broken is None:
                raise StrandError(f"closing the Strand failed: {exc}") from exc
            log.warning("strand: closing a broken Strand: %s", exc)
        if self.broken is not None:
            return
        number, size, own = (self.number, self.size, self.own_seq_floor) if synced else self.mark
        ranges = self._ranges()
        try:
            await asyncio.to_thread(
                self.save_manifest, lambda m: m.settled().checkpointed(number, size, own, ranges)
            )
        except OSError as exc:  # all is durable; the last checkpoint is shorter
            log.warning("strand: cannot write the MANIFEST on close: %s", exc)


def _frozen(ranges: Mapping[str, list[int]]) -> dict[str, tuple[int, int]]:
    return {origin: (seqs[0], seqs[1]) for origin, seqs in ranges.items()}
