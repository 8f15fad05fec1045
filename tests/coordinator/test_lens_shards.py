"""The sharded key schema on one Redis: where each key lives, the shard
count fixed for a namespace, and the unsharded schema refused."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from forum.coordinator import Lens, LensError, LensUnavailable
from forum.coordinator.keys import KeySchema
from forum.coordinator.redis_url import RedisTarget
from tests.fixtures.redis_server import RedisServer


@pytest.mark.parametrize(
    ("url", "nodes"),
    [
        ("redis+cluster://10.0.0.1:7000/", ((("10.0.0.1", 7000),))),
        ("redis+cluster://a:7000,b:7001", (("a", 7000), ("b", 7001))),
        ("redis+cluster://:pw@[::1]:7000/0", ((("::1", 7000),))),
        ("redis://127.0.0.1:6379/0", ()),
    ],
)
def test_redis_urls_name_one_server_or_a_cluster(
    url: str, nodes: tuple[tuple[str, int], ...]
) -> None:
    assert RedisTarget.from_url(url).nodes == nodes


def test_every_key_of_a_job_shares_its_shard_hash_tag() -> None:
    schema = KeySchema("ns", shards=16)
    for key in ("a:1", "b:2", "{odd}:3"):
        tag = schema.tag(schema.shard(key))
        shard = schema.shard(key)
        assert tag == f"{{ns:{shard}}}"
        for name in (schema.claim(key), schema.done(key), schema.job(key),
                     schema.task(key), schema.history(key)):  # fmt: skip
            assert name.startswith(tag)
            role = name.split(":")[2]
            assert schema.claim_key_of(name, role) == key  # what a scan reads back
        assert schema.claim_key_of(f"{{ns:{shard}}}:claim:{key}x", "claim") is None  # other shard
        assert schema.claim_key_of(f"{{ns:x:{shard}}}:claim:{key}", "claim") is None
        for name in (schema.fence(shard), schema.inflight(shard), schema.epoch(shard)):
            assert name.startswith(tag)
    with pytest.raises(ValueError, match="braces"):
        KeySchema("a{b}")
    with pytest.raises(ValueError, match="shards"):
        KeySchema("ns", shards=0)


def test_a_scripts_keys_are_the_named_keys_in_order() -> None:
    """KeySchema.keys_for builds every script's KEYS: the same names as the
    one-key methods; a claim key of another shard or an unknown role refused."""
    schema = KeySchema("ns", shards=16)
    key = "a:1"
    shard = schema.shard(key)
    roles = ("claim", "done", "fence", "job", "inflight", "epoch")
    assert schema.keys_for(roles, shard, key) == [
        schema.claim(key), schema.done(key), schema.fence(shard),
        schema.job(key), schema.inflight(shard), schema.epoch(shard),
    ]  # fmt: skip
    assert schema.keys_for(("inflight", "epoch"), 3) == [schema.inflight(3), schema.epoch(3)]
    with pytest.raises(ValueError, match="is in shard"):
        schema.keys_for(("claim",), (shard + 1) % 16, key)
    with pytest.raises(ValueError, match="no Lens key 'claim'"):
        schema.keys_for(("claim",), shard)
    with pytest.raises(ValueError, match="no Lens key 'nope'"):
        schema.keys_for(("nope",), shard, key)


async def test_a_lens_with_another_shard_count_refuses_the_namespace(redis_url: str) -> None:
    async with Lens.from_url(redis_url) as first:
        await first.claim("k:1", owner="w", lease=60)
    async with Lens.from_url(redis_url, shards=8) as other:
        with pytest.raises(LensError, match="split into 16 shards, this Lens into 8"):
            await other.claim("k:2", owner="w", lease=60)
    with redis.Redis.from_url(redis_url) as r:
        assert r.get(first.keys.claim("k:2")) is None


async def test_a_namespace_in_the_unsharded_schema_is_refused(redis_url: str) -> None:
    """An older Lens's in-flight records would never be re-offered: refuse."""
    with redis.Redis.from_url(redis_url) as r:
        r.set("forum:lens:epoch", "old-marker 1700000000")
    async with Lens.from_url(redis_url) as lens:
        with pytest.raises(LensError, match=r"unsharded schema .*forum:lens:epoch exists"):
            await lens.claim("k:1", owner="w", lease=60)
    with redis.Redis.from_url(redis_url) as r:
        r.delete("forum:lens:epoch")
    async with Lens.from_url(redis_url) as lens:
        await lens.claim("k:1", owner="w", lease=60)


def test_shards_are_stable_and_all_used() -> None:
    schema = KeySchema()
    # crc32, not Python's hash(): the same in every process and version.
    assert schema.shard("a:1") == 6
    assert {schema.shard(f"job:{i}") for i in range(200)} == set(range(16))


async def test_concurrent_first_calls_share_one_read_of_the_markers(
    private_redis: RedisServer,
) -> None:
    """t0: a fresh Lens; Redis hangs. t1: 20 claims at once all need the
    markers. They share one read, so all fail after one timeout, not one
    timeout each in turn (a worker's whole batch would stall that long)."""
    async with Lens.from_url(private_redis.url, timeout=0.3) as lens:
        private_redis.pause()
        try:
            started = time.monotonic()
            outcomes = await asyncio.gather(
                *(lens.claim(f"k:{i}", owner="w", lease=60) for i in range(20)),
                return_exceptions=True,
            )
            elapsed = time.monotonic() - started
        finally:
            private_redis.resume()
        assert all(isinstance(outcome, LensUnavailable) for outcome in outcomes)
        assert elapsed < 2.0
        await lens.claim("k:1", owner="w", lease=60)  # a new read once Redis answers
