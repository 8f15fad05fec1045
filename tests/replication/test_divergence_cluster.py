"""Issue 27, row 3, on ``forum serve`` processes: a push signed with the
cluster secret carrying another origin's next seq with other bytes (an
insider, or a buggy peer) was kept for ever, equal vectors hiding it. Now
the receiver's round with the origin finds the digests differ, says so once,
and heals to the origin's entry."""

from __future__ import annotations

import re

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.entries import EntryId, Write
from forum.replication.auth import ClusterAuth
from forum.replication.messages import PUSH_PATH, Member, Push, decode_push_ack, encode
from tests.fixtures.nodes import ForumNodes, eventually
from tests.replication.conftest import Clients, converged, live_set, mesh

pytestmark = pytest.mark.slow

SECRET = "s3cret"


async def rounds(client: ForumClient) -> float:
    """Anti-entropy rounds the node ran, from its /metrics."""
    async with aiohttp.ClientSession() as http, http.get(client.url + "/metrics") as r:
        text = await r.text()
    pattern = r'forum_replication_anti_entropy_rounds_total\{[^}]*result="ok"\} (\S+)'
    return sum(float(v) for v in re.findall(pattern, text))


async def test_a_push_forged_with_the_cluster_secret_is_found_and_healed(
    forum_nodes: ForumNodes, clients: Clients
) -> None:
    a, b = mesh(forum_nodes, "ab", "--cluster-secret", SECRET)
    await forum_nodes.start_all()
    ca, cb = clients(a), clients(b)
    for i in range(3):
        await ca.write(b"job-%d" % i)
    await converged([ca, cb])
    a_origin, b_origin = (await ca.status()).origin, (await cb.status()).origin

    # An insider with the secret pushes to b, in a's name, a's next seq.
    forged = EntryId(a_origin, 4)
    body = encode(Push(Member(a_origin, a.url), frozenset(), (Write(forged, b"job-forged"),)))
    headers = ClusterAuth(SECRET).sign_request("POST", PUSH_PATH, body, to=b_origin)
    async with (
        aiohttp.ClientSession() as http,
        http.post(b.url + PUSH_PATH, data=body, headers=headers) as answer,
    ):
        assert answer.status == 200
        assert decode_push_ack(await answer.read()).applied == 1
    await eventually(lambda: _has(cb, (str(forged), b"job-forged")), 10, "the forgery live on b")
    assert await ca.write(b"job-real") == forged  # b skips it: it holds a:4

    healed = await converged([ca, cb], timeout=20)
    assert (str(forged), b"job-real") in healed
    assert (await ca.status()).vector == (await cb.status()).vector

    # Said once, not per round: let b run a few more rounds, then count.
    seen = await rounds(cb)
    await eventually(lambda: _more(cb, seen + 5), 20, "five more rounds on b")
    log = b.log_path.read_text()
    assert log.count("divergence:") == 1, log
    assert "suspect" not in log  # b never blamed a for holding its own entry


async def _has(client: ForumClient, item: tuple[str, bytes]) -> bool:
    return item in await live_set(client)


async def _more(client: ForumClient, count: float) -> bool:
    return await rounds(client) >= count
