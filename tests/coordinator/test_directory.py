"""The cluster's directory in a real Redis: the keepers' leases (each group
published by one keeper, the groups shared, passed on when a keeper stops),
and what a reader sees (fresh entries only)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from forum.coordinator.directory import DirectoryKeeper, RedisDirectory, directory_key
from forum.coordinator.keys import KeySchema
from forum.coordinator.redis_url import RedisClient, RedisTarget, close
from forum.node.client.cluster import ClusterClient
from forum.node.cluster.directory import Depth
from forum.node.cluster.map import ClusterMap, Group

NS = "forum:lens"
# Members that refuse at once: the leases are what these tests look at.
CLUSTER = ClusterMap(1, tuple(Group(f"g{n}", (f"http://127.0.0.1:{n}",)) for n in range(1, 5)))


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[RedisClient]:
    client = RedisTarget.from_url(redis_url).client(decode_responses=False)
    yield client
    await close(client)


def keeper(redis: RedisClient, name: str, prefer: tuple[str, ...] = ()) -> DirectoryKeeper:
    return DirectoryKeeper(redis, NS, lambda: CLUSTER, name, prefer=prefer)


async def test_each_group_is_leased_to_one_keeper_the_groups_shared_and_passed_on(
    redis: RedisClient,
) -> None:
    keepers = [keeper(redis, f"w{n}", prefer=(f"g{n + 1}",)) for n in range(3)]
    for _ in range(3):  # every keeper counted, then the shares settle
        for k in keepers:
            await k.tick()
    held = [set(k.leased) for k in keepers]
    assert sorted(g for h in held for g in h) == ["g1", "g2", "g3", "g4"]  # each once
    assert all(len(h) <= 2 for h in held)  # ceil(4 groups / 3 keepers)

    # One stops: its leases go at once, and the two others take every group.
    await keepers[0].aclose()
    for k in keepers[1:]:
        await k.tick()
    assert sorted(g for k in keepers[1:] for g in k.leased) == ["g1", "g2", "g3", "g4"]
    for k in keepers[1:]:
        await k.aclose()


async def test_a_reader_sees_fresh_entries_only_and_caches_a_queue(redis: RedisClient) -> None:
    key = directory_key(KeySchema(NS), b"job/")
    (seconds, _) = await redis.time()
    await redis.hset(key, "g1", f"7 2.500 {seconds}")
    await redis.hset(key, "g2", f"3 1.000 {seconds - 60}")  # its keeper stopped a minute ago
    directory = RedisDirectory(redis, NS, cache_for=3600)
    assert await directory.depths(b"job/") == {"g1": Depth(7, 2.5)}
    assert await directory.depths(b"mail/") == {}
    await redis.hset(key, "g1", f"0 0 {seconds}")
    assert await directory.depths(b"job/") == {"g1": Depth(7, 2.5)}  # cached
    assert await RedisDirectory(redis, NS).depths(b"job/") == {"g1": Depth(0, 0.0)}


async def test_keepers_count_the_workers_so_their_clients_home_one_to_a_group(
    redis: RedisClient,
) -> None:
    clients = [ClusterClient(CLUSTER, client_id=f"w{n}") for n in range(4)]
    keepers = [
        DirectoryKeeper(redis, NS, lambda: CLUSTER, c.client_id, on_keepers=c.balance)
        for c in clients
    ]
    for _ in range(2):
        for k in keepers:
            await k.tick()
    assert sorted(c.home[0] for c in clients) == ["g1", "g2", "g3", "g4"]
    for k in keepers:
        await k.aclose()
