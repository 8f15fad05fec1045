"""Dedup windows bounded by compaction: a write kept only for its window
costs a compact record of its key (``dedup-keys``), not its Write and Take."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from forum.node.core.entries import EntryId
from forum.node.core.errors import StrandCorrupt
from forum.node.core.space import Pattern
from forum.node.core.write_options import MAX_SECONDS
from forum.node.space.dedup import KEYS_FILE, DedupTable
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig

JOBS = Pattern(b"job/")
#: Keyed writes with the longest window there is (the issue's ten years).
WRITES = 300


async def reopen(forum: Forum, cfg: StrandConfig, clock: float = 0.0) -> Forum:
    """The Forum again, from its data, its clock ``clock`` seconds ahead."""
    await forum.close()
    return Forum(await Strand.open(cfg), remote_delay=0, clock=lambda: time.time() + clock)


async def test_a_ten_year_window_keeps_the_key_not_the_write_and_its_take(
    forum: Forum, cfg: StrandConfig
) -> None:
    first = [
        await forum.write(b"job/%d" % i, key=f"order-{i}", dedup_window=MAX_SECONDS)
        for i in range(WRITES)
    ]
    for _ in range(WRITES):
        assert await forum.take(JOBS) is not None
    await forum.compact(seal=True)

    assert forum.strand.stats().entries == 0  # was 2 * WRITES: each Write and its Take
    keys = cfg.storage / KEYS_FILE
    # A key, its seq and its end: ~20 bytes each, not the entries' ~60 each.
    assert keys.stat().st_size < WRITES * 24, keys.stat().st_size

    # Every window is still open: here, and after a restart.
    assert await forum.write(b"job/again", key="order-7", dedup_window=60) == first[7]
    forum = await reopen(forum, cfg)
    try:
        for i in (0, 7, WRITES - 1):
            assert await forum.write(b"job/x", key=f"order-{i}", dedup_window=60) == first[i]
        assert await forum.count(JOBS) == 0
        assert forum.strand.stats().entries == 0  # nothing was written
    finally:
        await forum.close()


async def test_a_window_closed_while_the_node_was_down_is_left_out(
    forum: Forum, cfg: StrandConfig
) -> None:
    first = await forum.write(b"job/a", key="k", dedup_window=60)
    await forum.take(JOBS)
    await forum.compact(seal=True)
    forum = await reopen(forum, cfg, clock=120)  # two minutes later
    try:
        assert await forum.write(b"job/a", key="k", dedup_window=60) != first
    finally:
        await forum.close()


async def test_compaction_without_windows_writes_no_file(forum: Forum, cfg: StrandConfig) -> None:
    await forum.write(b"job/a", key="k")  # a claim key, no window
    await forum.take(JOBS)
    await forum.compact(seal=True)
    assert not (cfg.storage / KEYS_FILE).exists()


async def test_a_pass_with_no_new_window_does_not_write_the_file(
    forum: Forum, cfg: StrandConfig
) -> None:
    await forum.write(b"job/a", key="a", dedup_window=60)
    await forum.compact(seal=True)
    keys = cfg.storage / KEYS_FILE
    written = keys.stat().st_ino  # each save renames a new file in
    await forum.write(b"job/b")  # no key: no window
    await forum.compact(seal=True)
    assert keys.stat().st_ino == written
    await forum.write(b"job/c", key="c", dedup_window=60)
    await forum.compact(seal=True)
    assert keys.stat().st_ino != written


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: data[:-3], "bytes of body"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "checksum mismatch"),
        (lambda data: b"NOTADEDUP" + data[9:], "not a dedup keys file"),
        (lambda data: data[:5], "shorter than its header"),
    ],
)
async def test_a_damaged_keys_file_stops_the_start_naming_it(
    forum: Forum, cfg: StrandConfig, damage: object, reason: str
) -> None:
    await forum.write(b"job/a", key="k", dedup_window=60)
    await forum.take(JOBS)
    await forum.compact(seal=True)
    await forum.close()
    path: Path = cfg.storage / KEYS_FILE
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    async with await Strand.open(cfg) as strand:
        with pytest.raises(StrandCorrupt, match=reason) as raised:
            Forum(strand, remote_delay=0)
    assert str(path) in str(raised.value)


async def test_a_keys_file_of_another_data_directory_is_left_out_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = int(time.time() * 1000)
    theirs = DedupTable("a-1111")
    theirs.add(b"k", EntryId("a-1111", 7), now + 60_000)
    assert await theirs.save(tmp_path, now) == 1
    ours = DedupTable("b-2222")
    with caplog.at_level(logging.WARNING, logger="forum.node.space.dedup"):
        assert ours.load(tmp_path, now) == 0
    assert ours.get(b"k", now) is None
    assert "dedup keys of a-1111, not of this node (b-2222)" in caplog.text
    again = DedupTable("a-1111")
    assert again.load(tmp_path, now) == 1 and again.get(b"k", now) == EntryId("a-1111", 7)
