"""The Guarantees page says when the Lens cannot take claims, and why: a real
``forum serve --lens-url`` over a real ``redis-server`` that is full
(``maxmemory`` with ``noeviction``: it answers PING and refuses every
write), then given room, then stopped."""

from __future__ import annotations

import re

import aiohttp
import pytest

from tests.coordinator.full_redis import fill, make_room
from tests.fixtures.nodes import ForumNodes
from tests.fixtures.redis_server import RedisServer

pytestmark = pytest.mark.slow


async def _lens_line(url: str) -> tuple[str, str]:
    """The Lens line of the Guarantees page: its reason and its text."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/ui/guarantees") as answer:
        assert answer.status == 200
        page = await answer.text()
    found = re.search(r'id="lens-reach"(?: data-reason="([^"]*)")?[^>]*>(.*?)</p>', page, re.S)
    assert found is not None, page
    return found.group(1) or "", found.group(2)


async def test_the_guarantees_page_names_a_full_redis(
    forum_nodes: ForumNodes, private_redis: RedisServer
) -> None:
    node = await forum_nodes.start("n1", "--lens-url", private_redis.url)
    reason, text = await _lens_line(node.url)
    assert (reason, "reachable" in text) == ("", True), text

    fill(private_redis.port)
    reason, text = await _lens_line(node.url)
    assert reason == "full", text
    assert "unavailable (full)" in text and "OOM" in text, text

    make_room(private_redis.port)
    reason, _ = await _lens_line(node.url)
    assert reason == ""

    private_redis.stop()
    reason, text = await _lens_line(node.url)
    assert reason == "unreachable", text
