"""The MANIFEST while the Strand runs: checkpoints, rolls, compaction's floors, faults."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from forum.node.core.entries import Write
from forum.node.core.errors import StrandError
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage import segment
from forum.node.storage import segments as segments_module
from forum.node.storage.compaction import read_floors
from forum.node.storage.manifest import Manifest, read_manifest
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.tmpfs import fill
from tests.node.images import crash_image, record_starts

SEGMENT = 4096
PAD = b"." * 60


async def _eventually(predicate: Callable[[], bool], deadline: float = 10.0) -> None:
    async with asyncio.timeout(deadline):
        while not predicate():
            await asyncio.sleep(0.01)


def _manifest(directory: Path) -> Manifest:
    found = read_manifest(directory)
    assert found is not None
    return found


def _last(directory: Path) -> Path:
    return segment.segment_path(directory, segment.segment_numbers(directory)[-1])


@pytest.mark.parametrize("policy", ["always", "interval"])
async def test_a_cut_of_the_current_segment_after_a_checkpoint_is_found_after_a_crash(
    cfg: StrandConfig, tmp_path: Path, policy: str
) -> None:
    """t0 appends acknowledged  t1 the checkpoint covers them  t2 the process
    dies  t3 the current segment loses its last records, cut at a record
    boundary: the open refuses it (before the MANIFEST, it opened short)."""
    cfg = cfg.with_fsync(policy).with_checkpoint_interval(0.02)  # type: ignore[arg-type]
    async with await Strand.open(cfg) as strand:
        for i in range(5):
            await strand.append_writes([b"w/%d" % i + PAD])
        size = _last(cfg.storage).stat().st_size
        await _eventually(lambda: _manifest(cfg.storage).checkpoint == size)
        crashed = cfg.with_storage(crash_image(cfg.storage, tmp_path / "crashed"))
    os.truncate(_last(crashed.storage), record_starts(_last(crashed.storage))[-2])
    with pytest.raises(StrandError, match=r"00000001\.strand: cut short: \d+ bytes are left of"):
        await Strand.open(crashed)


async def test_records_past_the_checkpoint_are_a_torn_tail_after_a_crash(
    cfg: StrandConfig, tmp_path: Path
) -> None:
    cfg = cfg.with_checkpoint_interval(3600)
    async with await Strand.open(cfg) as strand:
        await strand.append_writes([b"first"])
        checkpoint = _manifest(cfg.storage).checkpoint
        await strand.append_writes([b"second"])
        crashed = cfg.with_storage(crash_image(cfg.storage, tmp_path / "crashed"))
    assert _last(crashed.storage).stat().st_size > checkpoint
    os.truncate(_last(crashed.storage), _last(crashed.storage).stat().st_size - 3)
    async with await Strand.open(crashed) as strand:
        assert strand.stats().tails_cut == 1
        assert strand.vector()[strand.origin] == 1


async def test_each_roll_lists_the_sealed_segment_exactly(cfg: StrandConfig) -> None:
    cfg = cfg.with_segment_bytes(SEGMENT)
    async with await Strand.open(cfg) as strand:
        for i in range(60):
            await strand.append_writes([b"r/%d" % i + PAD])
        manifest = _manifest(cfg.storage)
        numbers = segment.segment_numbers(cfg.storage)
        assert manifest.active == numbers[-1] and sorted(manifest.sealed) == numbers[:-1]
        for number, sealed in manifest.sealed.items():
            path = segment.segment_path(cfg.storage, number)
            assert sealed.length == path.stat().st_size
            scan = segment.read_segment(path, number, last=False)
            assert sealed.entries == len(scan.records)
            assert set(sealed.ranges) == {strand.origin}
        # Every own seq in a sealed segment was durable when the MANIFEST was written.
        assert manifest.own >= max(s.ranges[strand.origin][1] for s in manifest.sealed.values())


async def test_a_failed_manifest_write_fails_the_roll_and_the_next_one_works(
    cfg: StrandConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = cfg.with_segment_bytes(SEGMENT)
    acked: set[bytes] = set()
    strand = await Strand.open(cfg)
    real = segments_module.write_manifest
    failing = True

    def write_manifest(directory: Path, manifest: Manifest) -> None:
        if failing and manifest.active != _manifest(directory).active:  # a roll's
            raise OSError(errno.ENOSPC, "No space left on device")
        real(directory, manifest)

    monkeypatch.setattr(segments_module, "write_manifest", write_manifest)
    refused = 0
    for i in range(80):
        try:
            await strand.append_writes([b"m/%d" % i + PAD])
            acked.add(b"m/%d" % i + PAD)
        except StrandError:
            refused += 1
        if refused == 3:
            failing = False
    assert refused == 3 and strand.broken is None
    assert len(segment.segment_numbers(cfg.storage)) > 1
    await strand.close()
    async with Forum(await Strand.open(cfg)) as forum:
        assert {t.payload for t in forum.list(Pattern(b""), limit=100).tuples} == acked


async def test_a_manifest_renamed_but_not_durable_breaks_the_strand_and_reopens_whole(
    cfg: StrandConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The roll's MANIFEST is renamed in, its directory's fsync fails: the
    file may be on disk or not, so nothing more is appended until a reopen,
    which finds the directory as whichever MANIFEST is there says."""
    cfg = cfg.with_segment_bytes(SEGMENT)
    strand = await Strand.open(cfg)
    real = segments_module.write_manifest
    acked: set[bytes] = set()

    def write_manifest(directory: Path, manifest: Manifest) -> None:
        rolling = manifest.active != _manifest(directory).active
        real(directory, manifest)
        if rolling:
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(segments_module, "write_manifest", write_manifest)
    for i in range(60):
        try:
            await strand.append_writes([b"b/%d" % i + PAD])
        except StrandError:
            break
        acked.add(b"b/%d" % i + PAD)
    assert strand.broken is not None and "MANIFEST" in strand.broken
    await strand.close()
    monkeypatch.undo()
    async with Forum(await Strand.open(cfg)) as forum:
        assert {t.payload for t in forum.list(Pattern(b""), limit=100).tuples} == acked
        await forum.write(b"after")


async def test_repair_lowers_the_floor_over_a_lost_survivor_so_a_peer_copy_comes_in(
    cfg: StrandConfig,
) -> None:
    """After compaction the floor says every seq up to it is here or dead; a
    lost segment makes that false. Repair mode lowers it below what the lost
    segment held: its survivors are absent again, and a peer's copy is taken in."""
    cfg = cfg.with_segment_bytes(SEGMENT)
    async with Forum(await Strand.open(cfg), remote_delay=0) as forum:
        for i in range(0, 120, 10):
            await forum.write_many([b"s/%03d/" % n + PAD for n in range(i, i + 10)])
        for n in range(0, 120, 2):
            await forum.take(Pattern(b"s/%03d/" % n))
        await forum.compact(forum.strand.vector(), seal=True)
        origin = forum.strand.origin
        floor = read_floors(cfg.storage)[origin]
        survivors = {t.id: t.payload for t in forum.list(Pattern(b""), limit=1000).tuples}
    first = segment.segment_numbers(cfg.storage)[0]
    lost_path = segment.segment_path(cfg.storage, first)
    scan = segment.read_segment(lost_path, first, last=False)
    lost_path.unlink()
    async with Forum(await Strand.open(cfg.with_repair()), remote_delay=0) as forum:
        strand = forum.strand
        lost = {i for i in survivors if i not in strand}
        assert len(lost) == len(scan.records) > 0
        assert read_floors(cfg.storage).get(origin, 0) < min(i.seq for i in lost) <= floor
        back = min(lost)
        await forum.apply([Write(back, survivors[back])])
        assert back in strand and await forum.count(Pattern(survivors[back])) == 1
        missing = {s for first, last in strand.missing_own() for s in range(first, last + 1)}
        assert back.seq not in missing and {i.seq for i in lost - {back}} <= missing


async def test_a_failing_checkpoint_is_said_once_and_its_recovery_once(
    cfg: StrandConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="forum.node.storage.strand")
    cfg = cfg.with_checkpoint_interval(0.01)
    real = segments_module.write_manifest
    calls = 0

    def full(directory: Path, manifest: Manifest) -> None:
        nonlocal calls
        calls += 1
        raise OSError(errno.ENOSPC, "No space left on device")

    async with await Strand.open(cfg) as strand:
        monkeypatch.setattr(segments_module, "write_manifest", full)
        for i in range(5):
            await strand.append_writes([b"c/%d" % i])
            await _eventually(lambda n=calls: calls > n)  # type: ignore[misc]
        monkeypatch.setattr(segments_module, "write_manifest", real)
        await _eventually(lambda: "checkpoints are written to the MANIFEST again" in caplog.text)
        assert _manifest(cfg.storage).checkpoint == _last(cfg.storage).stat().st_size
    warnings = [r for r in caplog.records if "cannot write a checkpoint" in r.getMessage()]
    assert len(warnings) == 1 and "No space left" in warnings[0].getMessage()


async def test_a_full_disk_at_close_leaves_the_last_checkpoint_and_loses_nothing(
    tmpfs: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    cfg = StrandConfig(storage=tmpfs("256k") / "s").with_node_name("close")
    cfg = cfg.with_checkpoint_interval(3600)
    strand = await Strand.open(cfg)
    acked = [w.payload for w in await strand.append_writes([b"a", b"b"])]
    filler = fill(cfg.storage.parent)
    await strand.close()  # not an error: what was written is durable
    assert "cannot write the MANIFEST on close" in caplog.text
    filler.unlink()
    async with Forum(await Strand.open(cfg)) as forum:
        assert [t.payload for t in forum.list(Pattern(b"")).tuples] == acked
