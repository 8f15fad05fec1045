"""Peers' clocks: measured on every exchange, shown, and warned about when far off.

Real ``forum serve`` nodes; the "far off" peer is a test sending requests
signed with the cluster secret whose ``X-Forum-Clock`` says 5 s ahead.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiohttp
import pytest

from forum.node.api.status import PeerStatus
from forum.node.client.remote import ForumClient
from forum.node.core.entries import EntryId, Write
from forum.node.core.space import Pattern
from forum.replication.auth import ClusterAuth
from forum.replication.clocks import CLOCK_HEADER, ClockWatch
from forum.replication.messages import PULL_PATH, PUSH_PATH, Member, PullRequest, Push, encode
from forum.replication.vector import VersionVector
from tests.fixtures.cli import assert_usage_error, run_forum
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually, free_port
from tests.replication.conftest import FAST, mesh

SECRET = "s3cret"
#: The warning's words (forum.replication.clocks), and the line when it is over.
WARNING = "delayed and expiring tuples fall due and expire that much apart"
BACK = "back within warn_clock_skew"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def log_of(node: NodeProcess) -> str:
    return node.log_path.read_text(errors="replace")


async def peer_rows(node: NodeProcess) -> list[PeerStatus]:
    async with ForumClient(node.url) as client:
        return list((await client.status()).peers)


@pytest.mark.slow
async def test_two_nodes_measure_each_other_s_clock(
    forum_nodes: ForumNodes, http: aiohttp.ClientSession
) -> None:
    nodes = mesh(forum_nodes, "ab")
    await forum_nodes.start_all()
    for node in nodes:

        async def measured(node: NodeProcess = node) -> bool:
            rows = await peer_rows(node)
            return len(rows) == 1 and rows[0].clock_offset is not None

        await eventually(measured, what=f"{node.name} measuring its peer's clock")
    a, b = nodes
    for node in nodes:
        (row,) = await peer_rows(node)
        # One machine, one clock: what is left is the estimate's error (ms).
        assert row.clock_offset is not None and abs(row.clock_offset) < 0.5
    async with http.get(a.url + "/metrics") as answer:
        metrics = await answer.text()
    assert f'forum_replication_peer_clock_offset_seconds{{peer="{b.url}"}}' in metrics
    code, out, _ = await run_forum("status", "--node", a.url)
    assert code == 0 and "clock_offset" in out
    for node in nodes:
        assert WARNING not in log_of(node), node.name


class Forger:
    """Requests from a made-up peer (``ghost``), signed with the cluster secret,
    whose clock header says what the test wants."""

    def __init__(self, http: aiohttp.ClientSession, node: NodeProcess) -> None:
        self.http = http
        self.node = node
        self.me = Member("ghost-1", f"http://127.0.0.1:{free_port()}")  # nothing listens
        self.auth = ClusterAuth(SECRET)

    async def pull(self, clock: str) -> tuple[int, str]:
        body = encode(PullRequest(self.me, VersionVector(), frozenset(), (), 10, 1 << 20))
        return await self.send(PULL_PATH, body, "*", clock)

    async def send(self, path: str, body: bytes, to: str, clock: str) -> tuple[int, str]:
        headers: Mapping[str, str] = self.auth.sign_request("POST", path, body, to)
        headers = {**headers, CLOCK_HEADER: clock}
        async with self.http.post(self.node.url + path, data=body, headers=headers) as answer:
            return answer.status, await answer.text(errors="replace")


@pytest.mark.slow
async def test_a_peer_5_s_ahead_shows_in_status_and_warns_once(
    forum_nodes: ForumNodes, http: aiohttp.ClientSession
) -> None:
    node = await forum_nodes.start("a", "--cluster-secret", SECRET, env=FAST)
    ghost = Forger(http, node)
    for _ in range(3):
        status, _ = await ghost.pull(f"{time.time() + 5:.6f}")
        assert status == 200
    (row,) = await peer_rows(node)
    assert row.origin == "ghost-1"
    assert row.clock_offset is not None and 4.5 < row.clock_offset < 5.5
    await eventually(lambda: WARNING in log_of(node), what="the skew warning")
    warnings = [line for line in log_of(node).splitlines() if WARNING in line]
    assert len(warnings) == 1, warnings
    assert "WARNING" in warnings[0] and f"peer {ghost.me.url}" in warnings[0]
    said = re.search(r"its clock is \+(\d+\.\d+) s from ours", warnings[0])
    assert said is not None and 4.5 < float(said[1]) < 5.5, warnings[0]

    # Its clock set right: the median of the last five moves back after three.
    for _ in range(3):
        status, _ = await ghost.pull(f"{time.time():.6f}")
        assert status == 200
    (row,) = await peer_rows(node)
    assert row.clock_offset is not None and abs(row.clock_offset) < 0.5
    await eventually(lambda: BACK in log_of(node), what="the line saying it is over")
    output = log_of(node)
    assert sum(WARNING in line for line in output.splitlines()) == 1
    assert sum(BACK in line for line in output.splitlines()) == 1


@pytest.mark.slow
async def test_a_malformed_clock_is_refused_and_changes_nothing(
    forum_nodes: ForumNodes, http: aiohttp.ClientSession
) -> None:
    node = await forum_nodes.start("a", "--cluster-secret", SECRET, env=FAST)
    async with ForumClient(node.url) as client:
        origin = (await client.status()).origin
    ghost = Forger(http, node)
    body = encode(Push(ghost.me, frozenset(), (Write(EntryId("ghost-1", 1), b"job-1"),)))
    for clock in ("soon", "-5", "1e9", "nan", "inf", "", "0x10", "1764629400.5.5"):
        status, text = await ghost.send(PUSH_PATH, body, origin, clock)
        assert status == 400, clock
        assert CLOCK_HEADER in text and "unix time" in text, text
        status, text = await ghost.pull(clock)
        assert status == 400, clock
    async with ForumClient(node.url) as client:
        assert await client.count(Pattern(b"")) == 0
        snapshot = await client.status()
    assert snapshot.entries == 0
    assert snapshot.peers == ()  # the sender was not even learned

    status, _ = await ghost.send(PUSH_PATH, body, origin, f"{time.time():.6f}")
    assert status == 200


def test_one_late_message_does_not_move_the_offset_a_step_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = ClockWatch(max_skew=1.0)
    peer = "http://b:7070"
    watch.sample(peer, 9.0)  # not in the table (yet): ignored
    watch.watch(peer)
    assert watch.offset(peer) is None
    with caplog.at_level(logging.INFO, logger="forum.replication.clocks"):
        for offset in (0.001, 0.002, -3.0, 0.001, 0.0, 0.002):  # one held up by 3 s
            watch.sample(peer, offset)
        assert watch.offset(peer) == 0.001
        assert caplog.records == []
        for offset in (2.0, 2.0, 2.0, 2.0):  # its clock stepped 2 s ahead
            watch.sample(peer, offset)
    assert watch.offset(peer) == 2.0
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING and "+2.000 s" in warning.getMessage()


async def test_a_bad_warn_clock_skew_stops_serve(tmp_path: Path) -> None:
    # The other refusals are tests/replication/test_config.py's.
    data = tmp_path / "data"
    result = await run_forum(
        "serve", "--data-dir", str(data), "--listen", "127.0.0.1:0",
        env={"FORUM_REPL_WARN_CLOCK_SKEW": "0"},
    )  # fmt: skip
    assert_usage_error(
        result, "forum serve: FORUM_REPL_WARN_CLOCK_SKEW: warn_clock_skew must be a finite number"
    )
    assert not data.exists()
