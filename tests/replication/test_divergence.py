"""Divergence is found, not hidden: two nodes with equal vectors and different
entries under one id find it by their digests, say so once, and heal to the
origin's entry (the origin is the authority for its own seqs).

In one process over the memory transport (real Forums and Strands); the
same over ``forum serve`` processes with a push forged with the cluster
secret is in ``test_divergence_cluster.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from forum.node.core.entries import EntryId, Write
from forum.node.core.space import Pattern
from forum.node.space.listeners import Provenance
from forum.replication.digest import BLOCK, Digests, RangeDigest, entry_hash
from forum.replication.messages import PullRequest
from forum.replication.vector import VersionVector
from tests.fixtures.nodes import eventually
from tests.replication.peers import Node, Nodes
from tests.replication.test_antientropy import FAST, converged, live, mesh

JOBS = Pattern(b"job-")


#: Without lending: b hands out a's tuples itself (as when a is cut off), so
#: a forged copy b took in can be handed out there, which these tests need.
#: With lending b asks a, which never wrote it (the test at the end).
UNLENT = dataclasses.replace(FAST, lending=False)


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[Nodes]:
    async with AsyncExitStack() as stack:
        yield Nodes("memory", tmp_path, stack, UNLENT)


async def forge_next(origin: Node, receiver: Node, payload: bytes) -> EntryId:
    """``receiver`` takes in, as if pushed, a Write under ``origin``'s next
    seq that ``origin`` never wrote (an insider with the cluster key)."""
    forged = EntryId(origin.me.origin, origin.forum.strand.vector()[origin.me.origin] + 1)
    held_by = Provenance(frozenset({origin.me.origin}))
    assert await receiver.forum.apply([Write(forged, payload)], held_by)
    return forged


def divergence_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("divergence")]


async def test_a_forged_write_under_equal_vectors_is_found_once_and_healed_to_the_origin(
    memory: Nodes, caplog: pytest.LogCaptureFixture
) -> None:
    """t0 a and b hold a's 5 jobs; t1 b takes in a forgery at a:6; t2 a writes
    its real a:6, which b skips (held): equal vectors, different live sets;
    t3 b's round with a finds the digests differ and puts a's a:6 in place."""
    caplog.set_level(logging.WARNING, logger="replication")
    a, b = await mesh(memory, "ab")
    await a.forum.write_many([b"job-%d" % i for i in range(5)])
    await converged([a, b], "a's jobs on b")

    forged = await forge_next(a, b, b"job-forged")
    await eventually(lambda: (str(forged), b"job-forged") in live(b.forum), 5, "forgery live")
    assert await a.forum.write(b"job-real") == forged

    healed = await converged([a, b], "b healed to a's entry")
    assert (str(forged), b"job-real") in healed
    assert all(payload != b"job-forged" for _, payload in healed)
    # Found once, not per round: later rounds compare equal digests.
    rounds = b.replicator._links[a.url].syncer
    before = b.forum.strand.vector()
    await a.forum.write(b"job-after")
    await converged([a, b], "a later write")
    assert b.forum.strand.vector() != before
    assert len(divergence_lines(caplog)) == 1, divergence_lines(caplog)
    assert str(forged) in divergence_lines(caplog)[0]
    assert rounds._unexplained is None


async def test_a_healed_node_restarts_with_the_origins_entry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The replacement is durable: the forged record is gone from the log,
    so b, reopened, holds a's entry (replay keeps the first copy of an id)."""
    async with AsyncExitStack() as stack:
        memory = Nodes("memory", tmp_path, stack, FAST)
        a, b = await mesh(memory, "ab")
        await a.forum.write(b"job-0")
        await converged([a, b], "a's job on b")
        forged = await forge_next(a, b, b"job-forged")
        await a.forum.write(b"job-real")
        await converged([a, b], "healed")
    async with AsyncExitStack() as stack:
        again = Nodes("memory", tmp_path, stack, FAST)
        b = await again.node("b")
        assert (str(forged), b"job-real") in live(b.forum)
        page = await b.forum.strand.read_page(forged.origin, forged.seq - 1, 1)
        assert page.entries == [Write(forged, b"job-real")]


async def forged_and_taken(memory: Nodes) -> tuple[Node, Node, EntryId]:
    """t0 b takes in a forgery at a:2, a's next seq; t1 b's worker takes it
    (the forged bytes: the id was handed out), and the Take reaches a."""
    a, b = await mesh(memory, "ab")
    await a.forum.write(b"job-0")
    await converged([a, b], "a's job on b")
    forged = await forge_next(a, b, b"job-forged")
    taken = await b.forum.take_entry(Pattern(b"job-forged"), timeout=5)
    assert taken is not None and taken.id == forged
    await eventually(lambda: a.forum.strand.vector().get(b.me.origin), 5, "b's Take on a")
    return a, b, forged


async def test_a_forgery_taken_before_the_origin_writes_its_seq_leaves_that_seq_taken(
    memory: Nodes,
) -> None:
    """t2 a writes a:2: taken is taken, it is dead at birth on a too (else it
    would be live there alone); t3 b's round with a swaps the bytes b holds
    and brings nothing back: a:2 is never handed out again."""
    a, b, forged = await forged_and_taken(memory)
    assert await a.forum.write(b"job-real") == forged
    assert live(a.forum) == {(f"{a.me.origin}:1", b"job-0")}
    final = await converged([a, b], "a:2 dead on both")
    assert final == {(f"{a.me.origin}:1", b"job-0")}
    await eventually(lambda: same_copy(a, b, 2), 5, "b's copy of a:2 replaced")
    assert await b.forum.take(JOBS) == b"job-0"
    assert await b.forum.take(JOBS) is None


def same_copy(a: Node, b: Node, upto: int) -> bool:
    """b holds what a holds of a's seqs 1..upto, byte for byte."""
    return b.replicator._digests.range(a.me.origin, 0, upto) == a.replicator._digests.range(
        a.me.origin, 0, upto
    )


async def reserved_forgery(memory: Nodes) -> tuple[Node, Node, EntryId]:
    """t0 b takes in a forgery at a:2; t1 a worker on b reserves it; t2 a
    writes the real a:2; t3 b's round with a swaps the bytes b holds."""
    a, b = await mesh(memory, "ab")
    await a.forum.write(b"job-0")
    await converged([a, b], "a's job on b")
    forged = await forge_next(a, b, b"job-forged")
    await eventually(lambda: (str(forged), b"job-forged") in live(b.forum), 5, "forgery live")
    [held] = await b.forum.reserve_many(Pattern(b"job-forged"), lease=30, limit=1)
    assert held.id == forged
    await a.forum.write(b"job-real")
    await eventually(lambda: same_copy(a, b, 2), 5, "b's copy of a:2 replaced")
    return a, b, forged


async def test_a_forgery_reserved_when_found_is_not_handed_out_again(memory: Nodes) -> None:
    """The reservation stands (the id was handed out); its ack takes a:2
    everywhere; the real bytes are never handed out as a second copy."""
    a, b, forged = await reserved_forgery(memory)
    assert (str(forged), b"job-real") not in live(b.forum)
    assert await b.forum.ack(forged)
    final = await converged([a, b], "a:2 dead on both")
    assert final == {(f"{a.me.origin}:1", b"job-0")}


async def test_a_forgery_reserved_when_found_and_released_puts_back_the_real_bytes(
    memory: Nodes,
) -> None:
    a, b, forged = await reserved_forgery(memory)
    assert await b.forum.release(forged)
    final = await converged([a, b], "the real a:2 live on both")
    assert (str(forged), b"job-real") in final


async def test_compaction_on_one_node_is_no_divergence(
    memory: Nodes, caplog: pytest.LogCaptureFixture
) -> None:
    """Digests compare only above both floors: a node that compacted what the
    other still holds finds nothing to blame, and logs nothing."""
    caplog.set_level(logging.WARNING, logger="replication")
    a, b = await mesh(memory, "ab")
    await a.forum.write_many([b"job-%d" % i for i in range(300)])
    await converged([a, b], "a's jobs on b")
    assert len(await a.forum.take_many(JOBS, limit=290)) == 290
    await converged([a, b], "the takes on b")
    await eventually(
        lambda: a.replicator.horizon() == a.forum.strand.vector(), 5, "a hears b holds it all"
    )
    report = await a.forum.compact(a.replicator.horizon(), seal=True)
    assert report.entries_dropped > 0
    await a.forum.write(b"job-after")
    await converged([a, b], "a's later write")
    syncer = b.replicator._links[a.url].syncer
    await eventually(lambda: syncer._their_floor > 0, 5, "b learns a's floor")
    assert divergence_lines(caplog) == []


async def test_digests_are_kept_as_entries_arrive_and_let_go_below_the_floor(
    memory: Nodes,
) -> None:
    a = await memory.node("a")
    digests = Digests(a.forum.strand)
    await digests.build()
    written = [Write(i, b"x") for i in await a.forum.write_many([b"x"] * 300)]
    digests.add(written)
    origin = a.me.origin
    whole = digests.range(origin, 0, 300)
    assert whole.count == 300
    rebuilt = Digests(a.forum.strand)
    await rebuilt.build()
    assert rebuilt.range(origin, 0, 300) == whole
    parts = digests.blocks(origin, 10, 300)
    assert [n for n, _, _ in parts] == [0, 1]
    assert parts[0][1] == BLOCK - 10
    assert digests.range(origin, 299, 300).xor == entry_hash(written[-1])


async def test_a_range_digest_is_the_xor_of_the_hashes_it_covers(memory: Nodes) -> None:
    """The one-step sum (every block in range) and the block by block walk
    agree with the hashes themselves, for ranges cutting blocks anywhere."""
    a = await memory.node("a")
    written = [Write(i, b"p%d" % i.seq) for i in await a.forum.write_many([b""] * 1000)]
    digests = Digests(a.forum.strand)
    digests.add(written[i] for i in range(1000) if i % 7)  # some seqs not hashed
    rng = random.Random(27)
    print("seed 27")
    for _ in range(300):
        lo = rng.randrange(0, 1000)
        upto = rng.randrange(lo, 1001)
        kept = [entry_hash(e) for e in written[lo:upto] if (e.id.seq - 1) % 7]
        xor = 0
        for value in kept:
            xor ^= value
        assert digests.range(a.me.origin, lo, upto) == RangeDigest(lo, upto, len(kept), xor)


async def test_only_a_pull_with_a_digest_gets_a_page_with_blocks(memory: Nodes) -> None:
    """A pull of the previous release (no ``X-Forum-Digest``) is answered
    as before, whatever it holds; one whose digest differs gets the blocks."""
    a, b = await mesh(memory, "ab")
    await a.forum.write_many([b"job-%d" % i for i in range(300)])
    await converged([a, b], "a's jobs on b")
    vector = VersionVector.of(b.forum.strand)
    old = PullRequest(b.me, vector, frozenset(), (), 10, 1000)
    assert (await a.replicator.serve_pull(old)).digest is None
    wrong = RangeDigest(0, 300, 300, 12345)
    answer = await a.replicator.serve_pull(dataclasses.replace(old, digest=wrong))
    assert answer.digest is not None
    lo, upto, blocks = answer.digest
    assert (lo, upto, [n for n, _, _ in blocks]) == (0, 300, [0, 1])
    same = a.replicator._digests.range(a.me.origin, 0, 300)
    assert (await a.replicator.serve_pull(dataclasses.replace(old, digest=same))).digest is None


async def test_with_lending_a_forgery_of_a_live_writers_seq_is_never_handed_out(
    tmp_path: Path,
) -> None:
    """t0 b takes in a forgery at a:2 while a is alive; t1 a taker on b asks a
    for it (a lends its own tuples only), gets nothing, and b does not hand
    it out itself; t2 a writes the real a:2, which b's taker gets, from a."""
    async with AsyncExitStack() as stack:
        memory = Nodes("memory", tmp_path, stack, FAST)
        a, b = await mesh(memory, "ab")
        await a.forum.write(b"job-0")
        await converged([a, b], "a's job on b")
        await a.forum.take(JOBS)
        await converged([a, b], "a's take on b")
        forged = await forge_next(a, b, b"job-forged")
        await eventually(lambda: (str(forged), b"job-forged") in live(b.forum), 5, "forgery live")
        assert await b.forum.take(JOBS) is None
        assert await b.forum.reserve_many(JOBS, lease=30, limit=5) == []
        assert await a.forum.write(b"job-real") == forged
        await eventually(lambda: same_copy(a, b, 2), 5, "b's copy of a:2 replaced")
        taken = await b.forum.take_entry(JOBS, timeout=5)
        assert taken is not None and (taken.id, taken.payload) == (forged, b"job-real")
        assert b.forum.stats().double_takes == a.forum.stats().double_takes == 0
