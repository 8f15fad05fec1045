"""Replication lag in seconds (replication/forum/replication/lag.py): how long ago a peer last
held everything this node held then, from this node's vector noted at a
fixed interval (node/forum/node/space/arrivals.py) and the peer's vector as last heard. Pure
computations on
real vectors, with the times given; the figure in a running cluster is in
tests/dashboard/test_browser.py (a stopped node's lag grows)."""

from __future__ import annotations

import pytest

from forum.node.space import arrivals as arrivals_module
from forum.node.space.arrivals import Arrivals
from forum.replication.lag import floors, lag
from forum.replication.vector import VersionVector


def noted(*held: tuple[float, dict[str, int]]) -> Arrivals:
    arrivals = Arrivals()
    for at, vector in held:
        arrivals.note(vector, at)
    return arrivals


def vector(**contiguous: int) -> VersionVector:
    return VersionVector(dict(contiguous))


def test_a_peer_that_holds_all_we_hold_has_no_lag() -> None:
    arrivals = noted((0.0, {"a": 5}), (1.0, {"a": 9}))
    assert lag(arrivals, vector(a=9), {"a": 9}, 1.2) == 0.0
    assert lag(arrivals, vector(a=12, b=3), {"a": 9}, 1.2) == 0.0  # it holds more: still 0


def test_the_lag_is_how_long_ago_the_peer_held_all_we_held_then() -> None:
    """t0..t3: writes arrive here; the peer was last heard holding up to 6.

    t=0 held 5, t=1 held 8, t=2 held 12, t=3 held 12 (quiet)
    the peer holds 1..6: it held all we held at t=0, not at t=1 (7, 8)
    """
    arrivals = noted((0.0, {"a": 5}), (1.0, {"a": 8}), (2.0, {"a": 12}), (3.0, {"a": 12}))
    assert lag(arrivals, vector(a=6), {"a": 12}, 3.0) == 3.0
    assert lag(arrivals, vector(a=6), {"a": 12}, 10.0) == 10.0  # grows while nothing is heard
    assert lag(arrivals, vector(a=8), {"a": 12}, 3.0) == 2.0
    # Before the peer's first gap: runs it holds above it do not count.
    gapped = VersionVector({"a": 8}, {"a": ((10, 12),)})
    assert lag(arrivals, gapped, {"a": 12}, 3.0) == 2.0


def test_a_quiet_spell_does_not_count_as_lag() -> None:
    """Nothing arrives for a minute, then one entry: a peer that lacks only
    it lags since the last note before it, not since the last write before."""
    arrivals = noted(*((float(t), {"a": 5}) for t in range(61)), (61.0, {"a": 6}))
    assert lag(arrivals, vector(a=5), {"a": 6}, 61.5) == pytest.approx(1.5)
    # An entry here since the last note: at most the interval since it.
    assert lag(arrivals, vector(a=6), {"a": 7}, 61.25) == pytest.approx(0.25)


def test_the_oldest_lacked_entry_of_any_origin_sets_the_lag() -> None:
    """An origin first seen at t=2 (none of it held at the note before)."""
    arrivals = noted(
        (0.0, {"a": 3}), (1.0, {"a": 4}), (2.0, {"a": 4, "b": 2}), (3.0, {"a": 6, "b": 2})
    )
    held = {"a": 6, "b": 2}
    assert lag(arrivals, vector(a=4), held, 3.0) == 2.0  # it lacks b entirely: since t=1
    assert lag(arrivals, vector(a=4, b=2), held, 3.0) == 1.0  # a:5 and a:6 came at t=3
    assert lag(arrivals, vector(a=3, b=2), held, 3.0) == 3.0  # a:4 came at t=1


def test_what_was_held_at_start_is_dated_from_the_start() -> None:
    arrivals = noted((10.0, {"a": 100}), (11.0, {"a": 100}))
    assert lag(arrivals, vector(a=40), {"a": 100}, 12.0) == 2.0
    assert lag(arrivals, VersionVector(), {"a": 100}, 12.0) == 2.0


def test_letting_go_of_what_every_peer_holds_changes_no_lag() -> None:
    arrivals = noted(*((float(t), {"a": 10 * t, "b": t}) for t in range(1, 30)))
    held = {"a": 290, "b": 29}
    peers = [vector(a=150, b=20), vector(a=200, b=25)]
    before = [lag(arrivals, p, held, 30.0) for p in peers]
    assert floors(held, peers) == {"a": 150, "b": 20}
    arrivals.forget_below(floors(held, peers))
    assert [lag(arrivals, p, held, 30.0) for p in peers] == before == [15.0, 10.0]
    assert len(arrivals.marks["a"].seqs) == 15  # the latest at or below 150, and those above
    # Every peer caught up: one mark per origin left.
    arrivals.forget_below(floors(held, [vector(a=290, b=29)]))
    assert [len(m.seqs) for m in arrivals.marks.values()] == [1, 1]


def test_past_the_cap_old_marks_are_thinned_and_a_lag_only_reads_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer down for long: marks pile up (one per note that found new
    entries) until the cap halves the older ones; none is ever read as younger."""
    monkeypatch.setattr(arrivals_module, "MAX_MARKS", 8)
    arrivals = noted(*((float(t), {"a": t}) for t in range(1, 41)))
    assert len(arrivals.marks["a"].seqs) <= 8
    held = {"a": 40}
    for lacking in range(1, 41):
        exact = 40.0 - (lacking - 1)  # it held 1..lacking-1, all we held at t=lacking-1
        read = lag(arrivals, vector(a=lacking - 1), held, 40.0)
        assert read >= exact if lacking > 1 else read == 39.0  # a:1 was held at start
