"""A node whose clock is far off: refused by its peers, and said so.

Three real ``forum serve`` nodes sharing a cluster secret; ``c`` runs under
libfaketime (Debian's ``faketime``) 10 minutes ahead, so every signed
request between it and the others is refused for clock skew, both ways.
Then the offset is measured from the signed refusals and shows in
``/v1/status`` and each peer row, each node logs it once per peer, and ``c``
(the odd clock out) is not ready while ``a`` and ``b`` stay ready, degraded.
"""

from __future__ import annotations

import glob
import json
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest

from forum.node.api.status import NodeStatus, PeerStatus
from forum.node.client.remote import ForumClient
from forum.replication.auth import SIGNATURE_HEADER, ClusterAuth
from forum.replication.clocks import ClockWatch
from forum.replication.config import ReplicationConfig
from forum.replication.errors import Unauthenticated
from forum.replication.messages import PULL_PATH
from forum.replication.transport import SignedTransport
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually
from tests.replication.conftest import FAST

SECRET = "s3cret"
#: Seconds ``c``'s clock is ahead of the others'.
SKEW = 600
#: The measure's slack: half a round trip on a loaded machine, and the
#: signature's whole seconds.
SLACK = 5.0
#: The one line each node logs when a peer is refused for skew (forum.replication.clocks).
REFUSED_LINE = re.compile(
    r"peer (\S+): its clock is ([+-][\d.]+) s from ours, more than max_clock_skew"
)


def libfaketime() -> str:
    """The libfaketime library the ``faketime`` command preloads (scripts/install-tools)."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    found += sorted(glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    if not found:
        pytest.fail("libfaketime is missing: install faketime (scripts/install-tools)")
    return found[0]


def skewed(seconds: int) -> dict[str, str]:
    """The environment that runs a process with its wall clock ``seconds`` ahead.

    The library is preloaded directly rather than through the ``faketime``
    command, which stays as the parent of the process it runs: the fixture's
    SIGTERM would end the wrapper, not the node.
    """
    return {
        "LD_PRELOAD": libfaketime(),
        "FAKETIME": f"{seconds:+d}",
        # Only the wall clock is off, as with a bad NTP setup.
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


async def status(node: NodeProcess) -> NodeStatus:
    async with ForumClient(node.url) as client:
        return await client.status()


def row(snapshot: NodeStatus, peer: NodeProcess) -> PeerStatus:
    (found,) = [r for r in snapshot.peers if r.url == peer.url]
    return found


async def readyz(http: aiohttp.ClientSession, node: NodeProcess) -> tuple[int, dict[str, Any]]:
    async with http.get(node.url + "/readyz") as answer:
        return answer.status, await answer.json()


async def refusals(http: aiohttp.ClientSession, node: NodeProcess) -> float:
    async with http.get(node.url + "/metrics") as answer:
        text = await answer.text()
    found = re.search(
        r'^forum_replication_requests_refused_total\{reason="clock_skew"\} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else 0.0


def refused_lines(node: NodeProcess) -> list[tuple[str, float]]:
    text = node.log_path.read_text(errors="replace")
    return [(m.group(1), float(m.group(2))) for m in REFUSED_LINE.finditer(text)]


@pytest.mark.slow
async def test_a_node_ten_minutes_off_is_told_and_not_ready(forum_nodes: ForumNodes) -> None:
    a, b = (forum_nodes.make(n, "--cluster-secret", SECRET, env=FAST) for n in "ab")
    c = forum_nodes.make("c", "--cluster-secret", SECRET, env={**FAST, **skewed(SKEW)})
    nodes = (a, b, c)
    for node in nodes:
        node.args += [arg for peer in nodes if peer is not node for arg in ("--peer", peer.url)]
    # c first: it is not ready as soon as the others answer, and starting
    # waits for /readyz.
    await c.start()
    await forum_nodes.start_all()

    async with aiohttp.ClientSession() as http:

        async def c_not_ready() -> bool:
            return (await readyz(http, c))[0] == 503

        await eventually(c_not_ready, timeout=20, what="c not ready for its clock")
        code, body = await readyz(http, c)
        assert body["error"] == "clock_skew", body
        said = re.search(r"this node's clock is ([+-][\d.]+) s from 2 of its 2 peers", str(body))
        assert said and abs(float(said.group(1)) - SKEW) < SLACK, body

        # c, the odd clock out: both peers refused, each measured 10 minutes behind.
        seen = await status(c)
        assert seen.not_ready is not None and "clock" in seen.not_ready
        for peer in (a, b):
            peer_row = row(seen, peer)
            assert peer_row.clock_refused, peer_row
            assert peer_row.clock_offset is not None
            assert abs(peer_row.clock_offset + SKEW) < SLACK, peer_row

        # a and b: c refused and measured 10 minutes ahead; each other in step;
        # ready, and saying what degrades them.
        for node, other in ((a, b), (b, a)):

            async def measured(node: NodeProcess = node) -> bool:
                return row(await status(node), c).clock_refused

            await eventually(measured, timeout=20, what=f"{node.name} measuring c's clock")
            seen = await status(node)
            c_row = row(seen, c)
            assert c_row.clock_offset is not None and abs(c_row.clock_offset - SKEW) < SLACK
            assert not row(seen, other).clock_refused
            assert seen.not_ready is None
            assert any(c.url in line for line in seen.degraded), seen.degraded
            code, body = await readyz(http, node)
            assert code == 200, body
            assert any(c.url in str(line) for line in body["degraded"]), body

        # The dashboard's Peers panel shows it in c's row.
        async with http.get(a.url + "/ui/peers") as answer:
            page = await answer.text()
        c_row_html = page[page.index(f'data-peer="{c.url}"') :].split("</tr>")[0]
        shown = re.search(r"<td>([+-][\d.]+) s</td>", c_row_html)
        assert shown and abs(float(shown.group(1)) - SKEW) < SLACK, c_row_html

        # Many refusals later, still one line per peer (on the change, not per call).
        before = await refusals(http, a)

        async def many_more() -> bool:
            return await refusals(http, a) >= before + 10

        await eventually(many_more, timeout=20, what="ten more refusals on a")

    lines = refused_lines(c)
    assert sorted(url for url, _ in lines) == sorted([a.url, b.url]), lines
    assert all(abs(offset + SKEW) < SLACK for _, offset in lines), lines
    for node in (a, b):
        lines = refused_lines(node)
        assert [url for url, _ in lines] == [c.url], (node.name, lines)
        assert abs(lines[0][1] - SKEW) < SLACK, lines


def test_two_nodes_cannot_tell_whose_clock_is_wrong_so_both_stay_ready(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = ClockWatch(max_skew=1.0, refuse_skew=60.0)
    watch.watch("http://b:7070")
    with caplog.at_level(logging.INFO, logger="forum.replication.clocks"):
        for _ in range(5):
            watch.refused("http://b:7070", -600.2)
        readiness = watch.readiness()
        assert readiness.not_ready is None
        assert readiness.degraded and "-600.200 s" in readiness.degraded[0]
        (line,) = caplog.records
        assert line.levelno == logging.WARNING and "-600.200 s" in line.getMessage()

        # Answers accepted again (the clock was fixed): one INFO line, in step.
        watch.sample("http://b:7070", 0.01)
        assert watch.readiness().degraded == ()
        assert watch.offset("http://b:7070") == 0.01
        assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]


def test_the_odd_clock_out_of_three_or_more_is_not_ready() -> None:
    watch = ClockWatch(max_skew=1.0, refuse_skew=60.0)
    peers = [f"http://n{i}:7070" for i in range(4)]
    for peer in peers:
        watch.watch(peer)
    # 2 of 4 refuse it, 2 in step: with itself, 3 clocks agree: ready.
    watch.sample(peers[0], 0.0)
    watch.sample(peers[1], 0.0)
    watch.refused(peers[2], 600.0)
    watch.refused(peers[3], 600.0)
    assert watch.readiness().not_ready is None
    # 3 of 4 refuse it: its clock is the odd one out.
    watch.refused(peers[1], 600.0)
    not_ready = watch.readiness().not_ready
    assert not_ready is not None and "-600.000 s from 3 of its 4 peers" in not_ready


def test_a_peer_not_watched_is_not_counted() -> None:
    watch = ClockWatch(max_skew=1.0, refuse_skew=60.0)
    watch.refused("http://gone:7070", 600.0)  # left the table before its answer came
    assert watch.readiness().degraded == () and watch.offsets() == {}


class Refusing(SignedTransport):
    """A peer that refuses every request for clock skew, its clock ``ahead``
    seconds from ours, signing its refusal with ``key`` (``None``: unsigned)."""

    def __init__(self, clocks: ClockWatch, key: str | None, ahead: float) -> None:
        super().__init__(ClusterAuth(SECRET), ReplicationConfig(attempts=1), clocks)
        self._key, self._ahead = key, ahead

    async def _exchange(
        self, peer: str, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, Mapping[str, str], bytes]:
        error = {"error": "clock_skew", "message": "off", "clock": time.time() + self._ahead}
        answer = json.dumps(error).encode()
        if self._key is None:
            return 401, {}, answer
        request = dict(p.split("=", 1) for p in headers[SIGNATURE_HEADER].split(","))
        return 401, ClusterAuth(self._key).sign_response(request["s"], answer), answer


@pytest.mark.parametrize(("key", "trusted"), [(SECRET, True), (None, False), ("other", False)])
async def test_only_a_refusal_signed_for_the_request_is_measured(
    key: str | None, trusted: bool
) -> None:
    peer = "http://b:7070"
    clocks = ClockWatch(max_skew=1.0, refuse_skew=60.0)
    clocks.watch(peer)
    async with Refusing(clocks, key, ahead=-SKEW) as transport:
        with pytest.raises(Unauthenticated):
            await transport.call(peer, "POST", PULL_PATH, b"x")
    if trusted:
        offset = clocks.refusing()[peer]
        assert abs(offset + SKEW) < SLACK
    else:  # anyone on the path could have sent it: it says nothing of b's clock
        assert clocks.refusing() == {} and clocks.offset(peer) is None
