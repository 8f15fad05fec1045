"""What the panels compute from status documents: the health line, the
sparklines, the rates between samples (pure functions of real status values)."""

from __future__ import annotations

import dataclasses
from collections import deque

from dashboard.sampler import NodeHistory, Sample
from dashboard.views import Sparkline, health, peer_state
from node.web_status import NodeStatus, PeerStatus

BASE = NodeStatus(
    node_id="a", origin="a-1", advertise="http://a", version="0", uptime_seconds=1.0,
    entries=0, live=0, strand_bytes=0, segments=1, waiting_takers=0, reserved=0,
    long_polls=0, writes=0, takes=0, double_takes=0, tails_cut=0, fsync="always",
)  # fmt: skip
PEER = PeerStatus(
    url="http://b", advertised=None, origin="b-1", seed=True, state="alive",
    last_contact=None, last_contact_age=0.1, failures=0, last_error=None, behind=0, queued=0,
)  # fmt: skip


def with_peers(*peers: PeerStatus) -> NodeStatus:
    return dataclasses.replace(BASE, peers=peers)


def test_health_says_all_is_well_only_when_every_peer_is_alive_and_caught_up() -> None:
    c = dataclasses.replace(PEER, url="http://c")
    assert health(with_peers(PEER, c)) == (True, "all 2 peers alive, converged")
    behind = dataclasses.replace(c, behind=7)
    assert health(with_peers(PEER, behind)) == (
        False,
        "all 2 peers alive, not converged: 7 entries behind",
    )
    lagging = dataclasses.replace(behind, lag_seconds=2.31)
    assert health(with_peers(PEER, lagging))[1] == (
        "all 2 peers alive, not converged: 7 entries behind (up to 2.3 s old)"
    )
    dead = dataclasses.replace(c, state="dead")
    assert health(with_peers(PEER, dead)) == (False, "1 of 2 peers alive (1 dead), converged")
    assert health(BASE)[0] is True


def test_a_forgotten_peer_is_shown_as_forgotten_whatever_its_state() -> None:
    assert peer_state(dataclasses.replace(PEER, state="dead", forgotten=True)) == "forgotten"
    assert peer_state(PEER) == "alive"


def test_rates_are_per_second_between_samples_and_a_restart_counts_as_zero() -> None:
    history = NodeHistory("http://a", deque(maxlen=10))
    for at, writes in ((0.0, 0), (2.0, 10), (4.0, 30), (6.0, 5)):
        history.samples.append(Sample(at, dataclasses.replace(BASE, writes=writes)))
    assert history.rates(lambda s: s.writes) == [5.0, 10.0, 0.0]
    assert history.per_minute(lambda s: s.writes) == 5


def test_a_sparkline_ends_at_the_right_edge_scaled_to_its_peak() -> None:
    line = Sparkline.of([0.0, 5.0, 10.0], keep=5)
    points = [tuple(map(float, p.split(","))) for p in line.points.split()]
    assert points[-1][0] == 160.0
    assert points[-1][1] < points[0][1]  # the peak is drawn highest
    assert (line.latest, line.peak) == (10.0, 10.0)
    assert Sparkline.of([], keep=5).points == ""
