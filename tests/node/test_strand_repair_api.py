"""The repair API the peer repair builds on: own seqs reserved and missing."""

from __future__ import annotations

from node import EntryId, Strand, StrandConfig, Write


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
