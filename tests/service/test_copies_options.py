"""``copies`` by every way in (query, JSON body, batch, the stream and HTTP
clients) on a real node alone: a bad value is a one-line 400 before anything
is written, and more copies than the cluster's members (one here) too. The
waits for copies are in tests/replication/test_copies_cluster.py."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.errors import NodeRejected
from forum.node.core.space import Pattern
from tests.fixtures.nodes import NodeProcess

ALONE = "copies=2 but the cluster has 1 member (this node and its peers): at most 1"


async def _post(http: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    async with http.post(url, headers={"Accept": "application/json"}, **kwargs) as response:
        return response.status, json.loads(await response.read())


@pytest.mark.parametrize(
    ("route", "request_args", "error", "message"),
    [
        ("tuples", {"params": {"copies": "0"}, "data": b"x"}, "invalid_option", "at least 1"),
        ("tuples", {"params": {"copies": "two"}, "data": b"x"}, "invalid_parameter", "whole"),
        ("tuples", {"params": {"copies": "2"}, "data": b"x"}, "invalid_option", ALONE),
        ("tuples", {"json": {"payload": "x", "copies": 0}}, "invalid_option", "at least 1"),
        ("tuples", {"json": {"payload": "x", "copies": "2"}}, "invalid_field", "copies"),
        ("tuples/batch", {"json": {"payloads": ["x"], "copies": 2}}, "invalid_option", ALONE),
    ],
)
async def test_a_bad_copies_is_a_400_and_writes_nothing(
    forum_node: NodeProcess,
    http: aiohttp.ClientSession,
    route: str,
    request_args: dict[str, Any],
    error: str,
    message: str,
) -> None:
    status, body = await _post(http, f"{forum_node.url}/v1/{route}", **request_args)
    assert status == 400, body
    assert body["error"] == error
    assert message in body["message"] and "\n" not in body["message"]
    async with ForumClient(forum_node.url) as client:
        assert await client.count(Pattern(b"")) == 0


async def test_the_clients_send_copies_and_the_node_judges_it(client: ForumClient) -> None:
    with pytest.raises(NodeRejected, match="copies must be at least 1") as bad:
        await client.write(b"x", copies=0)
    assert bad.value.status == 400
    with pytest.raises(NodeRejected, match="at most 1"):
        await client.write_many([b"x", b"y"], copies=2)
    assert await client.count(Pattern(b"")) == 0
    await client.write(b"x", copies=1)
    assert len(await client.write_many([b"y", b"z"], copies=1)) == 2
    assert await client.count(Pattern(b"")) == 3
