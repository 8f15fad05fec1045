"""``POST /v1/reserve/extend``: a worker's heartbeat renews its reservations
on the node, so a job that runs longer than one lease stays out of reach."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import msgpack

from forum.node.client.remote import ForumClient
from forum.node.core.entries import EntryId
from forum.node.core.space import Pattern
from tests.fixtures.nodes import NodeProcess


async def test_extend_keeps_a_reservation_past_its_first_lease(forum_node: NodeProcess) -> None:
    async with ForumClient(forum_node.url) as client:
        await client.write(b"ext/a")
        [item] = await client.reserve_many(Pattern(b"ext/"), lease=0.5, limit=1)
        for _ in range(3):  # 1.2 s in all: past the first lease, never past one renewal
            await asyncio.sleep(0.4)
            assert await client.extend_many([item.id], lease=0.5) == [True]
        assert await client.count(Pattern(b"ext/")) == 0
        assert (await client.status()).reserved == 1
        assert await client.ack(item.id)


async def test_a_reservation_that_ran_out_is_not_extended(forum_node: NodeProcess) -> None:
    """Once the lease is over the tuple is live again: extend says False and
    does not take it back out of reach."""
    async with ForumClient(forum_node.url) as client:
        await client.write(b"ext/b")
        item = await client.reserve(Pattern(b"ext/"), lease=0.2)
        assert item is not None
        await asyncio.sleep(0.4)
        assert await client.extend(item.id, lease=30) is False
        assert await client.count(Pattern(b"ext/")) == 1


async def test_unknown_ids_get_false_one_flag_per_id(forum_node: NodeProcess) -> None:
    async with ForumClient(forum_node.url) as client:
        await client.write(b"ext/c")
        item = await client.reserve(Pattern(b"ext/"), lease=30)
        assert item is not None
        unknown = EntryId("nowhere", 7)
        assert await client.extend_many([unknown, item.id, unknown], lease=30) == [
            False,
            True,
            False,
        ]
        assert await client.extend_many([], lease=30) == []
        assert await client.release(item.id)


async def test_extend_answers_json_and_msgpack(forum_node: NodeProcess) -> None:
    url = f"{forum_node.url}/v1/reserve/extend"
    async with aiohttp.ClientSession() as http:
        body = json.dumps({"ids": ["nowhere:1"], "lease": 5}).encode()
        headers = {"Content-Type": "application/json"}
        async with http.post(url, data=body, headers=headers) as response:
            assert response.status == 200
            assert await response.json() == {"extended": [False]}
        body = msgpack.packb({"ids": ["nowhere:1"], "lease": 2.5})
        headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
        async with http.post(url, data=body, headers=headers) as response:
            assert response.status == 200
            assert msgpack.unpackb(await response.read()) == {"extended": [False]}


async def test_deliveries_travel_in_every_representation(forum_node: NodeProcess) -> None:
    """The delivery count of a reservation: ``Forum-Deliveries`` on a raw
    answer, ``deliveries`` in a JSON or msgpack document; ForumClient reads
    both into ``Reserved``."""
    async with ForumClient(forum_node.url) as client, aiohttp.ClientSession() as http:
        await client.write(b"dlv/a")
        first = await client.reserve(Pattern(b"dlv/"), lease=0.05)
        assert first is not None and first.deliveries == 1
        await asyncio.sleep(0.2)  # the lease runs out
        second = await client.reserve(Pattern(b"dlv/"), lease=0.05)
        assert second is not None and (second.id, second.deliveries) == (first.id, 2)
        await asyncio.sleep(0.2)
        [third] = await client.reserve_many(Pattern(b"dlv/"), lease=0.05, limit=5)
        assert third.deliveries == 3
        await asyncio.sleep(0.2)
        url = f"{forum_node.url}/v1/reserve/batch?prefix=dlv/&lease=0.05"
        async with http.post(url, headers={"Accept": "application/json"}) as response:
            assert await response.json() == {
                "tuples": [{"id": str(first.id), "payload": "dlv/a", "deliveries": 4}]
            }
        await asyncio.sleep(0.2)
        url = f"{forum_node.url}/v1/reserve?prefix=dlv/&lease=30"
        async with http.post(url) as response:
            assert response.headers["Forum-Deliveries"] == "5"
            assert await response.read() == b"dlv/a"
        assert await client.ack(first.id)
