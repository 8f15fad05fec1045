"""What the panels compute for a scaled-out cluster, from real values: the
Overview's groups from the sampler's rings, and the Prefixes rows of every
group merged (tests/dashboard/test_groups_browser.py has them in a browser)."""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from pathlib import Path

from forum.dashboard.groups import group_rows, sampled_elsewhere
from forum.dashboard.sampler import NodeHistory, Sample
from forum.dashboard.views import merged_prefixes
from forum.node.api.model import JSON
from forum.node.cluster.map import ClusterMap, Group
from forum.node.config.placement import Placement
from forum.node.http.cluster import MapHolder
from forum.node.http.responses import prefix_body
from tests.dashboard.test_views import BASE

MAP = ClusterMap(
    4,
    (
        Group("g1", ("http://a1", "http://a2")),
        Group("g2", ("http://b1",), weight=2.0),
        Group("g3", ("http://c1",), state="retired"),
    ),
)


def holder(tmp_path: Path) -> MapHolder:
    return MapHolder(tmp_path / "map.toml", Placement(MAP, MAP.groups[0]), None)


def history(url: str, *, live: int, reserved: int, error: str | None = None) -> NodeHistory:
    status = dataclasses.replace(BASE, node_id=url[-2:], live=live, reserved=reserved)
    return NodeHistory(url, deque([Sample(time.monotonic(), status)]), error)


def test_the_other_served_groups_members_are_sampled(tmp_path: Path) -> None:
    assert sampled_elsewhere(holder(tmp_path)) == ["http://b1"]  # not g1's, not retired g3's
    assert sampled_elsewhere(None) == []


def test_a_groups_row_says_which_members_answer_and_its_live_and_reserved(
    tmp_path: Path,
) -> None:
    histories = {
        "http://a1": history("http://a1", live=5, reserved=1),
        "http://a2": history("http://a2", live=4, reserved=2),  # a write behind
        "http://b1": history("http://b1", live=7, reserved=0, error="cannot connect"),
    }
    g1, g2, g3 = group_rows(holder(tmp_path), histories)
    assert (g1.id, g1.here, g1.live, g1.reserved, g1.unreachable) == ("g1", True, 5, 3, False)
    assert [(m.name, m.state) for m in g1.members] == [("a1", "alive"), ("a2", "alive")]
    assert (g2.weight, g2.live, g2.unreachable) == (2.0, None, True)
    assert [(m.state, m.error) for m in g2.members] == [("unreachable", "cannot connect")]
    assert (g3.state, g3.unreachable) == ("retired", False)
    assert [m.state for m in g3.members] == ["not sampled yet"]


def test_the_groups_prefix_counts_are_summed_and_their_other_rows_added() -> None:
    here = [
        prefix_body(b"job/", JSON, live=2, delayed=0, reserved=1, oldest_age=1.5),
        prefix_body(b"mail/", JSON, held=3, limit=10, live=3, delayed=0, reserved=0),
    ]
    there = [
        prefix_body(b"job/", JSON, paused=True, live=4, delayed=1, reserved=0, oldest_age=9.0),
        prefix_body(b"zip/", JSON, held=1, limit=5, live=1, delayed=0, reserved=0),
    ]
    rows = {body.prefix: body for body in merged_prefixes(here, [there])}
    assert list(rows) == ["job/", "mail/", "zip/"]
    job = rows["job/"]
    assert (job.live, job.delayed, job.reserved, job.paused, job.oldest_age) == (
        6, 1, 1, True, 9.0,
    )  # fmt: skip
    assert (rows["mail/"].held, rows["mail/"].limit) == (3, 10)  # this node's limit
    assert (rows["zip/"].live, rows["zip/"].held, rows["zip/"].limit) == (1, None, None)
