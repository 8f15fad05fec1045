"""Batch records (segment format 2): a group commit is one record, torn or
damaged as a whole, and logs written one record per entry (format 1, by
main before batches) replay unchanged."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from forum.node.core.entries import Entry, EntryId, Properties, Take, Write
from forum.node.core.errors import StrandCorrupt
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage import segment
from forum.node.storage.strand import Strand, StrandConfig
from tests.node.images import crash_image

FIXTURE = Path(__file__).parent / "fixtures" / "strand-v1"
ALL = Pattern(b"")


def _records(path: Path) -> list[int]:
    """The offsets of the records (frames) of a segment, by their lengths alone."""
    data = path.read_bytes()
    offsets, at = [], segment.HEADER.size
    while at < len(data):
        offsets.append(at)
        length, _ = segment.FRAME.unpack_from(data, at)
        at += segment.FRAME.size + length
    return offsets


def _version(path: Path) -> int:
    return int(segment.HEADER.unpack_from(path.read_bytes(), 0)[1])


async def _open(cfg: StrandConfig) -> Forum:
    return Forum(await Strand.open(cfg), remote_delay=0)


async def test_a_format_1_log_replays_unchanged_and_appends_go_on_in_format_2(
    tmp_path: Path,
) -> None:
    storage = tmp_path / "strand"
    shutil.copytree(FIXTURE, storage)
    assert {_version(p) for p in storage.glob("*.strand")} == {1}
    cfg = StrandConfig().with_storage(storage).with_node_name("new").with_segment_bytes(4096)
    expected = [b"v1/%02d/" % i + b"." * 40 for i in range(60) if i % 4] + [
        b"v1/peer/1",
        b"v1/peer/2",
    ]
    forum = await _open(cfg)
    origin = forum.strand.origin
    assert origin == "old-37ea732f"  # the directory's, from its ORIGIN file
    assert [t.payload for t in forum.list(ALL, limit=1000).tuples] == expected
    # Entries in format 1 records are served on as before.
    old = await forum.strand.read_range(origin, 0, 1000)
    assert len(old) == 75 and old[0] == Write(EntryId(origin, 1), b"v1/00/" + b"." * 40)
    assert old[60] == Take(EntryId(origin, 61), EntryId(origin, 1))
    assert await forum.strand.read_range("peer-1", 0, 10) == [
        Write(EntryId("peer-1", 1), b"v1/peer/1"),
        Write(EntryId("peer-1", 2), b"v1/peer/2"),
    ]
    assert await forum.write(b"v2/new") == EntryId(origin, 76)
    await forum.close()
    # The old last segment was sealed; the append went into a new one, of format 2.
    paths = sorted(storage.glob("*.strand"))
    assert [_version(p) for p in paths] == [1, 1, 2]

    forum = await _open(cfg)
    assert [t.payload for t in forum.list(ALL, limit=1000).tuples] == [*expected, b"v2/new"]
    # Compaction rewrites the old segments in the new format; the live set holds.
    await forum.compact(seal=True)
    await forum.close()
    forum = await _open(cfg)
    assert [t.payload for t in forum.list(ALL, limit=1000).tuples] == [*expected, b"v2/new"]
    assert (await forum.strand.read_range(origin, 75, 10))[0] == Write(
        EntryId(origin, 76), b"v2/new"
    )
    await forum.close()
    assert {_version(p) for p in storage.glob("*.strand")} == {2}


async def test_concurrent_appends_share_one_record(cfg: StrandConfig) -> None:
    async with await _open(cfg) as forum:
        ids = await asyncio.gather(*(forum.write(b"c/%d" % i) for i in range(64)))
    assert sorted(i.seq for i in ids) == list(range(1, 65))
    (path,) = cfg.storage.glob("*.strand")
    assert len(_records(path)) < 64  # one frame and checksum per group commit, not per entry
    async with await _open(cfg) as forum:
        assert await forum.count(ALL) == 64


async def test_a_group_commits_appends_with_one_callback_and_props_are_told_in_one_call(
    cfg: StrandConfig,
) -> None:
    """Appends queued together are one group commit: those next to each
    other with the same ``then`` and Properties object are told in one call
    (in log order), each row apart; a callback that fails is logged and the
    appends are answered all the same."""
    told: list[list[int]] = []

    def then(writes: list[Entry]) -> None:
        told.append([w.id.seq for w in writes])

    def fails(writes: list[Entry]) -> None:
        raise RuntimeError("a bug in a callback")

    ttl = Properties(expires=1)
    async with await Strand.open(cfg) as strand:
        futures = [
            strand.submit_writes((b"a",), then),
            strand.submit_writes((b"b", b"c"), then),
            strand.submit_writes((b"d",), then, ttl),
            strand.submit_writes((b"e",), then, ttl),
            strand.submit_writes((b"f",), then, Properties(*ttl)),  # equal, not the same
            strand.submit_writes((b"g",), fails),
            strand.submit_writes((b"h",), then),
        ]
        answers = await asyncio.gather(*futures)
    assert told == [[1, 2, 3], [4, 5], [6], [8]]
    assert [[w.id.seq for w in a] for a in answers] == [[1], [2, 3], [4], [5], [6], [7], [8]]


async def test_a_torn_batch_loses_all_its_entries_and_no_other(
    cfg: StrandConfig, tmp_path: Path
) -> None:
    async with await _open(cfg.with_checkpoint_interval(3600)) as forum:
        await forum.write(b"kept")
        await forum.write_many([b"torn/1", b"torn/2", b"torn/3"])  # one record
        # The power goes now (no checkpoint covers the records yet).
        cfg = cfg.with_storage(crash_image(cfg.storage, tmp_path / "crashed"))
    (path,) = cfg.storage.glob("*.strand")
    _, second = _records(path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 3)  # the power went mid-record
    async with await _open(cfg) as forum:
        assert [t.payload for t in forum.list(ALL).tuples] == [b"kept"]
        assert forum.stats().tails_cut == 1
        assert path.stat().st_size == second  # cut where the torn record began
        # None of its ids was acknowledged: they are handed out again.
        assert await forum.write(b"after") == EntryId(forum.strand.origin, 2)
    async with await _open(cfg) as forum:
        assert [t.payload for t in forum.list(ALL).tuples] == [b"kept", b"after"]


async def test_a_damaged_batch_before_the_tail_refuses_to_open(cfg: StrandConfig) -> None:
    async with await _open(cfg) as forum:
        await forum.write_many([b"one/1", b"one/2"])
        await forum.write_many([b"two/1", b"two/2"])
        await forum.write_many([b"three/1", b"three/2"])
    (path,) = cfg.storage.glob("*.strand")
    middle = _records(path)[1]
    data = bytearray(path.read_bytes())
    data[middle + segment.FRAME.size + segment.ENTRY.size + 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StrandCorrupt) as err:
        await Strand.open(cfg)
    assert err.value.offset == middle
    assert path.read_bytes() == bytes(data)  # nothing was cut


async def test_an_entry_damaged_after_the_open_is_not_served(cfg: StrandConfig) -> None:
    async with await _open(cfg) as forum:
        await forum.write_many([b"a/1", b"a/2", b"a/3"])
        (path,) = cfg.storage.glob("*.strand")
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF  # the last entry's payload, under the batch's checksum
        path.write_bytes(bytes(data))
        with pytest.raises(StrandCorrupt, match="re-read"):
            await forum.strand.read_range(forum.strand.origin, 0, 10)


async def test_no_write_is_answered_before_an_fsync_that_began_after_it(
    cfg: StrandConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fsyncs of ``always`` are pipelined; the answers still wait for them::

        t0  the writer writes group 1 to the OS; fsync 1 starts
        t1  group 2 is written to the OS while fsync 1 runs
        t2  fsync 1 ends; fsync 2 starts at once; group 1 is answered
        t3  fsync 2 ends; group 2 is answered

    Each answer comes after an fsync that began once the write's bytes were
    in the file (here: the file size when the last fsync to end began)."""
    covered = 0
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        nonlocal covered
        size = os.fstat(fd).st_size
        real(fd)
        covered = max(covered, size)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    async with await _open(cfg) as forum:
        fsyncs: list[float] = []
        forum.strand.add_fsync_observer(fsyncs.append)

        async def writer(i: int) -> None:
            for j in range(20):
                payload = b"d/%d/%d" % (i, j)
                entry_id = await forum.write(payload)
                position = forum.strand.position(entry_id)
                assert position is not None
                offset = position & ((1 << 40) - 1)
                assert covered >= offset + segment.ENTRY.size + len(payload)

        await asyncio.gather(*(writer(i) for i in range(64)))
        assert len(fsyncs) < 64 * 20  # shared: group commits
