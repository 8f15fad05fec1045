"""A data directory that does not hold what it should is refused, or repaired.

Issue 27, first row: a sealed segment deleted, or the one holding 100 take
tombstones, or two cut exactly at a record boundary, or the last segment
emptied or deleted; then a restart. The node used to start without a word
and serve the wrong set (taken tuples handed out again, acknowledged ones
gone). Now the open is refused with one line naming the file and what is
wrong with it, and repair mode opens it, sets the damage aside and says
what is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from forum.cli_args import EXIT_NODE
from forum.node.core.codec import decode_raw
from forum.node.core.entries import EntryId
from forum.node.core.errors import StrandError
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage import segment
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.cli import run_forum
from tests.node.images import record_starts

SEGMENT = 4096
PAD = b"." * 60
V1_FIXTURE = Path(__file__).parent / "fixtures" / "strand-v1"


def _segments(directory: Path) -> list[Path]:
    return [segment.segment_path(directory, n) for n in segment.segment_numbers(directory)]


def _takes_in(path: Path) -> int:
    scan = segment.read_segment(path, int(path.name.partition(".")[0]), last=True)
    return sum(1 for _, body in scan.records if type(decode_raw(body)[2]) is str)


class History:
    """200 writes over sealed segments, 100 of them taken in one batch, 60 more."""

    def __init__(self, cfg: StrandConfig) -> None:
        self.cfg = cfg
        self.live: set[bytes] = set()
        self.taken: set[bytes] = set()
        self.origin = ""
        self.last_seq = 0

    async def make(self) -> History:
        async with Forum(await Strand.open(self.cfg), remote_delay=0) as forum:
            for i in range(0, 200, 10):
                await forum.write_many([b"job/%03d/" % n + PAD for n in range(i, i + 10)])
            taken = await forum.take_many(Pattern(b"job/"), 100)
            for i in range(200, 260, 10):
                await forum.write_many([b"job/%03d/" % n + PAD for n in range(i, i + 10)])
            self.taken = {t.payload for t in taken}
            self.live = {t.payload for t in forum.list(Pattern(b""), limit=1000).tuples}
            self.origin = forum.strand.origin
            self.last_seq = forum.strand.vector()[self.origin]
        assert len(self.taken) == 100 and len(self.live) == 160 and self.last_seq == 360
        return self

    @property
    def takes_segment(self) -> Path:
        (path,) = [p for p in _segments(self.cfg.storage) if _takes_in(p) == 100]
        return path


def _delete_a_sealed_segment(history: History) -> str:
    _segments(history.cfg.storage)[1].unlink()
    return "missing: the MANIFEST lists a sealed segment"


def _delete_the_takes_segment(history: History) -> str:
    history.takes_segment.unlink()
    return "missing: the MANIFEST lists a sealed segment"


def _cut_two_at_a_record_boundary(history: History) -> str:
    for path in _segments(history.cfg.storage)[1:3]:
        os.truncate(path, record_starts(path)[-1])
    return "cut short"


def _empty_a_sealed_segment(history: History) -> str:
    os.truncate(_segments(history.cfg.storage)[2], 0)
    return "emptied: 0 of its"


def _empty_the_last_segment(history: History) -> str:
    os.truncate(_segments(history.cfg.storage)[-1], 0)
    return "emptied"


def _delete_the_last_segment(history: History) -> str:
    _segments(history.cfg.storage)[-1].unlink()
    return "missing: the MANIFEST names it as the current segment"


DAMAGE: list[Callable[[History], str]] = [
    _delete_a_sealed_segment,
    _delete_the_takes_segment,
    _cut_two_at_a_record_boundary,
    _empty_a_sealed_segment,
    _empty_the_last_segment,
    _delete_the_last_segment,
]


@pytest.fixture
def small(cfg: StrandConfig) -> StrandConfig:
    return cfg.with_segment_bytes(SEGMENT)


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
async def test_damage_is_refused_with_one_line_naming_the_file(
    small: StrandConfig, damage: Callable[[History], str]
) -> None:
    history = await History(small).make()
    segments = len(_segments(small.storage))
    before = {p.name: p.stat().st_size for p in _segments(small.storage)}
    what = damage(history)
    with pytest.raises(StrandError) as err:
        await Strand.open(small)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(str(small.storage / "0000000")), line
    assert what in line, line
    # Nothing was changed by the refused open: no tail cut, nothing moved.
    assert {p.name for p in _segments(small.storage)} <= set(before)
    assert segments >= len(_segments(small.storage))
    assert not (small.storage / "damaged").exists()


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
async def test_repair_mode_opens_sets_the_damage_aside_and_says_what_is_missing(
    small: StrandConfig, damage: Callable[[History], str]
) -> None:
    history = await History(small).make()
    what = damage(history)
    async with Forum(await Strand.open(small.with_repair()), remote_delay=0) as forum:
        strand = forum.strand
        found = strand.damage
        assert found is not None
        assert what in found.description and "\n" not in found.description
        assert found.own_seq_floor == history.last_seq == strand.own_seq_floor
        for path in found.set_aside:
            assert path.parent == found.damaged_dir and path.exists()
        assert found.damaged_dir is None or found.damaged_dir.parent == small.storage / "damaged"
        missing = strand.missing_own()
        assert missing, "a lost file held own seqs"
        lost = {seq for first, last in missing for seq in range(first, last + 1)}
        held = {s for s in range(1, 1000) if EntryId(strand.origin, s) in strand}
        assert lost.isdisjoint(held) and lost | held >= set(range(1, history.last_seq + 1))
        live = {t.payload for t in forum.list(Pattern(b""), limit=1000).tuples}
        assert live <= history.live | history.taken
    # Set aside, and written down: the next open (repair or not) finds it
    # whole, and still knows what is missing.
    async with Forum(await Strand.open(small), remote_delay=0) as forum:
        assert forum.strand.damage is None
        assert forum.strand.missing_own() == missing
        # No own seq is issued twice: the next write comes after every one issued.
        assert (await forum.write(b"after")).seq == history.last_seq + 1


async def test_a_cut_segment_keeps_its_good_records_and_a_copy_is_set_aside(
    small: StrandConfig,
) -> None:
    history = await History(small).make()
    path = _segments(small.storage)[2]
    original = path.read_bytes()
    starts = record_starts(path)
    os.truncate(path, starts[-1] + 5)  # mid-record: its last record is torn, the rest good
    async with await Strand.open(small.with_repair()) as strand:
        assert strand.damage is not None
        (copy,) = strand.damage.set_aside
        assert copy.read_bytes() == original[: starts[-1] + 5]
        assert path.read_bytes() == original[: starts[-1]]
        assert strand.stats().tails_cut == 0
    assert history.live


async def test_a_deleted_manifest_is_refused_when_the_segments_name_one(
    small: StrandConfig,
) -> None:
    history = await History(small).make()
    (small.storage / "MANIFEST").unlink()
    with pytest.raises(StrandError, match="MANIFEST: missing, but the segments say"):
        await Strand.open(small)
    async with Forum(await Strand.open(small.with_repair()), remote_delay=0) as forum:
        assert forum.strand.damage is not None
        assert forum.strand.missing_own() == []
        live = {t.payload for t in forum.list(Pattern(b""), limit=1000).tuples}
        assert live == history.live


async def test_a_damaged_manifest_is_refused(small: StrandConfig) -> None:
    await History(small).make()
    manifest = small.storage / "MANIFEST"
    data = bytearray(manifest.read_bytes())
    data[5] ^= 0xFF
    manifest.write_bytes(bytes(data))
    with pytest.raises(StrandError, match="MANIFEST: the MANIFEST file does not check out"):
        await Strand.open(small)
    async with await Strand.open(small.with_repair()) as strand:
        assert strand.damage is not None
        (moved,) = strand.damage.set_aside
        assert moved.read_bytes() == bytes(data)


async def test_compaction_then_restart_opens_and_damage_after_it_is_still_found(
    small: StrandConfig,
) -> None:
    history = await History(small).make()
    async with Forum(await Strand.open(small), remote_delay=0) as forum:
        before = len(_segments(small.storage))
        taken = {t.payload for t in await forum.take_many(Pattern(b"job/15"), 10)}
        report = await forum.compact(forum.strand.vector(), seal=True)
        # Segments removed whole, and one rewritten without the ten.
        assert report.segments_removed and report.segments_rewritten > report.segments_removed
        assert len(_segments(small.storage)) < before
    async with Forum(await Strand.open(small), remote_delay=0) as forum:
        live = {t.payload for t in forum.list(Pattern(b""), limit=1000).tuples}
        assert live == history.live - taken
    _segments(small.storage)[0].unlink()
    with pytest.raises(StrandError, match="missing"):
        await Strand.open(small)


async def test_a_directory_from_before_manifests_opens_once_trusted_and_is_checked_after(
    small: StrandConfig, tmp_path: Path
) -> None:
    old = small.with_storage(tmp_path / "v1")
    shutil.copytree(V1_FIXTURE, old.storage)
    async with Forum(await Strand.open(old), remote_delay=0) as forum:
        assert await forum.count(Pattern(b"v1/")) == 47
    assert (old.storage / "MANIFEST").exists()
    _segments(old.storage)[0].unlink()
    with pytest.raises(StrandError, match=r"00000001\.strand: missing"):
        await Strand.open(old)


async def test_a_crash_between_a_new_segment_and_its_manifest_opens(
    small: StrandConfig,
) -> None:
    """t0 the roll makes segment N+1 (header fsynced)  t1 the process dies
    before the MANIFEST names it: the next open goes on in N+1."""
    history = await History(small).make()
    last = segment.segment_numbers(small.storage)[-1]
    segment.segment_path(small.storage, last + 1).write_bytes(segment.header(last + 1))
    async with Forum(await Strand.open(small), remote_delay=0) as forum:
        assert {t.payload for t in forum.list(Pattern(b""), limit=1000).tuples} == history.live
        await forum.write(b"after")
    assert segment.segment_numbers(small.storage)[-1] == last + 1
    async with Forum(await Strand.open(small), remote_delay=0) as forum:
        assert await forum.count(Pattern(b"after")) == 1


async def test_a_segment_from_elsewhere_is_refused(small: StrandConfig) -> None:
    await History(small).make()
    last = segment.segment_numbers(small.storage)[-1]
    stray = segment.segment_path(small.storage, last + 5)
    stray.write_bytes(segment.header(last + 5))
    with pytest.raises(StrandError, match="a segment the MANIFEST does not name"):
        await Strand.open(small)


@pytest.mark.parametrize("damage", [_delete_the_takes_segment, _empty_the_last_segment])
async def test_forum_serve_refuses_a_damaged_directory_with_one_line(
    small: StrandConfig, damage: Callable[[History], str]
) -> None:
    history = await History(small).make()
    what = damage(history)
    code, out, err = await run_forum(
        "serve", "--data-dir", str(small.storage), "--listen", "127.0.0.1:0",
        "--segment-bytes", str(SEGMENT), "--max-payload", "1000",
    )  # fmt: skip
    assert "Traceback" not in err, err
    assert code == EXIT_NODE
    assert "listening" not in out
    (line,) = err.splitlines()
    assert line.startswith(f"forum serve: {small.storage}/0000000"), line
    assert what in line, line


async def test_a_batch_format_directory_from_before_manifests_is_trusted_once(
    small: StrandConfig,
) -> None:
    """Segments of format 2 with the header's flags field 0 (as written
    before MANIFESTs) and no MANIFEST: opened as they are, and from then on
    the current segment is flagged, so a MANIFEST deleted later is found."""
    history = await History(small).make()
    (small.storage / "MANIFEST").unlink()
    for path in _segments(small.storage):
        with open(path, "r+b") as f:
            f.seek(segment.FLAGS_AT)
            f.write(segment.FLAGS.pack(0))
    async with Forum(await Strand.open(small), remote_delay=0) as forum:
        assert forum.strand.damage is None
        assert {t.payload for t in forum.list(Pattern(b""), limit=1000).tuples} == history.live
    last = _segments(small.storage)[-1]
    flags = segment.HEADER.unpack_from(last.read_bytes())[2]
    assert flags == segment.MANIFESTED
    (small.storage / "MANIFEST").unlink()
    with pytest.raises(StrandError, match="MANIFEST: missing"):
        await Strand.open(small)
