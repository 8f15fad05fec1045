"""Who may call the cluster routes, against real ``forum serve`` processes.

* A node with only ``--token`` signs and checks replication with the token
  (its cluster key): an unsigned or bearer-only request is 401 and changes
  nothing, and nodes that share the token still replicate.
* A signed push names its receiver's origin: replayed to another node of the
  same cluster it is 401 and changes nothing there.
* A node reachable from the network with no credentials says so at start.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.config.node import NodeConfig
from forum.node.core.entries import EntryId, Take, Write
from forum.node.core.space import Pattern
from forum.node.serve import exposure_warning
from forum.replication.auth import ClusterAuth
from forum.replication.messages import (
    MEMBERS_PATH,
    PUSH_PATH,
    Member,
    Push,
    decode_push_ack,
    encode,
)
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually, free_port
from tests.replication.conftest import FAST, live_set, mesh

TOKEN = "t0ken"
SECRET = "s3cret"
INTRUDER = Member("intruder-1", "http://127.0.0.1:9")
#: The start-up warning of a node open to the network (forum.node.serve).
WARNING = "anyone who can reach"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post(
    http: aiohttp.ClientSession, node: NodeProcess, body: bytes, headers: Mapping[str, str]
) -> int:
    async with http.post(node.url + PUSH_PATH, data=body, headers=dict(headers)) as response:
        return response.status


def push_body(*entries: Write | Take) -> bytes:
    return encode(Push(INTRUDER, frozenset(), entries))


@pytest.mark.slow
async def test_a_token_only_node_refuses_unsigned_and_bearer_only_cluster_calls(
    forum_nodes: ForumNodes, http: aiohttp.ClientSession
) -> None:
    node = await forum_nodes.start("guarded", env=FAST, token=TOKEN)
    async with ForumClient(node.url, TOKEN) as client:
        real = await client.write(b"job-real")
        origin = (await client.status()).origin
        before = await live_set(client)
        entries = (await client.status()).entries
    # A take of the real tuple and an injected write, as an intruder would send them.
    forged = push_body(Take(EntryId("intruder-1", 1), real), Write(EntryId("intruder-1", 2), b"x"))

    async with http.get(node.url + MEMBERS_PATH) as response:
        assert response.status == 401
        assert origin not in await response.text()  # the node's identity does not leak
    assert await post(http, node, forged, {}) == 401
    assert await post(http, node, forged, {"Authorization": f"Bearer {TOKEN}"}) == 401
    async with http.get(node.url + "/v1/cluster/anything") as response:
        assert response.status == 401  # unmatched cluster paths need the key too

    async with ForumClient(node.url, TOKEN) as client:
        assert await live_set(client) == before  # the real tuple is still live
        assert (await client.status()).entries == entries  # nothing injected, no take
        assert await client.count(Pattern(b"x")) == 0


@pytest.mark.slow
async def test_a_token_only_node_accepts_pushes_signed_with_the_token(
    forum_nodes: ForumNodes, http: aiohttp.ClientSession
) -> None:
    node = await forum_nodes.start("guarded", env=FAST, token=TOKEN)
    async with ForumClient(node.url, TOKEN) as client:
        origin = (await client.status()).origin
    body = push_body(Write(EntryId("peer-1", 1), b"job-pushed"))
    headers = ClusterAuth(TOKEN).sign_request("POST", PUSH_PATH, body, to=origin)
    async with http.post(node.url + PUSH_PATH, data=body, headers=headers) as response:
        assert response.status == 200
        assert decode_push_ack(await response.read()).applied == 1


@pytest.mark.slow
async def test_nodes_sharing_a_token_and_no_secret_replicate(forum_nodes: ForumNodes) -> None:
    a, b = mesh(forum_nodes, "ab", "--token", TOKEN)
    await forum_nodes.start_all()
    async with ForumClient(a.url, TOKEN) as on_a, ForumClient(b.url, TOKEN) as on_b:
        await on_a.write(b"job-from-a")
        await on_b.write(b"job-from-b")

        async def both_have_both() -> bool:
            for client in (on_a, on_b):
                if await client.count(Pattern(b"job-")) != 2:
                    return False
            return True

        await eventually(both_have_both, what="a's and b's writes on both nodes")


@pytest.mark.slow
async def test_a_push_signed_for_one_node_is_refused_by_another(
    forum_nodes: ForumNodes, http: aiohttp.ClientSession
) -> None:
    b = await forum_nodes.start("b", "--cluster-secret", SECRET, env=FAST)
    c = await forum_nodes.start("c", "--cluster-secret", SECRET, env=FAST)
    async with ForumClient(b.url) as on_b:
        b_origin = (await on_b.status()).origin
    body = push_body(Write(EntryId("peer-1", 1), b"job-for-b"))
    signed_for_b = ClusterAuth(SECRET).sign_request("POST", PUSH_PATH, body, to=b_origin)

    assert await post(http, c, body, signed_for_b) == 401  # the replay, within the window
    assert await post(http, b, body, signed_for_b) == 200  # the original
    async with ForumClient(c.url) as on_c:
        assert (await on_c.status()).entries == 0
        assert await live_set(on_c) == set()
    # A push addressed to anyone is not a push to this node either.
    anyone = ClusterAuth(SECRET).sign_request("POST", PUSH_PATH, body)
    assert await post(http, c, body, anyone) == 401


@pytest.mark.slow
async def test_a_node_open_to_the_network_warns_at_start(forum_nodes: ForumNodes) -> None:
    exposed = forum_nodes.make("exposed")
    exposed.args += ["--listen", f"0.0.0.0:{free_port()}"]  # the last --listen wins
    exposed.port = int(exposed.args[-1].rpartition(":")[2])  # readiness probes loopback
    local = forum_nodes.make("local")
    await forum_nodes.start_all()
    warnings = [line for line in exposed.log_text().splitlines() if WARNING in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0], exposed.log_text()
    assert "read, take and inject tuples" in warnings[0]
    assert WARNING not in local.log_text()


@pytest.mark.parametrize(
    ("listen", "token", "secret", "warned"),
    [
        ("0.0.0.0:7070", None, None, "read, take and inject tuples"),
        ("[::]:7070", None, None, "read, take and inject tuples"),
        (":7070", None, None, "read, take and inject tuples"),
        ("10.1.2.3:7070", None, None, "read, take and inject tuples"),
        ("0.0.0.0:7070", None, SECRET, "read, take and write tuples through the API"),
        ("0.0.0.0:7070", TOKEN, None, None),
        ("0.0.0.0:7070", TOKEN, SECRET, None),
        ("127.0.0.1:7070", None, None, None),
        ("127.5.0.1:7070", None, None, None),
        ("[::1]:7070", None, None, None),
        ("localhost:7070", None, None, None),
    ],
)
def test_which_listen_addresses_are_warned_about(
    listen: str, token: str | None, secret: str | None, warned: str | None
) -> None:
    config = NodeConfig(listen=listen, token=token, cluster_secret=secret)
    warning = exposure_warning(config)
    if warned is None:
        assert warning is None
    else:
        assert warning is not None and warned in warning and WARNING in warning
