"""``Strand.replace`` and ``Forum.replace``: an origin's entry put in place of
a copy that differs (replication's divergence healing). The old record is
gone from the files, so replay gives the new one, wherever the old one lay:
a sealed segment, the current one, or among the survivors below the floor."""

from __future__ import annotations

import time
from pathlib import Path

from forum.node.core.entries import EntryId, Properties, Take, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import eventually

ALL = Pattern(b"")


def config(tmp_path: Path) -> StrandConfig:
    return StrandConfig().with_storage(tmp_path).with_node_name("n").with_fsync("never")


async def stored(strand: Strand, entry_id: EntryId) -> list[Write | Take]:
    return (await strand.read_page(entry_id.origin, entry_id.seq - 1, 1)).entries


async def test_a_replaced_entry_is_the_one_replayed_from_sealed_or_current_segments(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path).with_segment_bytes(4096)
    remote = [Write(EntryId("peer-1", seq), b"copy-%d" % seq + b"." * 200) for seq in (1, 2, 3)]
    strand = await Strand.open(cfg)
    await strand.append_remote(remote[:2])
    for _ in range(30):  # seal the first segment under local writes
        await strand.append_writes([b"x" * 200])
    await strand.append_remote(remote[2:])  # in the current segment
    entries, vector = strand.stats().entries, strand.vector()
    real = [Write(EntryId("peer-1", seq), b"real-%d" % seq) for seq in (1, 3)]
    assert await strand.replace(real) == real
    assert await strand.replace([Write(EntryId("peer-1", 9), b"not held")]) == []
    assert strand.stats().entries == entries and strand.vector() == vector
    await strand.close()

    strand = await Strand.open(cfg)
    assert await stored(strand, EntryId("peer-1", 1)) == [real[0]]
    assert await stored(strand, EntryId("peer-1", 2)) == [remote[1]]
    assert await stored(strand, EntryId("peer-1", 3)) == [real[1]]
    assert strand.stats().entries == entries and strand.vector() == vector
    await strand.close()


async def test_a_survivor_below_the_floor_is_replaced_and_stays_a_survivor(
    tmp_path: Path,
) -> None:
    """A live tuple below the compaction floor (its neighbours taken and
    dropped) replaced: still held, with the new bytes, after a restart."""
    cfg = config(tmp_path)
    async with Forum(await Strand.open(cfg), remote_delay=0) as forum:
        await forum.apply([Write(EntryId("peer-1", seq), b"job-%d" % seq) for seq in (1, 2, 3)])
        assert await forum.take(Pattern(b"job-1")) == b"job-1"
        assert await forum.take(Pattern(b"job-3")) == b"job-3"
        assert (await forum.compact(seal=True)).entries_dropped == 4
        assert forum.strand.floors()["peer-1"] == 3
        held = Write(EntryId("peer-1", 2), b"job-2")
        real = Write(EntryId("peer-1", 2), b"job-2-real")
        assert await forum.replace([(held, real)]) == [real]
        assert await forum.read(ALL) == b"job-2-real"
    async with Forum(await Strand.open(cfg), remote_delay=0) as forum:
        assert await forum.read(ALL) == b"job-2-real"
        assert EntryId("peer-1", 2) in forum.strand


async def test_replacing_a_taken_write_brings_nothing_back(tmp_path: Path) -> None:
    async with Forum(await Strand.open(config(tmp_path)), remote_delay=0) as forum:
        held = Write(EntryId("peer-1", 1), b"job-forged")
        await forum.apply([held])
        assert await forum.take(ALL) == b"job-forged"
        real = Write(EntryId("peer-1", 1), b"job-real")
        assert await forum.replace([(held, real)]) == [real]
        assert await forum.read(ALL) is None
        assert await stored(forum.strand, real.id) == [real]


async def test_a_live_write_replaced_keeps_none_of_the_held_copys_properties(
    tmp_path: Path,
) -> None:
    """A held copy with a short ttl, replaced by a plain Write: the tuple does
    not expire with the copy's ttl (a control tuple with the same ttl does)."""
    async with Forum(await Strand.open(config(tmp_path)), remote_delay=0) as forum:
        expires = Properties(expires=int((time.time() + 0.3) * 1000))
        held = Write(EntryId("peer-1", 1), b"job-forged", expires)
        control = Write(EntryId("peer-1", 2), b"job-control", expires)
        await forum.apply([held, control])
        real = Write(EntryId("peer-1", 1), b"job-real")
        assert await forum.replace([(held, real)]) == [real]
        await eventually(lambda: forum.stats().expired >= 1, 5, "the control expired")
        assert forum.stats().expired == 1
        assert await forum.read(Pattern(b"job-")) == b"job-real"
