"""Compaction driven over an open Strand: its passes, ``replace``'s
rewrites, and the floors peers' dropped ranges raise.

The rules (what may be dropped, the ``HORIZON`` file, how one segment is
rewritten crash-safely) are in :mod:`forum.node.storage.compaction`; this
module runs them against the Strand's live state: a pass surveys the sealed
segments in a thread, asks the caller which tuples are live, raises the
floors durably, and rewrites each segment with something to drop, oldest
first, moving the survivors' positions in the index
(:mod:`forum.node.storage.segments`). One pass, ``replace`` or floor change
runs at a time.

Segments are read in threads at positions taken on the loop, and a rewrite
renames a new file over a segment: the :class:`Gate` keeps the two apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import (
    AsyncIterator,
    Collection,
    Container,
    Mapping,
    Sequence,
)

from forum.node.core.entries import Entry
from forum.node.core.errors import StrandError
from forum.node.core.reports import CompactionReport
from forum.node.storage import compaction
from forum.node.storage.manifest import Manifest
from forum.node.storage.origin_log import OFFSET_BITS, OriginLog
from forum.node.storage.segments import Segments
from forum.node.storage.writer import Writer


class Gate:
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


class Compaction:
    """Rewrites the sealed segments of one open Strand (see the module docstring)."""

    def __init__(self, segments: Segments, writer: Writer) -> None:
        self._segments = segments
        self._logs = segments.logs
        self._dir = segments.directory
        self._writer = writer
        self.gate = Gate()
        self._lock = asyncio.Lock()
        self._swaps: set[asyncio.Future[compaction.Rewritten]] = set()
        #: Passes run, bytes the rewrites gave back, entries they dropped.
        self.passes = 0
        self.bytes_reclaimed = 0
        self.entries_dropped = 0

    async def finish_swaps(self) -> None:
        """Wait for the swaps under way (the Strand is closing: a pass stops
        at its next segment)."""
        while self._swaps:
            await asyncio.wait(list(self._swaps))

    async def run(
        self, horizon: Mapping[str, int], live: compaction.Live, seal: bool
    ) -> CompactionReport:
        """One pass: see ``Strand.compact``."""
        segments, logs = self._segments, self._logs
        async with self._lock:
            if segments.closed:
                raise StrandError("the Strand is closed")
            started = time.perf_counter()
            if seal:
                await self._writer.seal()
            bytes_before = segments.sealed_bytes + segments.size
            # Never above what is held here: the floor promises every seq up to it.
            stable = {
                origin: min(seq, logs[origin].contiguous)
                for origin, seq in horizon.items()
                if origin in logs and seq > 0
            }
            current = segments.number
            try:
                # Listing the directory is I/O too: in the thread, with the reads.
                now_ms = int(time.time() * 1000)
                found = await asyncio.to_thread(
                    compaction.survey, self._dir, lambda n: n < current, stable, now_ms
                )
                alive = await live()
                writes = self._doomed(found, alive)
                floors = {o: max(logs[o].base, seq) for o, seq in stable.items()}
                raised = floors != {o: logs[o].base for o in floors}
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
                            logs[origin].raise_base(floor)
                if rewritten and not segments.closed:  # what was rewritten is in place
                    await asyncio.to_thread(segments.save_manifest, Manifest.settled)
            except OSError as exc:
                raise StrandError(f"compaction failed: {exc}") from exc
            self.passes += 1
            # Only the Strand's size: appends go on during a pass, so it may
            # have grown. What the pass gave back is counted by each rewrite.
            bytes_after = segments.sealed_bytes + segments.size
            self.entries_dropped += dropped
            return CompactionReport(
                bytes_before=bytes_before,
                bytes_after=bytes_after,
                entries_dropped=dropped,
                segments_rewritten=rewritten,
                segments_removed=removed,
                floors=segments.floors(),
                seconds=time.perf_counter() - started,
            )

    async def mark_dead(self, origin: str, ranges: Sequence[tuple[int, int]]) -> None:
        """See ``Strand.mark_dead``."""
        origin_log = self._logs.get(origin)
        if origin_log is None:
            origin_log = self._logs[origin] = OriginLog()
        base = origin_log.base
        for first, last in ranges:
            origin_log.mark_dead(first, last)
        if origin_log.contiguous > base:
            async with self._lock:
                floors = self._floors({origin: origin_log.contiguous})
                try:
                    await asyncio.to_thread(compaction.write_floors, self._dir, floors)
                except OSError as exc:
                    raise StrandError(f"cannot record dropped entries: {exc}") from exc
                origin_log.raise_base(floors[origin])

    async def replace(self, entries: Sequence[Entry]) -> list[Entry]:
        """See ``Strand.replace``."""
        async with self._lock:
            where = {}
            for entry in entries:
                origin_log = self._logs.get(entry.id.origin)
                position = None if origin_log is None else origin_log.get(entry.id.seq)
                if position is not None:
                    where[entry.id] = (entry, position)
            if not where:
                return []
            current = self._segments.number
            if any(position >> OFFSET_BITS == current for _, position in where.values()):
                await self._writer.seal()
            by_segment: dict[int, set[compaction.Key]] = {}
            for entry_id, (_, position) in where.items():
                keys = by_segment.setdefault(position >> OFFSET_BITS, set())
                keys.add((entry_id.origin, entry_id.seq))
            try:
                for number, keys in sorted(by_segment.items()):
                    await self._rewrite(number, keys)
            except OSError as exc:
                raise StrandError(f"cannot replace entries: {exc}") from exc
            for entry_id in where:
                self._logs[entry_id.origin].forget(entry_id.seq)
            held = [entry for entry, _ in where.values()]
            await asyncio.shield(self._writer.submit(remote=held))
        return held

    def _floors(self, raised: Mapping[str, int]) -> dict[str, int]:
        """Every origin's floor, with ``raised`` in."""
        return {**self._segments.floors(), **raised}

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
            if self._segments.closed:
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
        its own (the Strand's ``close()`` waits for it)."""
        swap = asyncio.ensure_future(self._swap(number, drop))
        self._swaps.add(swap)
        swap.add_done_callback(self._swaps.discard)
        return await asyncio.shield(swap)

    async def _swap(self, number: int, drop: Container[compaction.Key]) -> compaction.Rewritten:
        segments = self._segments
        async with self.gate.swapping():
            result = await asyncio.to_thread(self._rewrite_segment, number, drop)
            base = number << OFFSET_BITS
            for origin, seqs, offsets in result.survivors.columns():
                origin_log = self._logs[origin]
                for seq, offset in zip(seqs, offsets, strict=True):
                    origin_log.move(seq, base | offset)
            for origin, seqs, _ in result.dropped.columns():
                origin_log = self._logs[origin]
                for seq in seqs:
                    origin_log.drop(seq)
        segments.entries -= len(result.dropped)
        segments.sealed_bytes -= result.bytes_before - result.bytes_after
        # The segment's own shrinking, never the Strand's size before and
        # after a pass: appends made meanwhile would count against it. Never
        # below 0 either, as the counter it is: a version 1 segment rewritten
        # in batches may grow by a frame per batch (forum.node.storage.segment).
        self.bytes_reclaimed += max(0, result.bytes_before - result.bytes_after)
        if result.bytes_after == 0:
            segments.count -= 1
        return result

    def _rewrite_segment(
        self, number: int, drop: Container[compaction.Key]
    ) -> compaction.Rewritten:
        """Rewrite one sealed segment (blocking), the MANIFEST told first
        that the new file is whole too, and then that it is the one."""
        segments = self._segments

        def accept(length: int, entries: int) -> None:
            segments.save_manifest(lambda m: m.rewriting(number, length, entries))

        result = compaction.rewrite(self._dir, number, drop, accept)
        # Written with the next change (or the pass's end).
        segments.rewritten(number, result.bytes_after, len(result.survivors))
        return result
