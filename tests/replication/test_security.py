"""Replication requests are checked like client input: unauthenticated, malformed
or forged ones are refused and change nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import aiohttp
import msgpack
import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.entries import EntryId, Take, Write
from forum.node.core.space import Pattern
from forum.replication.auth import SIGNATURE_HEADER, ClusterAuth
from forum.replication.messages import (
    LEND_PATH,
    LENT_PATH,
    MEMBERS_PATH,
    PULL_PATH,
    PUSH_PATH,
    LendRequest,
    LentNotice,
    Member,
    PullRequest,
    Push,
    decode_loan,
    decode_members,
    decode_push_ack,
    encode,
)
from forum.replication.vector import VersionVector
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually
from tests.replication.conftest import FAST

pytestmark = pytest.mark.slow

SECRET = "s3cret"
SENDER = Member("intruder-1", "http://127.0.0.1:9")
GOOD = Write(EntryId("peer-1", 1), b"job-good")


@pytest.fixture
async def secured(forum_nodes: ForumNodes) -> NodeProcess:
    return await forum_nodes.start("guarded", "--cluster-secret", SECRET, env=FAST)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post(
    http: aiohttp.ClientSession,
    node: NodeProcess,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
) -> tuple[int, bytes, Mapping[str, str]]:
    async with http.post(node.url + path, data=body, headers=dict(headers)) as response:
        return response.status, await response.read(), response.headers


def push_body(*entries: Write | Take) -> bytes:
    return encode(Push(SENDER, frozenset(), entries))


def changed(body: bytes, **fields: object) -> bytes:
    packed: bytes = msgpack.packb(msgpack.unpackb(body, raw=False) | fields, use_bin_type=True)
    return packed


async def test_unauthenticated_pushes_are_refused_and_change_nothing(
    secured: NodeProcess, http: aiohttp.ClientSession
) -> None:
    body = push_body(GOOD)
    async with ForumClient(secured.url) as client:
        origin = (await client.status()).origin
    signed = ClusterAuth(SECRET).sign_request("POST", PUSH_PATH, body, to=origin)
    auth = ClusterAuth(SECRET)
    attempts = {
        "no credentials": {},
        "the bearer secret only": {"Authorization": f"Bearer {SECRET}"},
        "the wrong secret": ClusterAuth("guess").sign_request("POST", PUSH_PATH, body, origin)
        | {"Authorization": f"Bearer {SECRET}"},
        "a signature for another route": auth.sign_request("POST", PULL_PATH, body, origin),
        "a signature for another body": auth.sign_request("POST", PUSH_PATH, b"x", origin),
        "a signature for another node": auth.sign_request("POST", PUSH_PATH, body, "node-x"),
        "a signature for anyone": auth.sign_request("POST", PUSH_PATH, body),
        "a stale signature": ClusterAuth(SECRET, clock=lambda: 1_000_000.0).sign_request(
            "POST", PUSH_PATH, body, origin
        ),
    }
    for what, headers in attempts.items():
        status, _, _ = await post(http, secured, PUSH_PATH, body, headers)
        assert status == 401, what
    async with ForumClient(secured.url) as client:
        assert await client.count(Pattern(b"")) == 0
        assert (await client.status()).entries == 0

    status, answer, headers = await post(http, secured, PUSH_PATH, body, signed)
    assert status == 200
    ClusterAuth(SECRET).verify_response(signed, headers, answer)  # the answer is signed too
    assert decode_push_ack(answer).applied == 1
    async with ForumClient(secured.url) as client:
        # A remote write surfaces after the node's short stagger (forum.node.space.forum).
        await eventually(lambda: _count(client, 1), what="the pushed tuple live")


async def test_malformed_and_forged_pushes_are_refused_and_change_nothing(
    secured: NodeProcess, http: aiohttp.ClientSession
) -> None:
    async with ForumClient(secured.url) as client:
        own = (await client.status()).origin
        await client.write(b"job-own-1")
    auth = ClusterAuth(SECRET)
    bodies = {
        "not msgpack": b"\xc1\xc1",
        "not a map": msgpack.packb([1, 2, 3]),
        "a pull sent to push": encode(
            PullRequest(SENDER, VersionVector(), frozenset(), (), 10, 10)
        ),
        "an unknown key": changed(push_body(GOOD), sneaky=1),
        "a bad entry": changed(push_body(GOOD), entries=[[1, 0, "peer-1", 0, b"job-seq-0"]]),
        # A good entry with a forged one: nothing of the batch may land.
        "an entry of the node's own origin it never wrote": push_body(
            GOOD, Write(EntryId(own, 2), b"job-forged")
        ),
        "a take of the node's own origin it never made": push_body(
            GOOD, Take(EntryId(own, 5), EntryId(own, 1))
        ),
        "a seq absurdly far ahead": push_body(GOOD, Write(EntryId("peer-2", 10**12), b"job-x")),
        "ourselves as sender": encode(Push(Member(own, None), frozenset(), (GOOD,))),
    }
    for what, body in bodies.items():
        status, answer, _ = await post(
            http, secured, PUSH_PATH, body, auth.sign_request("POST", PUSH_PATH, body, to=own)
        )
        assert 400 <= status < 500, what
        assert b'"error"' in answer, what
    async with ForumClient(secured.url) as client:
        status_doc = await client.status()
        assert status_doc.entries == 1
        assert [t.payload for t in (await client.list(Pattern(b""))).tuples] == [b"job-own-1"]
    async with http.get(secured.url + "/metrics") as response:
        metrics = await response.text()
    assert 'forum_replication_requests_refused_total{reason="bad_message"}' in metrics


async def test_signed_pulls_and_member_lists_are_served(
    secured: NodeProcess, http: aiohttp.ClientSession
) -> None:
    auth = ClusterAuth(SECRET)
    headers = auth.sign_request("GET", MEMBERS_PATH, b"")
    async with http.get(secured.url + MEMBERS_PATH, headers=headers) as response:
        assert response.status == 200
        answer = await response.read()
        auth.verify_response(headers, response.headers, answer)
    listing = decode_members(answer)
    assert listing.sender.url == secured.url
    assert SIGNATURE_HEADER in response.headers

    body = encode(PullRequest(SENDER, VersionVector(), frozenset(), (), 10, 1000))
    status, _, _ = await post(http, secured, PULL_PATH, body, {})
    assert status == 401


async def test_without_a_secret_bad_bodies_still_get_400(
    forum_nodes: ForumNodes, http: aiohttp.ClientSession
) -> None:
    node = await forum_nodes.start("open", env=FAST)
    status, _, _ = await post(http, node, PUSH_PATH, b"\x00garbage", {})
    assert status == 400
    status, answer, _ = await post(http, node, PUSH_PATH, push_body(GOOD), {})
    assert status == 200 and decode_push_ack(answer).applied == 1


async def _count(client: ForumClient, n: int) -> bool:
    return await client.count(Pattern(b"job-")) == n


async def test_lending_routes_take_only_requests_signed_for_this_node(
    secured: NodeProcess, http: aiohttp.ClientSession
) -> None:
    """A loan reserves the node's tuples: unsigned, or signed for anyone,
    it is refused and nothing is reserved; malformed, a 400; signed for the
    node, its own tuples are lent (and a notice gives them back)."""
    async with ForumClient(secured.url) as client:
        origin = (await client.status()).origin
        await client.write(b"job-1")
    auth = ClusterAuth(SECRET)
    lend = encode(LendRequest(SENDER, b"job-", 5, 30_000))
    for headers in ({}, auth.sign_request("POST", LEND_PATH, lend)):
        status, _, _ = await post(http, secured, LEND_PATH, lend, headers)
        assert status == 401
    bad = changed(lend, limit=0)
    status, _, _ = await post(
        http, secured, LEND_PATH, bad, auth.sign_request("POST", LEND_PATH, bad, origin)
    )
    assert status == 400
    async with ForumClient(secured.url) as client:
        assert (await client.status()).reserved == 0
    signed = auth.sign_request("POST", LEND_PATH, lend, origin)
    status, answer, headers = await post(http, secured, LEND_PATH, lend, signed)
    assert status == 200
    auth.verify_response(signed, headers, answer)
    loan = decode_loan(answer)
    assert [e.payload for e in loan.entries] == [b"job-1"] and loan.deliveries == (1,)
    async with ForumClient(secured.url) as client:
        assert (await client.status()).reserved == 1
        assert await client.take(Pattern(b"job-")) is None  # lent: not handed out here
    back = encode(LentNotice(SENDER, (loan.entries[0].id.seq,), (), 1_000))
    for headers in ({}, auth.sign_request("POST", LENT_PATH, back)):
        status, _, _ = await post(http, secured, LENT_PATH, back, headers)
        assert status == 401
    status, _, _ = await post(
        http, secured, LENT_PATH, back, auth.sign_request("POST", LENT_PATH, back, origin)
    )
    assert status == 200
    async with ForumClient(secured.url) as client:
        assert await client.take(Pattern(b"job-")) == b"job-1"
