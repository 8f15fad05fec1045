"""Long polls: a waiting take or read wakes on a write from another client, waits
no longer than the node allows, is bounded in number, and loses nothing when
its client goes away."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from forum.node.client.remote import ForumClient, Transport
from forum.node.core.space import Pattern
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually


async def long_polls(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(f"{url}/v1/status") as response:
        return int((await response.json())["long_polls"])


async def test_waiting_take_wakes_on_a_write_from_another_client(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    """t0: A waits in POST /v1/take?prefix=job-&wait=30; t1: B writes job-1;
    t2: A gets job-1 (long before its wait ends), and nothing is left live."""
    url = forum_node.url
    async with ForumClient(url) as taker, ForumClient(url) as writer:
        waiting = asyncio.create_task(taker.take_entry(Pattern(b"job-"), timeout=30))
        await eventually(lambda: long_polls(http, url), what="the take waiting")
        assert not waiting.done()
        await writer.write(b"other-1")  # does not match: the take keeps waiting
        entry_id = await writer.write(b"job-1")
        async with asyncio.timeout(10):
            taken = await waiting
        assert taken is not None and (taken.id, taken.payload) == (entry_id, b"job-1")
        assert await writer.count(Pattern(b"")) == 1


async def test_waiting_read_wakes_on_a_write_and_leaves_it(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = forum_node.url
    async with ForumClient(url) as reader, ForumClient(url) as writer:
        waiting = asyncio.create_task(reader.read_entry(Pattern(b"cfg/"), timeout=30))
        await eventually(lambda: long_polls(http, url), what="the read waiting")
        await writer.write(b"cfg/a")
        async with asyncio.timeout(10):
            found = await waiting
        assert found is not None and found.payload == b"cfg/a"
        assert await writer.count(Pattern(b"cfg/")) == 1


async def test_one_write_wakes_one_of_many_takers(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = forum_node.url
    async with ForumClient(url) as client:
        takers = [asyncio.create_task(client.take(Pattern(b"j"), timeout=1.5)) for _ in range(4)]
        await eventually(lambda: _at_least(http, url, 4), what="4 takes waiting")
        await client.write(b"j-1")
        results = await asyncio.gather(*takers)
    assert sorted(results, key=lambda r: r is None) == [b"j-1", None, None, None]


async def _at_least(http: aiohttp.ClientSession, url: str, n: int) -> bool:
    return await long_polls(http, url) >= n


async def test_wait_is_cut_to_the_nodes_maximum(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("short", "--max-wait", "0.3")
    async with aiohttp.ClientSession() as http:
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with http.post(f"{node.url}/v1/take?prefix=x&wait=120") as response:
            assert response.status == 204
        assert loop.time() - started < 10


@pytest.mark.parametrize("transport", ["stream", "http"])
async def test_client_waits_past_the_nodes_maximum_with_several_polls(
    forum_nodes: ForumNodes, transport: Transport
) -> None:
    node = await forum_nodes.start("short", "--max-wait", "0.2")
    async with ForumClient(node.url, transport=transport) as client:
        waiting = asyncio.create_task(client.take(Pattern(b"late"), timeout=30))
        async with aiohttp.ClientSession() as http:
            # Two polls have ended (0.2 s each) and the client is still waiting.
            answered = _requests_answered if transport == "http" else _stream_requests_answered
            await eventually(lambda: answered(http, node.url, "204", 2), what="two empty polls")
        assert not waiting.done()
        await client.write(b"late-1")
        async with asyncio.timeout(10):
            assert await waiting == b"late-1"


async def _stream_requests_answered(
    http: aiohttp.ClientSession, url: str, status: str, n: int
) -> bool:
    """Requests answered on streams (all of them 204s here: nothing is written)."""
    async with http.get(f"{url}/v1/status") as response:
        answered: int = (await response.json())["streams_requests"]
    return answered >= n


async def _requests_answered(http: aiohttp.ClientSession, url: str, status: str, n: int) -> bool:
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    line = f'forum_http_requests_total{{method="POST",route="/v1/take",status="{status}"}}'
    counts = [float(row.split()[-1]) for row in text.splitlines() if row.startswith(line)]
    return bool(counts) and counts[0] >= n


async def test_too_many_waiters_get_503(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("few", "--max-waiters", "1")
    async with aiohttp.ClientSession() as http:
        first = asyncio.create_task(_status_of(http, f"{node.url}/v1/take?prefix=q&wait=30"))
        await eventually(lambda: long_polls(http, node.url), what="one waiter")
        async with http.post(f"{node.url}/v1/take?prefix=q&wait=30") as response:
            assert response.status == 503
            assert response.headers["Retry-After"] == "1"
            assert (await response.json())["error"] == "too_many_waiters"
        # A take that does not wait is still served.
        async with http.post(f"{node.url}/v1/take?prefix=q") as response:
            assert response.status == 204
        async with http.post(f"{node.url}/v1/tuples", data=b"q-1") as response:
            assert response.status == 201
        assert await first == 200


async def _status_of(http: aiohttp.ClientSession, url: str) -> int:
    async with http.post(url) as response:
        await response.read()
        return response.status


async def test_a_take_whose_client_left_takes_nothing(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    """t0: A waits in a take; t1: A's connection closes (client timeout);
    t2: the node cancels A's wait; t3: B writes job-1; job-1 stays live."""
    url = forum_node.url
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.5)) as impatient:
        try:
            async with impatient.post(f"{url}/v1/take?prefix=job-&wait=30") as response:
                await response.read()
        except TimeoutError:
            pass
        else:
            raise AssertionError("the take should have outwaited the client")
    await eventually(lambda: _no_long_polls(http, url), what="the abandoned take to end")
    async with http.post(f"{url}/v1/tuples", data=b"job-1") as response:
        assert response.status == 201
    async with http.get(f"{url}/v1/count?prefix=job-") as response:
        assert json.loads(await response.read()) == {"count": 1}


async def _no_long_polls(http: aiohttp.ClientSession, url: str) -> bool:
    return await long_polls(http, url) == 0
