"""The Strand's writer: appends queued by callers, written in group commits.

Callers queue an append (:meth:`Writer.submit`) and get a future; one task,
the writer, takes whatever is queued each time it wakes, numbers the local
entries (an origin's seqs are given out in the batch that writes them, and
given back if it fails, so they never have gaps), encodes them, and writes
them to the current segment as batch records (:mod:`forum.node.storage.segment`),
most often one record for the whole group, with one write. When it is durable
depends on ``StrandConfig.fsync`` (the Strand's docstring says what each
policy promises):

``always``
    The group waits for the next fsync to start after it was written (at
    once, in a worker thread, if the disk is idle), and the writer goes on
    writing the next group meanwhile; each fsync covers everything written
    before it started, and the next one starts the moment it ends, before
    its appenders are answered: the disk and the loop work at once.
``interval``
    The group is answered once written; a background task fsyncs every
    ``fsync_interval`` seconds if anything was written.
``never``
    The group is answered once written.

Answers go out in log order: each append's future is set, and its ``then``
called once with its entries, the appends next to each other with the same
``then`` and properties in one call. A full segment is rolled between two
groups (:meth:`Segments.roll <forum.node.storage.segments.Segments.roll>`), and
so is the current one when compaction asks to seal it (:meth:`Writer.seal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from forum.node.core.codec import EntryEncoder
from forum.node.core.entries import PLAIN, Entry, EntryId, Properties, Take, Write
from forum.node.core.errors import RecordTooLarge, SerializationError, StrandError
from forum.node.storage import segment
from forum.node.storage.files import sync_and_close
from forum.node.storage.origin_log import OFFSET_BITS
from forum.node.storage.segments import Segments

log = logging.getLogger("forum.node.storage.strand")  # the Strand's lines, under one name

#: Called by the writer with an append's entries once they are durable.
Durable = Callable[[list[Entry]], None]
#: When appends reach the disk: the writer owns durability, so the one
#: definition lives here and the configs (``StrandConfig``, ``NodeConfig``)
#: import it. docs/operations.md says what each can lose.
FsyncPolicy = Literal["always", "interval", "never"]


@dataclass(slots=True)
class _Batch:
    """Appends waiting for the writer: what to write, who waits for it, and
    what to call once it is durable."""

    future: asyncio.Future[list[Entry]]
    payloads: Sequence[bytes] = ()
    targets: Sequence[EntryId] = ()
    remote: Sequence[Entry] = ()
    then: Durable | None = None
    props: Properties = field(default=PLAIN, kw_only=True)


#: Answer at least this many appends in two halves (see ``Writer._answer``).
_SPLIT_ANSWERS = 8


@dataclass(slots=True)
class _Written:
    """Appends written to the OS, waiting to be durable: the appends with
    their entries, where each entry lies, the first seq when all of them are
    local (else 0), and the offsets the write began and ended at."""

    appends: list[tuple[_Batch, list[Entry]]]
    entries: list[Entry]
    positions: list[int]
    first: int
    start: int
    end: int = field(kw_only=True)


class Writer:
    """Writes the appends of one Strand to its segments (see the module docstring)."""

    def __init__(
        self, segments: Segments, fsync: FsyncPolicy, fsync_interval: float, segment_bytes: int
    ) -> None:
        self._segments = segments
        self.origin = segments.origin
        self._fsync = fsync
        self._fsync_interval = fsync_interval
        self._segment_bytes = segment_bytes
        self._record_limit = segment.max_body(segment_bytes)
        self._pending: list[_Batch] = []
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._syncer: asyncio.Task[None] | None = None
        self._unsynced: list[_Written] = []  # fsync "always": written, not yet fsynced
        self._syncing: asyncio.Future[None] | None = None  # the fsync under way and its answers
        self._ahead = 0  # local seqs given to appends written but not yet durable
        self._encoder = EntryEncoder()  # used by the writer alone
        self._roll_request: asyncio.Future[None] | None = None
        #: Why the last append failed (it may work again); ``None`` once one worked.
        self.failing: str | None = None
        self.fsync_observers: list[Callable[[float], None]] = []

    def start(self) -> None:
        """Start the writer task (and the background fsync under ``interval``)."""
        self._task = asyncio.create_task(self._write_loop(), name="strand-writer")
        self._task.add_done_callback(self._on_writer_done)
        if self._fsync == "interval":
            self._syncer = asyncio.create_task(self._sync_loop(), name="strand-syncer")

    async def close(self) -> None:
        """Wait for the writer to finish what is queued (the Strand is closed
        and ``wake`` set), and stop the background fsync."""
        if self._task is not None:
            await asyncio.wait([self._task])  # never raises, nor cancels it
        if self._syncer is not None:
            self._syncer.cancel()  # a thread under way finishes its own file work
            with contextlib.suppress(asyncio.CancelledError):
                await self._syncer

    def submit(
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
        segments = self._segments
        if segments.closed:
            future.set_exception(StrandError("the Strand is closed"))
        elif segments.broken is not None:
            future.set_exception(segments.broken_error())
        elif not (payloads or targets or remote):
            future.set_result([])
        else:
            self._pending.append(_Batch(future, payloads, targets, remote, then, props=props))
            self.wake.set()
        return future

    async def seal(self) -> None:
        """Have the writer roll to a new segment now (if the current one holds
        any entry), between two groups, so that the one it sealed can be rewritten."""
        if self._segments.size <= segment.HEADER.size:
            return
        if self._roll_request is None:
            self._roll_request = asyncio.get_running_loop().create_future()
            self.wake.set()
        await asyncio.shield(self._roll_request)

    # -- the loop --------------------------------------------------------------

    async def _write_loop(self) -> None:
        segments = self._segments
        while True:
            await self.wake.wait()
            self.wake.clear()
            batches, self._pending = self._pending, []
            if batches:
                try:
                    await self._write_batches(batches)
                except Exception as exc:  # a bug, not a disk fault: refuse from now on, say why
                    log.exception("strand: the writer failed")
                    segments.break_(f"the writer failed: {exc!r}")
                    self._fail(batches, segments.broken_error())
            if self._roll_request is not None:
                await self._synced()
                await self._roll_on_request(self._roll_request)
                self._roll_request = None
            elif not batches and segments.closed:
                await self._synced()
                return

    def _on_writer_done(self, writer: asyncio.Task[None]) -> None:
        """The writer ends only on close; if it ended otherwise (cancelled with
        the loop), nothing would ever answer the appends: refuse them instead."""
        segments = self._segments
        if segments.closed and not writer.cancelled() and writer.exception() is None:
            return
        segments.break_("the writer stopped")
        pending, self._pending = self._pending, []
        self._fail(pending, segments.broken_error())

    async def _write_batches(self, batches: list[_Batch]) -> None:
        """Write what the appenders queued as batch records (one length and
        checksum per record, most often one record), with one write and one
        fsync for all, then answer them in log order."""
        segments = self._segments
        if segments.broken is not None:
            self._fail(batches, segments.broken_error())
            return
        first = segments.own_seq_floor + 1 + self._ahead
        written, entries, bodies = self._encode_all(batches, first)
        if not written:
            return
        data, offsets = self._records(bodies)
        given = sum(len(batch.payloads) + len(batch.targets) for batch, _ in written)
        try:
            number, start = await self._append(data)
        except OSError as exc:
            self.failing = f"append failed: {exc}"
            error = segments.broken_error() if segments.broken else StrandError(self.failing)
            self._fail([batch for batch, _ in written], error)
            return
        self.failing = None
        base = (number << OFFSET_BITS) | start
        positions = [base + offset for offset in offsets]
        local = first if given == len(entries) else 0
        done = _Written(written, entries, positions, local, start, end=start + len(data))
        if self._fsync == "always":
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
        self._segments.record_all(done.entries, done.positions, done.first)
        self._answer(done.appends)

    # -- encoding --------------------------------------------------------------

    def _encode_all(
        self, batches: list[_Batch], seq: int
    ) -> tuple[list[tuple[_Batch, list[Entry]]], list[Entry], list[bytes]]:
        """The appends to write, each with its entries (the local ones
        numbered from ``seq`` on), and every entry with its encoding.

        An append that cannot be encoded, or does not fit a record, fails
        alone (``RecordTooLarge``, or the encoding's error as a
        ``StrandError``) and gives its seqs back: the group is encoded
        again one append at a time, so the other callers' appends still go
        ahead."""
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
        limit = self._record_limit - segment.ENTRY.size
        error: StrandError
        try:
            bodies = self._encoder.encode(entries)
        except SerializationError as exc:
            error = StrandError(str(exc))
        else:
            if max(map(len, bodies)) <= limit:
                return written, entries, bodies
            too_large = next(body for body in bodies if len(body) > limit)
            error = segment.too_large(segment.batch_size(len(too_large)), self._record_limit)
        if len(batches) == 1:
            self._fail(batches, error)
            return [], [], []
        seq -= sum(len(b.payloads) + len(b.targets) for b in batches)
        written, entries, bodies = [], [], []
        for batch in batches:
            alone = self._encode_all([batch], seq)
            if alone[0]:
                seq += len(batch.payloads) + len(batch.targets)
                written += alone[0]
                entries += alone[1]
                bodies += alone[2]
        return written, entries, bodies

    def _records(self, bodies: list[bytes]) -> tuple[bytes, list[int]]:
        """``bodies`` as batch records (as few as fit ``max_body``), and each
        entry's offset from the start of the first."""
        with contextlib.suppress(RecordTooLarge):
            return segment.batch(bodies, self._record_limit)  # the common case: one record
        offsets: list[int] = []
        records = segment.batches(bodies, self._record_limit, 0, offsets)
        return b"".join(records), offsets

    # -- writing and rolling ---------------------------------------------------

    async def _append(self, data: bytes) -> tuple[int, int]:
        """Roll if the segment is full, then write ``data`` to the OS (the fsync
        of ``always`` follows in ``_sync_written``). The roll is blocking work,
        in a thread, once what was written before is fsynced."""
        segments = self._segments
        if segments.size >= self._segment_bytes:
            await self._synced()
            if segments.broken is not None:
                raise OSError(segments.broken)
            segments.rolling = True  # the syncer keeps off the descriptor meanwhile
            try:
                await asyncio.to_thread(segments.roll)
            finally:
                segments.rolling = False
        return segments.write(data)

    async def _roll_on_request(self, request: asyncio.Future[None]) -> None:
        """Seal the current segment for a compaction, between two appends."""
        segments = self._segments
        try:
            if segments.broken is not None:
                raise segments.broken_error()
            if segments.size > segment.HEADER.size:
                segments.rolling = True
                try:
                    await asyncio.to_thread(segments.roll)
                finally:
                    segments.rolling = False
        except (OSError, StrandError) as exc:
            if not request.done():
                error = exc if isinstance(exc, StrandError) else StrandError(f"roll failed: {exc}")
                request.set_exception(error)
                request.exception()  # read here, should its waiter be gone
            return
        if not request.done():
            request.set_result(None)

    # -- fsync "always": the pipelined group commit ----------------------------

    async def _sync_written(self, group: list[_Written], running: asyncio.Future[float]) -> None:
        """Wait for the fsync ``running`` of ``group``, then fsync what the
        writer wrote meanwhile, and so on, one fsync at a time, each covering
        all that was written before it started, and answer each; the next fsync
        starts before the answers go out, so the appends they wake are
        written while it runs (the disk and the loop work at once)."""
        segments = self._segments
        loop = asyncio.get_running_loop()
        finished: list[_Written] = []
        fsync: asyncio.Future[float] | None = running
        try:
            while fsync is not None:
                try:
                    seconds = await fsync
                except Exception as exc:  # broken now: what waits for it is refused
                    segments.break_(f"fsync failed: {exc!r}")
                    # Here, not in the thread: the writer's writes are on the loop too.
                    segments.cut_back(group[0].start)
                    segments.size = group[0].start
                    self._fail_written(group + self._unsynced)
                    return
                finished, group, self._unsynced = group, self._unsynced, []
                fsync = loop.run_in_executor(None, self._fdatasync) if group else None
                for callback in self.fsync_observers:
                    callback(seconds)
                for done in finished:
                    self._ahead -= sum(len(b.payloads) + len(b.targets) for b, _ in done.appends)
                    self._durable(done)
                segments.mark = (segments.number, finished[-1].end, segments.own_seq_floor)
        except Exception as exc:  # a bug, not a disk fault: refuse from now on, say why
            log.exception("strand: the syncer failed")
            segments.break_(f"the syncer failed: {exc!r}")
            self._fail_written(finished + group + self._unsynced)  # those not answered yet
        finally:
            self._syncing = None

    def _fail_written(self, groups: list[_Written]) -> None:
        self._unsynced = []
        error = self._segments.broken_error()
        self._fail([batch for done in groups for batch, _ in done.appends], error)

    def _fdatasync(self) -> float:
        """fdatasync the current segment (blocking); on failure refuse every
        append from now on (the caller cuts off what it covered)."""
        t0 = time.perf_counter()
        try:
            # fdatasync: the data and the file size, not the timestamps.
            os.fdatasync(self._segments.fd)
        except BaseException as exc:
            # The kernel may have dropped the pages it could not write, and
            # a retried fsync can succeed without them: trust nothing now.
            self._segments.break_(f"fsync failed: {exc}")
            raise
        return time.perf_counter() - t0

    async def _synced(self) -> None:
        """Wait until nothing written waits for its fsync (before a roll swaps
        the descriptor, or the Strand closes)."""
        while self._syncing is not None:
            await asyncio.wait([self._syncing])

    # -- fsync "interval" ------------------------------------------------------

    async def _sync_loop(self) -> None:
        while not self._segments.closed:
            await asyncio.sleep(self._fsync_interval)
            await self._sync_if_dirty()

    async def _sync_if_dirty(self) -> None:
        # Not while the writer rolls: its thread swaps the descriptor (and
        # seals the full segment itself). Otherwise fsync a duplicate of the
        # descriptor, so a roll that closes the segment's own meanwhile is no harm.
        segments = self._segments
        if not segments.dirty or segments.rolling or segments.broken is not None:
            return
        segments.dirty = False
        mark = (segments.number, segments.size, segments.own_seq_floor)
        t0 = time.perf_counter()
        try:
            await asyncio.to_thread(sync_and_close, os.dup(segments.fd), True)
        except OSError as exc:
            segments.break_(f"background fsync failed: {exc}")
            return
        if mark[0] == segments.number:  # else a roll came between: it set its own
            segments.mark = mark
        for callback in self.fsync_observers:
            callback(time.perf_counter() - t0)

    # -- answers ---------------------------------------------------------------

    def _answer(self, written: list[tuple[_Batch, list[Entry]]]) -> None:
        """Tell each durable append's caller, in log order.

        With ``always``, many callers are woken in two halves, the second a
        step later: the writer then gets to write what the first half appends
        next while the second half is still to come, so the next fsync starts
        without waiting for all of them, and group commits settle into two
        that take turns, one on the disk while the other's callers run."""
        if len(written) >= _SPLIT_ANSWERS and self._fsync == "always":
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

    @staticmethod
    def _fail(batches: Sequence[_Batch], error: BaseException) -> None:
        for batch in batches:
            if not batch.future.done():
                batch.future.set_exception(error)
            if not batch.future.cancelled():
                # A shielded future whose waiter left still has its exception read.
                batch.future.exception()
