"""Lending (issue 29): while a tuple's writer is alive, only it hands the tuple
out; a peer that wants one asks the writer to lend it. In one process
(peers over the in-memory transport): every job handed out once, loans
released, extended and run out as the borrower's reservations are, and a
writer cut off is not waited for."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from forum.node.core.entries import EntryId, Take, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.replication.errors import BadMessage
from forum.replication.lending import Lending
from forum.replication.membership import PeerState
from forum.replication.messages import LEND_PATH, Loan, Member
from tests.fixtures.nodes import eventually
from tests.replication.peers import Node, Nodes
from tests.replication.test_antientropy import FAST, converged, mesh, state_of

JOBS = Pattern(b"job-")


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[Nodes]:
    async with AsyncExitStack() as stack:
        yield Nodes("memory", tmp_path, stack, FAST)


def doubles(*nodes: Node) -> int:
    return sum(node.forum.stats().double_takes for node in nodes)


async def all_met(nodes: list[Node]) -> None:
    """Until each node has reached every other (a writer not reached yet,
    the first milliseconds after a start, is not asked: its tuples are
    handed out at their turns, as without lending)."""

    def met() -> bool:
        return all(
            state_of(node, other) is PeerState.ALIVE
            for node in nodes
            for other in nodes
            if other is not node
        )

    await eventually(met, 5, "every node reached every other")


def reserved(forum: Forum) -> int:
    return forum.stats().reserved


async def test_a_writers_tuples_reserved_on_a_peer_are_lent_and_acked_once(
    memory: Nodes,
) -> None:
    """t0 a writes 10 jobs (no taker there); t1 b reserves them: a lends them
    (reserved on a for b, so a hands none out); t2 b acks: b's Takes end
    a's loans, no double take."""
    a, b = await mesh(memory, "ab")
    await a.forum.write_many([b"job-%d" % i for i in range(10)])
    await converged([a, b], "a's jobs on b")
    held = await b.forum.reserve_many(JOBS, lease=30, limit=10)
    assert sorted(r.payload for r in held) == sorted(b"job-%d" % i for i in range(10))
    assert all(r.id.origin == a.me.origin and r.deliveries == 1 for r in held)
    assert reserved(a.forum) == 10  # in b's hands: a hands none out
    assert await a.forum.take(JOBS) is None
    assert await b.forum.ack_many([r.id for r in held]) == [True] * 10
    await eventually(lambda: reserved(a.forum) == 0, 5, "b's Takes end a's loans")
    assert await converged([a, b], "all taken") == set()
    assert doubles(a, b) == 0
    assert b.replicator.lending.lent == 10


async def test_a_tuple_released_on_the_borrower_is_live_again_at_its_writer(
    memory: Nodes,
) -> None:
    a, b = await mesh(memory, "ab")
    await a.forum.write(b"job-1")
    await converged([a, b], "a's job on b")
    held = await b.forum.reserve(JOBS, lease=30)
    assert held is not None and reserved(a.forum) == 1
    assert await b.forum.release(held.id)
    await eventually(lambda: reserved(a.forum) == 0, 5, "a hears it is back")
    assert await a.forum.take(JOBS) == b"job-1"
    await converged([a, b], "taken on a")
    assert doubles(a, b) == 0


async def test_an_extension_on_the_borrower_keeps_the_writers_loan(memory: Nodes) -> None:
    """b reserves for 0.8 s and extends it every 0.3 s, for 1.2 s in all (past
    the first lease): a keeps the tuple lent all along (its own takers get
    nothing), and b's ack is no double take. Each extension has 0.5 s to
    spare: with 0.05 s (0.3 s leases) a loaded machine let one run out."""
    a, b = await mesh(memory, "ab")
    await a.forum.write(b"job-1")
    await converged([a, b], "a's job on b")
    held = await b.forum.reserve(JOBS, lease=0.8)
    assert held is not None
    for _ in range(4):
        await asyncio.sleep(0.3)
        assert await b.forum.extend(held.id, 0.8)
        assert await a.forum.take(JOBS) is None
    assert await b.forum.ack(held.id)
    await converged([a, b], "taken")
    assert doubles(a, b) == 0


async def test_a_loan_run_out_on_the_borrower_comes_back_counted(memory: Nodes) -> None:
    """b's holder dies: b's lease and a's loan run out; the tuple is handed
    out again, its second delivery, and nothing is lost."""
    a, b = await mesh(memory, "ab")
    await a.forum.write(b"job-1")
    await converged([a, b], "a's job on b")
    first = await b.forum.reserve(JOBS, lease=0.2)
    assert first is not None and first.deliveries == 1
    await eventually(lambda: reserved(a.forum) == 0, 5, "a's loan ran out")
    again = await b.forum.reserve(JOBS, lease=30, timeout=5)
    assert again is not None and again.id == first.id
    assert again.deliveries == 2
    assert await b.forum.ack(again.id)
    await converged([a, b], "taken")
    assert doubles(a, b) == 0


async def test_a_taker_waiting_on_a_peer_gets_a_new_write_by_a_loan(memory: Nodes) -> None:
    a, b = await mesh(memory, "ab")
    waiting = asyncio.create_task(b.forum.take_entry(JOBS, timeout=5))
    await eventually(lambda: b.forum.stats().waiting_takers == 1, what="b's taker waiting")
    written = await a.forum.write(b"job-1")
    taken = await waiting
    assert taken is not None and taken.id == written
    await converged([a, b], "taken")
    assert doubles(a, b) == 0


async def test_takers_on_every_node_hand_out_each_job_once(memory: Nodes) -> None:
    """Three nodes, four takers on each reserving and acking in a loop while
    a writes 150 jobs and b 50, in batches: each job is acked once, and no
    node counts a double take."""
    a, b, c = await mesh(memory, "abc")
    await all_met([a, b, c])
    acked: list[bytes] = []
    done = asyncio.Event()

    async def work(node: Node) -> None:
        while not done.is_set():
            held = await node.forum.reserve(JOBS, lease=30, timeout=0.2)
            if held is not None:
                await asyncio.sleep(0.001)
                assert await node.forum.ack(held.id)
                acked.append(held.payload)

    workers = [asyncio.create_task(work(node)) for node in (a, b, c) for _ in range(4)]
    for first in range(0, 150, 15):
        await a.forum.write_many([b"job-a%d" % i for i in range(first, first + 15)])
        await b.forum.write_many([b"job-b%d" % i for i in range(first // 3, first // 3 + 5)])
        await asyncio.sleep(0.01)
    await eventually(lambda: len(acked) >= 200, 20, "every job acked")
    done.set()
    await asyncio.gather(*workers)
    assert sorted(acked) == sorted(
        [b"job-a%d" % i for i in range(150)] + [b"job-b%d" % i for i in range(50)]
    )
    await converged([a, b, c], "all taken")
    assert doubles(a, b, c) == 0
    assert c.replicator.lending.lent > 0  # c wrote none: what it ran was lent


async def test_a_cut_off_writers_tuples_are_handed_out_where_they_are(memory: Nodes) -> None:
    """a is cut off (suspect on b): b takes a's tuples itself, at once, as
    without lending (a partition must not stop the work)."""
    a, b = await mesh(memory, "ab")
    await a.forum.write_many([b"job-1", b"job-2"])
    await converged([a, b], "a's jobs on b")
    memory.network.cut(a.url)
    await eventually(lambda: state_of(b, a) is not PeerState.ALIVE, 5, "a suspect on b")
    assert await b.forum.take(JOBS) is not None
    assert b.replicator.lending.asked == 0


async def test_a_writer_too_slow_to_lend_is_not_waited_for(
    memory: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a takes longer than ``lend_timeout`` to answer loans (hung, as a
    SIGSTOPped node): b's take gets a's tuple itself after that bound, and
    b's next takes ask a no more (for ``dead_after``): they are at once."""
    a, b = await mesh(memory, "ab")
    await a.forum.write_many([b"job-1", b"job-2"])
    await converged([a, b], "a's jobs on b")
    lending = b.replicator.lending
    transport = lending._transport
    call = transport.call

    async def slow(peer: str, method: str, path: str, *args: Any, **kwargs: Any) -> bytes:
        if path == LEND_PATH:
            await asyncio.sleep(30)
        return await call(peer, method, path, *args, **kwargs)

    monkeypatch.setattr(transport, "call", slow)
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await b.forum.take(JOBS) is not None
    assert loop.time() - began >= FAST.lend_timeout
    assert not lending.owns(a.me.origin)
    assert await b.forum.take(JOBS) is not None
    assert lending.asked == 1


async def test_lending_off_hands_out_copies_at_their_turns(tmp_path: Path) -> None:
    """``lending = False`` (``FORUM_REPL_LENDING=0``): a node takes the
    tuples it holds, its writer alive or not (kept to compare)."""
    async with AsyncExitStack() as stack:
        memory = Nodes("memory", tmp_path, stack, dataclasses.replace(FAST, lending=False))
        a, b = await mesh(memory, "ab")
        await a.forum.write(b"job-1")
        await converged([a, b], "a's job on b")
        assert await b.forum.take(JOBS) == b"job-1"
        assert b.replicator.lending.asked == 0


WRITER = Member("a-1", "http://a:1")


@pytest.mark.parametrize(
    ("loan", "why"),
    [
        (Loan(Member("c-1", None), (Write(EntryId("a-1", 1), b"job-1"),), (1,)), "came from"),
        (Loan(WRITER, (Write(EntryId("c-1", 1), b"job-1"),), (1,)), "not its own"),
        (Loan(WRITER, (Take(EntryId("a-1", 2), EntryId("c-1", 1)),), (1,)), "not its own"),
        (Loan(WRITER, (Write(EntryId("a-1", 1), b"mail-1"),), (1,)), "not under the prefix"),
        (
            Loan(WRITER, tuple(Write(EntryId("a-1", i), b"job") for i in (1, 2)), (1, 1)),
            "2 tuples, 1 asked",
        ),
    ],
)
def test_a_loan_that_is_not_what_was_asked_is_refused(loan: Loan, why: str) -> None:
    """Nothing of it is stored or handed out (the borrower asks again later)."""
    with pytest.raises(BadMessage, match=why):
        Lending._check(loan, "a-1", b"job-", 1)
