"""The compaction horizon: the minimum of what every member not forgotten holds."""

from __future__ import annotations

from forum.replication.horizon import holds_back, horizon
from forum.replication.messages import Member
from forum.replication.vector import VersionVector
from tests.replication.test_membership import Clock, table

MINE = {"a-1": 10, "b-1": 5}


def test_the_horizon_is_the_minimum_per_origin() -> None:
    assert horizon(MINE, []) == MINE  # a node alone is the whole cluster
    assert horizon(MINE, [{"a-1": 7, "b-1": 9}, {"a-1": 8}]) == {"a-1": 7, "b-1": 0}


def test_a_member_whose_vector_is_unknown_holds_everything_back() -> None:
    assert horizon(MINE, [{"a-1": 10, "b-1": 5}, None]) == {"a-1": 0, "b-1": 0}
    assert holds_back(MINE, None) == 15


def test_what_a_member_holds_back_is_what_it_lacks_of_our_vector() -> None:
    assert holds_back(MINE, {"a-1": 7, "b-1": 9}) == 3
    assert holds_back(MINE, MINE) == 0


def test_a_member_not_heard_from_for_forget_after_no_longer_counts() -> None:
    """t0: the seed is added, never heard: it holds back everything. t1: it
    answers with its vector. t2: silent for forget_after (60 s): forgotten."""
    clock = Clock()
    membership, _ = table("http://a:1", clock=clock)
    assert membership.holdings() == [None]
    (row,) = membership.snapshot(VersionVector(MINE))
    assert row.holds_back == 15 and not row.forgotten

    peer = membership.contacted("http://a:1", Member("a-1", "http://a:1"))
    assert peer is not None
    membership.acknowledged(peer, VersionVector({"a-1": 10, "b-1": 2}), full=True)
    assert membership.holdings() == [{"a-1": 10, "b-1": 2}]
    (row,) = membership.snapshot(VersionVector(MINE))
    assert row.holds_back == 3

    clock.now += 59
    assert membership.holdings() == [{"a-1": 10, "b-1": 2}]
    clock.now += 1
    assert membership.holdings() == []
    (row,) = membership.snapshot(VersionVector(MINE))
    assert row.forgotten and row.holds_back == 0
    assert [p.url for p in membership.peers()] == ["http://a:1"]  # a seed stays in the table

    membership.heard_from(Member("a-1", "http://a:1"))  # it calls us: it counts again
    assert membership.holdings() == [{"a-1": 10, "b-1": 2}]


def test_a_member_that_only_calls_us_is_heard() -> None:
    clock = Clock()
    membership, _ = table(clock=clock)
    membership.learn([Member("c-1", "http://c:1")])
    assert membership.holdings() == [None]  # named in a member list, never heard
    clock.now += 30
    (peer,) = membership.peers()
    membership.heard_from(Member("c-1", "http://c:1"))
    membership.acknowledged(peer, VersionVector({"a-1": 4}), full=True)
    clock.now += 59
    assert membership.holdings() == [{"a-1": 4}]
