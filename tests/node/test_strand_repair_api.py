"""The repair API the peer repair builds on: own seqs reserved and missing."""

from __future__ import annotations

import pytest

from forum.node.core.entries import EntryId, Write
from forum.node.core.errors import StrandDamaged
from forum.node.storage.strand import Strand, StrandConfig


async def test_a_reserved_own_seq_is_never_issued_and_those_below_are_missing(
    cfg: StrandConfig,
) -> None:
    async with await Strand.open(cfg) as strand:
        assert strand.damage is None
        await strand.append_writes([b"a", b"b"])
        assert strand.missing_own() == []
        strand.reserve_own(5)
        assert strand.own_seq_floor == 5
        (write,) = await strand.append_writes([b"c"])
        assert write.id.seq == 6
        assert strand.missing_own() == [(3, 5)]
        # What a peer gives back fills the gap.
        await strand.append_remote([Write(EntryId(strand.origin, 4), b"back")])
        assert strand.missing_own() == [(3, 3), (5, 5)]
        assert strand.vector()[strand.origin] == 3 - 1


def test_repair_is_off_unless_asked(cfg: StrandConfig) -> None:
    assert not cfg.repair
    assert cfg.with_repair().repair and not cfg.with_repair().with_repair(False).repair


async def test_a_reserved_own_seq_outlives_a_restart(cfg: StrandConfig) -> None:
    async with await Strand.open(cfg) as strand:
        await strand.append_writes([b"a"])
        strand.reserve_own(10)
    async with await Strand.open(cfg) as strand:
        assert strand.own_seq_floor == 10
        assert strand.missing_own() == [(2, 10)]
        (write,) = await strand.append_writes([b"b"])
        assert write.id.seq == 11


async def test_repair_mode_sets_a_damaged_horizon_aside(cfg: StrandConfig) -> None:
    async with await Strand.open(cfg) as strand:
        await strand.append_writes([b"a", b"b"])
        await strand.mark_dead("peer-1", [(1, 5)])
    horizon = cfg.storage / "HORIZON"
    horizon.write_bytes(horizon.read_bytes()[:-1] + b"\0")
    with pytest.raises(StrandDamaged, match="HORIZON: the HORIZON file does not check out"):
        await Strand.open(cfg)
    async with await Strand.open(cfg.with_repair()) as strand:
        assert strand.damage is not None
        (moved,) = strand.damage.set_aside
        assert moved.name == "HORIZON"
        assert strand.floors() == {}  # the dead range is to be heard of again from peer-1
        assert strand.vector()[strand.origin] == 2
