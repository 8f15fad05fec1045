"""Issue 27, row 2, on ``forum serve`` processes: one node of a 2-node
cluster loses a segment. It used to start without a word, never be
repaired, refuse its healthy peer's copies of its own entries as "forged"
(thousands of warnings) and keep a different live set. Now ``forum serve
--repair`` rebuilds it from the peer before it serves: the live sets agree,
no taken tuple is back, nobody is blamed, and its own seqs are never reused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from forum.node.storage.segment import segment_numbers, segment_path
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually
from tests.replication.conftest import Clients, converged, live_set, mesh

pytestmark = pytest.mark.slow

#: Small segments: a few hundred entries fill several, so one can be lost.
SMALL = ("--segment-bytes", "4096", "--max-payload", "1024", "--compact-interval", "0")


def data_dir(node: NodeProcess) -> Path:
    return node.root / "data"


async def stop_and_lose_a_segment(node: NodeProcess) -> None:
    """Stop ``node`` and delete its last sealed segment (the Takes are there)."""
    await node.stop()
    numbers = segment_numbers(data_dir(node))
    assert len(numbers) >= 4, numbers
    segment_path(data_dir(node), numbers[-2]).unlink()


@pytest.mark.parametrize("compacted", [False, True], ids=["kept", "compacted"])
async def test_a_node_that_lost_a_segment_is_repaired_from_its_peer(
    forum_nodes: ForumNodes, clients: Clients, compacted: bool
) -> None:
    """t0 b writes 200 jobs and takes 150 (its Takes fill the later
    segments); a holds them all (and, ``compacted``, drops the 150 pairs);
    t1 b stops and loses its last sealed segment (Takes); t2 b restarts with
    --repair: its lost Takes come back from a (or, dropped there, a's dead
    ranges kill their Writes again), and it serves only then."""
    a, b = mesh(forum_nodes, "ab", *SMALL)
    await forum_nodes.start_all()
    ca, cb = clients(a), clients(b)
    for first in range(0, 200, 20):  # one batch a request: a segment rolls between them
        await cb.write_many([b"job-%03d-" % i + b"x" * 100 for i in range(first, first + 20)])
    taken = [t.payload for _ in range(15) for t in await cb.take_many(Pattern(b"job-"), limit=10)]
    assert len(taken) == 150
    before = await converged([ca, cb])
    assert len(before) == 50
    if compacted:
        await eventually(lambda: _stable(ca), 10, "a hears b holds it all")
        assert (await ca.compact()).entries_dropped == 300
    b_origin = (await cb.status()).origin
    issued = (await cb.status()).vector[b_origin]

    await stop_and_lose_a_segment(b)
    b.args += ["--repair"]
    await b.start()

    after = await converged([ca, cb], timeout=30)
    assert after == before
    assert not {payload for _, payload in after} & set(taken)
    status = await cb.status()
    assert status.repair is not None
    assert status.repair["state"] == "repaired", status.repair
    assert status.repair["own_found"] > 0
    assert (status.repair["recovered_own"] > 0) is not compacted
    assert status.repair["missing_own"] == []
    # Every own seq is back, or dead; a's dead ranges killed the Writes
    # whose Takes b lost by Takes of b's own, after what it issued before.
    assert status.vector[b_origin] >= issued
    for node in (a, b):  # nobody blamed for holding b's own entries; no copy differs
        assert "forged" not in node.log_path.read_text()
        assert "divergence" not in node.log_path.read_text()

    # Its own seqs are never issued again.
    new = await cb.write(b"job-new")
    assert new.seq == (await cb.status()).vector[b_origin] > issued
    assert await converged([ca, cb]) == before | {(str(new), b"job-new")}


async def _stable(client: ForumClient) -> bool:
    """Every member holds all the node holds: compaction may drop it all."""
    status = await client.status()
    return status.horizon == status.vector


async def test_repair_of_a_whole_directory_changes_nothing(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    node = await forum_nodes.start("solo", "--repair")
    async with ForumClient(node.url) as client:
        await client.write(b"job-1")
        assert (await client.status()).repair is None
    assert "nothing to repair" in node.log_path.read_text()


async def test_a_repair_waiting_for_peers_stops_on_sigterm(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    """A damaged node whose peer does not answer waits (not serving, saying
    so), and SIGTERM ends that wait: it exits 0 without a traceback."""
    a, b = mesh(forum_nodes, "ab", *SMALL)
    await forum_nodes.start_all()
    cb = clients(b)
    for first in range(0, 200, 20):
        await cb.write_many([b"job-%03d-" % i + b"x" * 100 for i in range(first, first + 20)])
    await converged([clients(a), cb])
    await a.stop()
    await stop_and_lose_a_segment(b)
    b.args += ["--repair"]
    with pytest.raises(TimeoutError):
        await b.start(deadline=3)
    assert "fetching them from peers" in b.log_path.read_text()
    assert await b.stop() == 0
    assert "Traceback" not in b.log_path.read_text()
    assert "stopped while starting" in b.log_path.read_text()


async def test_own_entries_no_peer_had_are_reported_and_recorded_dead(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    """t0 a is down while b writes 200 jobs; t1 b loses a segment of them:
    no peer ever had those. The repair says which own seqs are gone, and,
    every member having answered, records them dead, so a's vector of b
    passes the gap instead of waiting for it for ever."""
    a, b = mesh(forum_nodes, "ab", *SMALL)
    await forum_nodes.start_all()
    ca, cb = clients(a), clients(b)
    await cb.write_many([b"job-before"])
    await converged([ca, cb])
    await a.stop()
    for first in range(0, 200, 20):
        await cb.write_many([b"job-%03d-" % i + b"x" * 100 for i in range(first, first + 20)])
    b_origin = (await cb.status()).origin
    await stop_and_lose_a_segment(b)
    await a.start()
    b.args += ["--repair"]
    await b.start()

    status = await cb.status()
    assert status.repair is not None
    report = status.repair
    assert report["state"] == "incomplete", report
    assert report["missing_own"] and report["recorded_dead"] == report["missing_own"], report
    highest = status.vector[b_origin]
    final = await converged([ca, cb])
    assert b"job-before" in {payload for _, payload in final}
    assert len(final) < 201
    assert (await ca.status()).vector[b_origin] == highest
    assert "no peer had" in b.log_path.read_text()


async def test_a_repair_settles_for_the_peers_that_answer_and_says_which_did_not(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    """Three nodes; c is down when b repairs: after ``repair_wait`` b settles
    for a, says c was not reached, records nothing dead (c may hold what a
    lacks), and serves; c back, all three agree."""
    a, b, c = mesh(forum_nodes, "abc", *SMALL, env={"FORUM_REPL_REPAIR_WAIT": "1"})
    await forum_nodes.start_all()
    ca, cb, cc = clients(a), clients(b), clients(c)
    for first in range(0, 200, 20):
        await cb.write_many([b"job-%03d-" % i + b"x" * 100 for i in range(first, first + 20)])
    taken = [t.payload for _ in range(10) for t in await cb.take_many(Pattern(b"job-"), limit=10)]
    before = await converged([ca, cb, cc])
    await c.stop()
    await stop_and_lose_a_segment(b)
    b.args += ["--repair"]
    await b.start()

    report = (await cb.status()).repair
    assert report is not None
    assert report["peers_repaired_from"] == [a.url], report
    assert list(report["peers_not_reached"]) == [c.url], report
    assert report["recorded_dead"] == [], report
    assert report["missing_own"] == [], report  # a had them all
    assert await converged([ca, cb]) == before
    await c.start()
    assert await converged([ca, cb, cc]) == before
    assert not {payload for _, payload in before} & set(taken)
    assert "not reached" in b.log_path.read_text()


async def test_a_node_alone_repairs_nothing_and_says_what_is_gone(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    node = forum_nodes.make("solo", *SMALL)
    await node.start()
    client = clients(node)
    for first in range(0, 200, 20):
        await client.write_many([b"job-%03d-" % i + b"x" * 100 for i in range(first, first + 20)])
    await stop_and_lose_a_segment(node)
    node.args += ["--repair"]
    await node.start()
    report = (await client.status()).repair
    assert report is not None
    assert report["state"] == "alone", report
    assert report["missing_own"] and report["recorded_dead"] == [], report
    assert len(await live_set(client)) < 200
