"""The cluster client against real groups of real nodes: routing, stealing, gathering."""

from __future__ import annotations

import asyncio
import random

import pytest

from forum import Pattern
from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.cluster.directory import Depth
from forum.node.cluster.slots import slot_of
from tests.cluster.conftest import start_groups
from tests.fixtures.nodes import ForumNodes

pytestmark = pytest.mark.slow


def key_owned_by(cluster_map: object, gid: str, start: int = 0) -> str:
    n = start
    while cluster_map.owner(slot_of(f"k{n}")).id != gid:  # type: ignore[attr-defined]
        n += 1
    return f"k{n}"


def client_with_home(cluster_map: object, gid: str) -> ClusterClient:
    n = 0
    while (client := ClusterClient(cluster_map, client_id=f"w{n}")).home != (gid,):  # type: ignore[arg-type]
        n += 1
    return client


async def test_keyed_writes_go_to_their_slots_group_and_are_stolen_from_there(
    forum_nodes: ForumNodes,
) -> None:
    cluster, groups = await start_groups(forum_nodes, [1, 1])
    g1, g2 = (ForumClient(groups[g][0].url) for g in ("g1", "g2"))
    async with g1, g2, await ClusterClient.discover(groups["g1"][0].url) as producer:
        assert producer.map == cluster
        keys = [f"k{n}" for n in range(40)]
        for key in keys:
            await producer.write(f"job/{key}".encode(), key=key)
        owned = {gid: [k for k in keys if cluster.owner(slot_of(k)).id == gid] for gid in groups}
        assert owned["g1"] and owned["g2"]
        assert await g1.count(Pattern(b"job/")) == len(owned["g1"])
        assert await g2.count(Pattern(b"job/")) == len(owned["g2"])
        assert await producer.count(Pattern(b"job/")) == 40

        # A consumer at home in g1 takes g1's jobs, then steals g2's: nothing is left behind.
        async with client_with_home(cluster, "g1") as consumer:
            seen = []
            while (item := await consumer.reserve(Pattern(b"job/"), lease=30)) is not None:
                seen.append(item)
            assert sorted(i.payload for i in seen) == sorted(f"job/{k}".encode() for k in keys)
            assert [i.payload for i in seen[: len(owned["g1"])]] == [
                f"job/{k}".encode() for k in owned["g1"]
            ]  # home first, oldest first
            assert all(await consumer.ack_many([i.id for i in seen]))
        assert await producer.count(Pattern(b"job/")) == 0


async def test_a_batch_with_keys_goes_to_each_keys_group_in_one_request_each(
    forum_nodes: ForumNodes,
) -> None:
    """write_many(keys=...) over two groups: each tuple on its key's group,
    the ids in the payloads' order, each key deduplicated there."""
    cluster, groups = await start_groups(forum_nodes, [1, 1])
    keys = [f"k{n}" for n in range(30)]
    payloads = [f"job/{key}".encode() for key in keys]
    g1, g2 = (ForumClient(groups[g][0].url) for g in ("g1", "g2"))
    async with g1, g2, ClusterClient(cluster) as space:
        ids = await space.write_many(payloads, keys=keys, dedup_window=60)
        assert await space.write_many(payloads, keys=keys, dedup_window=60) == ids
        owned = {gid: [k for k in keys if cluster.owner(slot_of(k)).id == gid] for gid in groups}
        assert owned["g1"] and owned["g2"]
        for client, gid in ((g1, "g1"), (g2, "g2")):
            held = {(await client.read_entry(Pattern(f"job/{k}".encode()))) for k in owned[gid]}
            assert None not in held
            assert {t.id for t in held if t is not None} == {ids[keys.index(k)] for k in owned[gid]}
        assert await space.count(Pattern(b"job/")) == len(keys)


async def test_a_write_whose_group_is_down_falls_through_and_is_taken_all_the_same(
    forum_nodes: ForumNodes,
) -> None:
    cluster, groups = await start_groups(forum_nodes, [1, 1])
    key = key_owned_by(cluster, "g2")
    await groups["g2"][0].stop()
    async with ClusterClient(cluster) as space:
        await space.write(b"job/x", key=key)
        assert space.misplaced == 1
        async with ForumClient(groups["g1"][0].url) as g1:
            assert await g1.count(Pattern(b"job/")) == 1
            assert (await g1.status()).misplaced_writes == 1  # the node says so too
        assert await space.take(Pattern(b"job/"), timeout=5) == b"job/x"


async def test_pause_reaches_every_group_and_list_pages_through_them(
    forum_nodes: ForumNodes,
) -> None:
    cluster, _ = await start_groups(forum_nodes, [1, 1])
    async with ClusterClient(cluster) as space:
        for n in range(6):
            await space.write(
                f"job/{n}".encode(), key=key_owned_by(cluster, f"g{n % 2 + 1}", n * 50)
            )
        await space.pause(b"job/")
        assert await space.paused() == [b"job/"]
        assert await space.take(Pattern(b"job/")) is None
        assert await space.resume(b"job/") == 2  # one pause per group
        listed, cursor = [], 0
        while cursor is not None:
            page = await space.list(Pattern(b"job/"), cursor, limit=2)
            listed += [t.payload for t in page.tuples]
            cursor = page.next_cursor
        assert sorted(listed) == [f"job/{n}".encode() for n in range(6)]


async def test_a_client_takes_a_newer_map_that_an_answer_names(forum_nodes: ForumNodes) -> None:
    cluster, _ = await start_groups(forum_nodes, [1, 1])
    async with ClusterClient(cluster, map_refresh=3600) as space:
        await space.count(Pattern(b"x"))  # the first look fetches the map once
        path = forum_nodes.root / "cluster-map.toml"
        path.write_text(path.read_text().replace("epoch = 1", "epoch = 2"))
        for _ in range(100):
            await space.status()  # an HTTP answer: it names the node's epoch
            await space.count(Pattern(b"x"))
            if space.map.epoch == 2:
                break
            await asyncio.sleep(0.1)
        assert space.map.epoch == 2


class FakeDirectory:
    """An in-memory Directory (the Redis one is forum.coordinator.directory's,
    held to the same Protocol by its own tests)."""

    def __init__(self) -> None:
        self.table: dict[bytes, dict[str, Depth]] = {}
        self.asked = 0

    async def depths(self, queue: bytes) -> dict[str, Depth]:
        self.asked += 1
        return self.table.get(queue, {})


async def test_an_idle_consumer_steals_from_the_group_whose_oldest_job_is_older(
    forum_nodes: ForumNodes,
) -> None:
    cluster, groups = await start_groups(forum_nodes, [1, 1, 1])
    directory = FakeDirectory()
    consumer = client_with_home(cluster, "g1")
    consumer = ClusterClient(cluster, client_id=consumer.client_id, directory=directory)
    async with (
        consumer,
        ForumClient(groups["g2"][0].url) as g2,
        ForumClient(groups["g3"][0].url) as g3,
    ):
        await g2.write(b"job/young")
        await g3.write(b"job/old")
        directory.table[b"job/"] = {"g2": Depth(1, 1.0), "g3": Depth(1, 30.0)}
        first = await consumer.reserve(Pattern(b"job/"), lease=30)
        assert first is not None and first.payload == b"job/old"
        directory.table[b"job/"] = {"g2": Depth(1, 2.0)}
        second = await consumer.reserve(Pattern(b"job/"), lease=30)
        assert second is not None and second.payload == b"job/young"
        assert await consumer.reserve(Pattern(b"job/"), lease=30) is None
        assert await consumer.ack_many([first.id, second.id]) == [True, True]


async def test_a_consumer_whose_home_has_work_does_not_ask_the_directory(
    forum_nodes: ForumNodes,
) -> None:
    cluster, groups = await start_groups(forum_nodes, [1, 1])
    directory = FakeDirectory()
    home = client_with_home(cluster, "g1")
    async with ClusterClient(cluster, client_id=home.client_id, directory=directory) as consumer:
        async with ForumClient(groups["g1"][0].url) as g1:
            await g1.write_many([b"job/1", b"job/2"])
        items = await consumer.reserve_many(Pattern(b"job/"), lease=30, limit=1)
        items += await consumer.reserve_many(Pattern(b"job/"), lease=30, limit=1)
        assert [i.payload for i in items] == [b"job/1", b"job/2"]
        assert directory.asked == 0


async def test_a_keyless_producer_starts_on_the_lighter_of_two_groups(
    forum_nodes: ForumNodes,
) -> None:
    cluster, groups = await start_groups(forum_nodes, [1, 1])
    directory = FakeDirectory()
    directory.table[b""] = {"g1": Depth(500, 3.0), "g2": Depth(2, 0.5)}
    for seed in range(8):
        async with ClusterClient(cluster, directory=directory, rng=random.Random(seed)) as producer:
            await producer.write(b"x")
    async with ForumClient(groups["g2"][0].url) as g2, ForumClient(groups["g1"][0].url) as g1:
        # Each producer drew two groups: g2 whenever the two differed, so most went there.
        assert await g2.count(Pattern(b"x")) > await g1.count(Pattern(b"x"))
