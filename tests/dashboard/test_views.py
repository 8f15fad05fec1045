"""What the panels compute from status documents: the health line, the
sparklines, the rates between samples; the Prefixes panel's rows from the
node's document, the dead letters, the rates and the workers' records
(pure functions of real values)."""

from __future__ import annotations

import dataclasses
from collections import deque

from forum.coordinator.deadletter import DEFAULT_DEAD_PREFIX
from forum.coordinator.presence import WorkerPresence
from forum.dashboard.sampler import NodeHistory, Sample
from forum.dashboard.throughput import Rate
from forum.dashboard.views import (
    DEAD_PREFIX,
    LAG_THRESHOLD,
    LensGroups,
    Sparkline,
    duration,
    group_of,
    health,
    peer_state,
    prefix_rows,
)
from forum.node.api.model import JSON
from forum.node.api.status import NodeStatus, PeerStatus
from forum.node.http.responses import prefix_body
from forum.tasks import App

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
    # Behind by entries at most LAG_THRESHOLD old: converging, all is well.
    lagging = dataclasses.replace(behind, lag_seconds=0.2)
    assert health(with_peers(PEER, lagging)) == (
        True,
        "all 2 peers alive, converging: 7 entries behind (up to 0.2 s old), within 5 s",
    )
    at_threshold = dataclasses.replace(behind, lag_seconds=LAG_THRESHOLD)
    assert health(with_peers(PEER, at_threshold))[0] is True
    late = dataclasses.replace(behind, lag_seconds=LAG_THRESHOLD + 0.5)
    assert health(with_peers(PEER, late)) == (
        False,
        "all 2 peers alive, not converged: 7 entries behind (up to 5.5 s old)",
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


def worker(owner: str, heads: tuple[bytes, ...], retrying: tuple[bytes, ...] = (),
           last_beat: float = 100.0) -> WorkerPresence:  # fmt: skip
    return WorkerPresence(owner, 4, len(heads), (), 0.0, last_beat, 3.0, "", True,
                          heads=heads, retrying=retrying)  # fmt: skip


def test_jobs_in_the_lens_are_counted_in_the_groups_of_their_payloads() -> None:
    workers = [
        worker("w1", (b"task/a\nflaky", b"job/7", b"no-separator"), (b"task/b\nflaky",)),
        worker("w2", (b"task/c\nslow",)),
        worker("gone", (b"task/d\nslow",), last_beat=98.9),  # dead: its jobs come back
        worker("late", (b"late/e",), last_beat=99.0),  # two 1 s beats late: alive still
    ]
    lens = LensGroups.of(workers, b"/", now=101.0)
    assert dict(lens.in_flight) == {b"task/": 2, b"job/": 1, b"late/": 1}
    assert dict(lens.retrying) == {b"task/": 1}
    assert group_of(b"task/a/b", b"/a/") == b"task/a/"
    assert group_of(b"x" * 64, b"/") is None


def test_prefix_rows_join_the_nodes_counts_the_dead_the_rates_and_the_lens() -> None:
    bodies = [
        prefix_body(b"job/", JSON, live=3, delayed=0, reserved=1, oldest_age=12.5),
        prefix_body(b"mail/", JSON, paused=True, live=0, delayed=2, reserved=0, oldest_age=None),
        prefix_body(b"dead/", JSON, live=2, delayed=0, reserved=0, oldest_age=40.0),
    ]
    dead = {b"job/": 1, b"old/": 1}  # old/ has nothing here but a dead letter
    lens = LensGroups.of([worker("w", (b"task/1",))], b"/", now=100.0)
    rows = prefix_rows(bodies, dead, {b"job/": Rate(2.0, 1.5)}, lens, most=500)
    shown = {
        r.prefix: (r.live, r.dead, r.oldest_age, r.rate, r.in_flight, r.retrying) for r in rows
    }
    # The dead letters are counted in their own groups' rows: dead/ is no row.
    assert [r.prefix for r in rows] == ["job/", "mail/", "old/", "task/"]
    assert shown["job/"] == (3, 1, 12.5, Rate(2.0, 1.5), 0, 0)
    assert shown["mail/"] == (0, 0, None, Rate(0.0, 0.0), 0, 0)
    assert shown["old/"] == (0, 1, None, Rate(0.0, 0.0), 0, 0)
    assert shown["task/"] == (0, 0, None, Rate(0.0, 0.0), 1, 0)
    # No figure yet, no Lens: None ("—"); and no more rows than asked.
    plain = prefix_rows(bodies, dead, None, None, most=3)
    assert [(r.prefix, r.rate, r.in_flight) for r in plain] == [
        ("job/", None, None), ("mail/", None, None), ("old/", None, None),
    ]  # fmt: skip


def test_prefix_rows_show_the_double_takes_counted_at_the_nodes_separator() -> None:
    bodies = [
        prefix_body(b"job/", JSON, live=3, delayed=0, reserved=1, oldest_age=None),
        prefix_body(b"mail/", JSON, live=1, delayed=0, reserved=0, oldest_age=None),
        prefix_body(b"\xff/", JSON, live=1, delayed=0, reserved=0, oldest_age=None),
    ]
    doubles = {b"job/": 4, b"\xff/": 2, b"gone/": 1}  # gone/: nothing else here
    rows = prefix_rows(bodies, {}, None, None, most=500, double_takes=doubles)
    assert {r.prefix: r.double_takes for r in rows} == {
        "job/": 4, "mail/": 0, "base64:/y8=": 2, "gone/": 1,
    }  # fmt: skip
    # Grouped at another separator: no figure ("—").
    assert {r.double_takes for r in prefix_rows(bodies, {}, None, None, most=500)} == {None}


def test_the_dead_prefix_is_the_workers_and_the_task_layers() -> None:
    assert DEAD_PREFIX == DEFAULT_DEAD_PREFIX
    assert App("http://127.0.0.1:1", "redis://127.0.0.1:1/0").dead_prefix == DEAD_PREFIX


def test_an_age_reads_in_the_unit_that_suits_it() -> None:
    assert [duration(s) for s in (None, 0.42, 12.4, 150.0, 9000.0)] == [
        "—", "0.4 s", "12 s", "2 min", "2.5 h",
    ]  # fmt: skip
