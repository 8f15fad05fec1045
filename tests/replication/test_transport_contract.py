"""One suite, two transports: :class:`MemoryTransport` (peers in one process)
and :class:`HttpTransport` against real aiohttp servers on loopback must
answer the same, so replication logic tested over the one in milliseconds
holds over the other.

Each node here is a real Forum and a running Replicator with no seeds (no
tasks of its own); the test calls it through the transport under test, as a
peer's pusher and syncer do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from forum.node.core.entries import EntryId, Write
from forum.node.core.space import Pattern
from forum.replication.auth import ANYONE
from forum.replication.errors import (
    BadSignature,
    PeerIsSelf,
    PeerRejected,
    PeerUnavailable,
    Unauthenticated,
)
from forum.replication.messages import (
    MEMBERS_PATH,
    PULL_PATH,
    PUSH_PATH,
    PullRequest,
    Push,
    decode_members,
    decode_page,
    decode_push_ack,
    encode,
)
from forum.replication.vector import VersionVector
from tests.replication.peers import SECRET, Node, Nodes


@pytest.fixture(params=["memory", "http"])
async def nodes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Nodes]:
    async with AsyncExitStack() as stack:
        yield Nodes(request.param, tmp_path, stack)


async def _push(nodes: Nodes, sender: Node, to: Node, *payloads: bytes) -> int:
    ids = [await sender.forum.write(p) for p in payloads]
    entries = tuple(Write(i, p) for i, p in zip(ids, payloads, strict=True))
    body = encode(Push(sender.me, frozenset(), entries))
    transport = await nodes.transport()
    answer = await transport.call(to.url, "POST", PUSH_PATH, body, to=to.me.origin)
    return decode_push_ack(answer).applied


async def test_a_push_is_applied_and_acknowledged(nodes: Nodes) -> None:
    a, b = await nodes.node("a"), await nodes.node("b")
    assert await _push(nodes, a, b, b"job-1", b"job-2") == 2
    assert await b.forum.count(Pattern(b"job-")) == 2
    assert b.replicator.membership.by_origin(a.me.origin) is not None  # b heard of a


async def test_a_pull_answers_with_what_the_asker_lacks(nodes: Nodes) -> None:
    a, b = await nodes.node("a"), await nodes.node("b")
    written = await b.forum.write(b"job-b")
    request = PullRequest(
        a.me, VersionVector.of(a.forum.strand), frozenset(), (a.me,), 100, 1 << 20
    )
    transport = await nodes.transport()
    page = decode_page(await transport.call(b.url, "POST", PULL_PATH, encode(request)))
    assert page.sender == b.me and not page.more
    assert [entry.id for entry in page.entries] == [written]
    assert page.vector.holds(written)


class Samples:
    """The clock samples a transport reports, by peer URL."""

    def __init__(self) -> None:
        self.offsets: dict[str, list[float]] = {}

    def sample(self, peer: str, offset: float) -> None:
        self.offsets.setdefault(peer, []).append(offset)


async def test_both_ends_of_an_exchange_sample_the_other_s_clock(nodes: Nodes) -> None:
    a, b = await nodes.node("a"), await nodes.node("b")
    request = PullRequest(a.me, VersionVector(), frozenset(), (), 100, 1 << 20)
    samples = Samples()
    transport = await nodes.transport(clocks=samples)
    await transport.call(b.url, "POST", PULL_PATH, encode(request))
    # One machine, one clock: what is left is each estimate's error.
    (caller_saw,) = samples.offsets[b.url]
    assert abs(caller_saw) < 0.5
    callee_saw = b.replicator.clocks.offset(a.url)
    assert callee_saw is not None and abs(callee_saw) < 0.5


async def test_the_member_list_names_the_node(nodes: Nodes) -> None:
    b = await nodes.node("b")
    transport = await nodes.transport()
    listing = decode_members(await transport.call(b.url, "GET", MEMBERS_PATH))
    assert listing.sender == b.me


@pytest.mark.parametrize("to", ["someone-else", ANYONE])
async def test_a_push_not_signed_for_its_receiver_is_unauthenticated(nodes: Nodes, to: str) -> None:
    a, b = await nodes.node("a"), await nodes.node("b")
    body = encode(Push(a.me, frozenset(), (Write(EntryId(a.me.origin, 1), b"job"),)))
    transport = await nodes.transport()
    with pytest.raises(Unauthenticated) as refused:
        await transport.call(b.url, "POST", PUSH_PATH, body, to=to)
    assert refused.value.status == 401 and not refused.value.retriable
    assert await b.forum.count(Pattern(b"")) == 0


async def test_a_wrong_key_is_unauthenticated(nodes: Nodes) -> None:
    b = await nodes.node("b")
    transport = await nodes.transport(key="not-the-key")
    with pytest.raises(Unauthenticated):
        await transport.call(b.url, "GET", MEMBERS_PATH)


async def test_an_unsigned_answer_is_refused(nodes: Nodes) -> None:
    """A node without the key answers unsigned; a caller with the key trusts none of it."""
    open_node = await nodes.node("open", key=None)
    transport = await nodes.transport(key=SECRET)
    with pytest.raises(BadSignature):
        await transport.call(open_node.url, "GET", MEMBERS_PATH)


async def test_a_call_that_comes_back_to_its_sender_is_peer_is_self(nodes: Nodes) -> None:
    b = await nodes.node("b")
    body = encode(Push(b.me, frozenset(), ()))
    transport = await nodes.transport()
    with pytest.raises(PeerIsSelf) as refused:
        await transport.call(b.url, "POST", PUSH_PATH, body, to=b.me.origin)
    assert refused.value.status == 409


async def test_a_malformed_body_is_rejected_and_not_retried(nodes: Nodes) -> None:
    b = await nodes.node("b")
    transport = await nodes.transport()
    with pytest.raises(PeerRejected) as refused:
        await transport.call(b.url, "POST", PUSH_PATH, b"\x93junk", to=b.me.origin)
    assert refused.value.status == 400 and not refused.value.retriable
    assert "not a msgpack body" in str(refused.value)


async def test_forged_entries_are_rejected_and_none_applied(nodes: Nodes) -> None:
    a, b = await nodes.node("a"), await nodes.node("b")
    forged = Write(EntryId(b.me.origin, 7), b"never written by b")
    body = encode(Push(a.me, frozenset(), (Write(EntryId(a.me.origin, 1), b"ok"), forged)))
    transport = await nodes.transport()
    with pytest.raises(PeerRejected) as refused:
        await transport.call(b.url, "POST", PUSH_PATH, body, to=b.me.origin)
    assert refused.value.status == 400
    assert await b.forum.count(Pattern(b"")) == 0


async def test_a_node_not_replicating_is_retriable(nodes: Nodes) -> None:
    starting = await nodes.node("starting", running=False)
    transport = await nodes.transport()
    with pytest.raises(PeerRejected) as refused:
        await transport.call(starting.url, "GET", MEMBERS_PATH)
    assert refused.value.status == 503 and refused.value.retriable


async def test_nothing_at_the_url_is_unavailable(nodes: Nodes) -> None:
    transport = await nodes.transport()
    with pytest.raises(PeerUnavailable) as raised:
        await transport.call(nodes.nowhere(), "GET", MEMBERS_PATH)
    assert raised.value.retriable
