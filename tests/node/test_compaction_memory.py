"""Memory follows the backlog: what compaction passes leave behind is bounded.

Counted, not timed: the bytes Python holds, by the file that allocated them
(``tracemalloc``), and the objects the collector tracks, after cycles of
churn (writes, all taken) and a compaction pass each. The RSS the allocator
keeps is the bench's (``bench/compaction_memory_bench.py``).
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from forum.node.core.space import Pattern
from forum.node.space.allocator import give_back
from forum.node.space.compactor import CompactionPolicy, Compactor
from forum.node.space.forum import Forum
from forum.node.storage.compaction import Key
from forum.node.storage.strand import Strand, StrandConfig

#: Writes (each then taken) per cycle: a pass drops twice as many entries.
PER_CYCLE = 10_000
CYCLES = 3
JOBS = Pattern(b"task/")


def held_by(snapshot: tracemalloc.Snapshot, module: str) -> int:
    """Bytes allocated by ``module`` (a path's end) and still held."""
    return sum(
        stat.size
        for stat in snapshot.statistics("filename")
        if stat.traceback[0].filename.endswith(module)
    )


async def churn(forum: Forum, start: int) -> None:
    for first in range(start, start + PER_CYCLE, 1000):
        await forum.write_many([b"task/%d" % n for n in range(first, first + 1000)])
        assert len(await forum.take_many(JOBS, 1000)) == 1000


@pytest.mark.slow
async def test_compaction_passes_leave_nothing_the_size_of_a_pass(cfg: StrandConfig) -> None:
    cfg = cfg.with_fsync("never")
    async with Forum(await Strand.open(cfg), remote_delay=0) as forum:
        compactor = Compactor(forum, CompactionPolicy(interval=0))
        tracemalloc.start()
        try:
            objects: list[int] = []
            for cycle in range(CYCLES):
                await churn(forum, cycle * PER_CYCLE)
                report = await compactor.compact_now()
                assert report.entries_dropped == 2 * PER_CYCLE
                gc.collect()
                objects.append(len(gc.get_objects()))
            snapshot = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        assert forum.strand.stats().entries == 0
    # The Strand's own maps hold the survivors' positions (none here), not
    # room for the last pass: each origin's map of those below the floor
    # kept a table for every entry of the pass (655 KB for 20,000) when the
    # floor was raised before the drops.
    assert held_by(snapshot, "node/forum/node/storage/strand.py") < 64 * 1024
    # And nothing grows with the cycles (a cycle's objects are gone by the next).
    assert max(objects[1:]) - min(objects[1:]) < 100, objects


async def _nothing_live() -> set[Key]:
    return set()


#: Writes (each then taken) before the pass below, and its segments' size.
DROPPED_WRITES = 20_000
SEGMENT_BYTES = 1024 * 1024


async def test_a_pass_holds_a_few_bytes_per_entry_it_drops(cfg: StrandConfig) -> None:
    """The peak of the Python memory one pass allocates, dropping 40,000
    entries (20,000 Writes of 150 bytes and their Takes, in 1 MiB segments):
    26.8 MB (670 bytes an entry) when the pass held each id as an
    ``(origin, seq)`` tuple in its sets and lists and each segment's
    entries as a tuple and a memoryview each; 3.6 MB now (ids in arrays of
    seqs, entries as offsets into the file's bytes), most of it two
    segments' bytes. The small objects of that peak were what the
    allocator's arenas kept after the pass (the node's RSS)."""
    cfg = cfg.with_fsync("never").with_segment_bytes(SEGMENT_BYTES)
    strand = await Strand.open(cfg)
    try:
        for first in range(0, DROPPED_WRITES, 1000):
            payloads = [b"task/%08d" % n + b"x" * 137 for n in range(first, first + 1000)]
            writes = await strand.append_writes(payloads)
            await strand.append_takes([write.id for write in writes])
        tracemalloc.start()
        try:
            report = await strand.compact(strand.vector(), _nothing_live, seal=True)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert report.entries_dropped == 2 * DROPPED_WRITES
        assert strand.stats().entries == 0
    finally:
        await strand.close()
    # A few segments' bytes, and some 40 bytes an entry (the arrays of ids).
    assert peak < 4 * SEGMENT_BYTES + 100 * report.entries_dropped, peak


def test_the_allocator_is_asked_to_give_memory_back() -> None:
    assert give_back()  # glibc, as on every machine the node is built for (Debian)
