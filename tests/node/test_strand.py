"""The Strand on disk: restart, origin, torn tails, corruption, serving entries on."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from forum.node.core.entries import EntryId, Take, Write
from forum.node.core.errors import StrandCorrupt, StrandDamaged, StrandError
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage import segment
from forum.node.storage.strand import Strand, StrandConfig
from tests.node.images import crash_image


def _segments(cfg: StrandConfig) -> list[Path]:
    return [segment.segment_path(cfg.storage, n) for n in segment.segment_numbers(cfg.storage)]


async def test_reopen_gives_the_same_live_set_in_the_same_order(cfg: StrandConfig) -> None:
    forum = Forum(await Strand.open(cfg))
    await forum.write_many([b"r/%d" % i for i in range(40)])
    for i in range(0, 40, 3):
        assert await forum.take(Pattern(b"r/%d" % i)) is not None
    before = forum.list(Pattern(b""), limit=1000).tuples
    origin = forum.strand.origin
    await forum.close()

    forum = Forum(await Strand.open(cfg))
    assert forum.strand.origin == origin
    assert forum.list(Pattern(b""), limit=1000).tuples == before
    # The origin's seq goes on after a restart: no id is ever reused.
    new_id = await forum.write(b"after")
    assert new_id == EntryId(origin, 40 + 14 + 1)
    await forum.close()


async def test_wiped_directory_gets_a_new_origin(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg)) as forum:
        first = forum.strand.origin
        await forum.write(b"x")
    for path in cfg.storage.iterdir():
        path.unlink()
    async with Forum(await Strand.open(cfg)) as forum:
        assert forum.strand.origin != first
        assert forum.strand.origin.startswith("test-")
        assert await forum.count(Pattern(b"")) == 0


async def test_segments_roll_and_replay_across_them(cfg: StrandConfig) -> None:
    cfg = cfg.with_segment_bytes(4096)
    async with Forum(await Strand.open(cfg)) as forum:
        for i in range(50):
            await forum.write_many([b"s/%d/" % i + b"." * 100] * 4)
        assert forum.stats().segments > 3
    assert len(_segments(cfg)) > 3
    async with Forum(await Strand.open(cfg)) as forum:
        assert await forum.count(Pattern(b"s/")) == 200
        entries = await forum.strand.read_range(forum.strand.origin, 0, 1000)
        assert [e.id.seq for e in entries] == list(range(1, 201))


async def test_torn_tail_is_cut_and_reported(
    cfg: StrandConfig, caplog: pytest.LogCaptureFixture
) -> None:
    async with Forum(await Strand.open(cfg)) as forum:
        await forum.write_many([b"a", b"b", b"c"])
    path = _segments(cfg)[-1]
    good_size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(segment.batch([b"\x93\x01\x00\xa1x"])[0][:7])  # a record cut short
    with caplog.at_level(logging.WARNING):
        forum = Forum(await Strand.open(cfg))
    assert "torn tail" in caplog.text
    assert forum.stats().tails_cut == 1
    assert path.stat().st_size == good_size
    assert await forum.count(Pattern(b"")) == 3
    await forum.write(b"d")  # appends go on after the cut
    await forum.close()
    async with Forum(await Strand.open(cfg)) as forum:
        assert await forum.count(Pattern(b"")) == 4
        assert forum.stats().tails_cut == 0


async def test_corrupt_last_record_is_a_tail_only_past_the_checkpoint(
    cfg: StrandConfig, tmp_path: Path
) -> None:
    """A whole record failing its checksum at the end: a torn tail if it lies
    past the MANIFEST's checkpoint (not known fsynced: a power loss may leave
    it garbage), corruption if the checkpoint covers it (a clean close)."""
    cfg = cfg.with_checkpoint_interval(3600)  # no checkpoint but the open's and the close's
    strand = await Strand.open(cfg)
    async with Forum(strand) as forum:
        for payload in (b"a", b"b", b"c"):  # one record each
            await forum.write(payload)
        crashed = crash_image(cfg.storage, tmp_path / "crashed")
    for directory in (crashed, cfg.storage):
        path = _segments(cfg.with_storage(directory))[-1]
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF  # flip a bit in the last record's body
        path.write_bytes(bytes(data))
    async with Forum(await Strand.open(cfg.with_storage(crashed))) as forum:
        assert await forum.count(Pattern(b"")) == 2
        assert forum.stats().tails_cut == 1
    with pytest.raises(StrandDamaged, match=r"damaged record at offset \d+, within the"):
        await Strand.open(cfg)


async def test_corruption_before_the_tail_refuses_to_open(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg)) as forum:
        for payload in (b"first", b"second", b"third"):  # one record each
            await forum.write(payload)
    path = _segments(cfg)[-1]
    data = bytearray(path.read_bytes())
    first_body = segment.HEADER.size + segment.FRAME.size
    data[first_body + 3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StrandError) as err:
        await Strand.open(cfg)
    assert isinstance(err.value, StrandCorrupt)
    assert str(path) in str(err.value)
    assert err.value.offset == segment.HEADER.size
    assert path.read_bytes() == bytes(data)  # nothing was cut


async def test_not_a_segment_refuses_to_open(cfg: StrandConfig) -> None:
    async with await Strand.open(cfg):
        pass
    _segments(cfg)[0].write_bytes(b"NOTASTRANDFILE..")
    with pytest.raises(StrandCorrupt, match="bad magic"):
        await Strand.open(cfg)


async def test_read_range_serves_other_origins_and_stops_at_gaps(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg)) as forum:
        remote = [Write(EntryId("peer-1", s), b"p%d" % s) for s in (1, 2, 3, 5)]
        await forum.apply(remote)
        strand = forum.strand
        assert strand.vector()["peer-1"] == 3
        assert strand.highest()["peer-1"] == 5
        got = await strand.read_range("peer-1", 0, 100)
        assert got == remote[:3]
        assert await strand.read_range("peer-1", 1, 1) == remote[1:2]
        assert await strand.read_range("peer-1", 3, 100) == []
        assert await strand.read_range("nobody", 0, 100) == []
    async with Forum(await Strand.open(cfg)) as forum:
        assert await forum.strand.read_range("peer-1", 4, 10) == remote[3:]
        assert forum.strand.vector()["peer-1"] == 3


async def test_fsync_policies_all_persist_on_clean_close(tmp_path: Path) -> None:
    for policy in ("always", "interval", "never"):
        cfg = StrandConfig().with_storage(tmp_path / policy).with_fsync(policy)  # type: ignore[arg-type]
        observed: list[float] = []
        async with Forum(await Strand.open(cfg)) as forum:
            forum.strand.add_fsync_observer(observed.append)
            await forum.write_many([b"a", b"b"])
            await forum.take(Pattern(b"a"))
        if policy == "always":
            assert observed
        async with Forum(await Strand.open(cfg)) as forum:
            assert [t.payload for t in forum.list(Pattern(b"")).tuples] == [b"b"]


def test_config_is_an_immutable_builder(tmp_path: Path) -> None:
    base = StrandConfig()
    changed = base.with_storage(tmp_path).with_fsync("never").with_segment_bytes(1 << 20)
    assert base.fsync == "always" and base.storage != tmp_path
    assert (changed.storage, changed.fsync, changed.segment_bytes) == (tmp_path, "never", 1 << 20)
    with pytest.raises(ValueError):
        base.with_fsync("sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        base.with_segment_bytes(10)
    with pytest.raises(ValueError):
        base.with_node_name("has space")


async def test_unopenable_storage_is_a_strand_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(StrandError):
        await Strand.open(StrandConfig().with_storage(blocker / "sub"))


async def test_takes_in_the_log_name_their_targets(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg)) as forum:
        wid = await forum.write(b"job")
        await forum.take(Pattern(b"job"))
        entries = await forum.strand.read_range(forum.strand.origin, 0, 10)
    assert entries == [Write(wid, b"job"), Take(EntryId(wid.origin, 2), wid)]
    assert os.listdir(cfg.storage)  # something was written
