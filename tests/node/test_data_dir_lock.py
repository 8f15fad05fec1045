"""One data directory, one open Strand: a second one is refused while the first lives.

Two Strands on one directory hand out the same ids and write over each other's
records (issue 9: an acknowledged write was lost after a restart).
"""

from __future__ import annotations

import os

import pytest

from forum.node.core.errors import DataDirLocked
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig


async def test_a_second_strand_on_a_held_directory_is_refused(cfg: StrandConfig) -> None:
    first = Forum(await Strand.open(cfg))
    await first.write(b"first/1")
    with pytest.raises(DataDirLocked, match=f"{cfg.storage} is in use by process {os.getpid()}"):
        await Strand.open(cfg)
    # The refused open changed nothing: the first goes on writing.
    await first.write(b"first/2")
    await first.close()

    second = Forum(await Strand.open(cfg))
    assert [t.payload for t in second.list(Pattern(b"")).tuples] == [b"first/1", b"first/2"]
    await second.close()


async def test_the_lock_is_released_when_opening_fails(cfg: StrandConfig) -> None:
    cfg.storage.mkdir(parents=True)
    (cfg.storage / "ORIGIN").write_text("not a valid origin!\n")
    with pytest.raises(Exception, match="ORIGIN"):
        await Strand.open(cfg)
    (cfg.storage / "ORIGIN").unlink()
    strand = await Strand.open(cfg)  # not refused as "in use"
    await strand.close()


async def test_the_lock_file_names_its_holder(cfg: StrandConfig) -> None:
    strand = await Strand.open(cfg)
    try:
        assert (cfg.storage / "LOCK").read_text().strip() == str(os.getpid())
    finally:
        await strand.close()
