"""The Lens on a real three-master Redis Cluster, and the sharded key schema
on one Redis: every script's keys in one slot, every shard covered."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from examples.handlers.fenced_redis import FencedRedisStore, StaleToken
from forum.coordinator import (
    AlreadyDone,
    ClaimLost,
    Lens,
    LensError,
    LensStateLost,
    LensUnavailable,
)
from forum.coordinator.jobindex import JobQuery
from forum.coordinator.limits import Ask, Limit
from forum.coordinator.records import NewRecord
from tests.fixtures.redis_server import RedisClusterServers

pytestmark = pytest.mark.slow  # a cluster takes a second or two to form

KEYS = [f"job:{i}" for i in range(48)]


def _keys_on(cluster: RedisClusterServers) -> dict[int, int]:
    """How many keys each master holds, by port."""
    counts = {}
    for server in cluster.masters:
        with redis.Redis(port=server.port) as r:
            counts[server.port] = int(r.dbsize())
    return counts


async def test_claims_completions_and_reoffers_work_on_every_master(
    redis_cluster: RedisClusterServers,
) -> None:
    async with Lens.from_url(redis_cluster.url) as lens:
        await lens.ping()
        claims = await lens.claim_many([(key, b"job/" + key.encode()) for key in KEYS], "w", 60)
        assert all(not isinstance(claim, LensError) for claim in claims)
        assert {lens.keys.shard(key) for key in KEYS} == set(range(lens.keys.shards))
        assert all(count > 0 for count in _keys_on(redis_cluster).values())

        held = [claim for claim in claims if not isinstance(claim, LensError)]
        assert await lens.extend_many(held) == [None] * len(held)
        assert await lens.complete_many(held[:24]) == [None] * 24
        for claim in held[:24]:
            assert await lens.done_token(claim.key) == claim.token
            with pytest.raises(AlreadyDone):
                await lens.claim(claim.key, owner="w2", lease=60)
        for claim in held[24:]:
            await claim.hand_back(b"again/" + claim.key.encode())
        due = await lens.due(100)
        assert sorted(due) == sorted(claim.key for claim in held[24:])
        for claim in held[24:]:
            grab = await lens.grab(claim.key)
            assert grab is not None and grab.payload == b"again/" + claim.key.encode()
            assert await lens.reaped(grab)
        assert await lens.due(100) == []


async def test_tokens_strictly_increase_per_key(redis_cluster: RedisClusterServers) -> None:
    async with Lens.from_url(redis_cluster.url) as lens:
        issued: dict[str, list[int]] = {key: [] for key in KEYS[:12]}
        for _ in range(5):
            for key, tokens in issued.items():
                claim = await lens.claim(key, owner="w", lease=60)
                tokens.append(claim.token)
                await claim.release()
        for tokens in issued.values():
            assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


async def test_the_reaper_reoffers_expired_claims_from_every_shard(
    redis_cluster: RedisClusterServers,
) -> None:
    async with Lens.from_url(redis_cluster.url) as lens:
        await lens.claim_many([(key, key.encode()) for key in KEYS], "w", 0.2)
        deadline = time.monotonic() + 5
        due: list[str] = []
        while len(due) < len(KEYS) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            due = await lens.due(len(KEYS))
        assert sorted(due) == sorted(KEYS)
        grabs = [await lens.grab(key) for key in due]
        assert sorted(g.payload for g in grabs if g is not None) == sorted(k.encode() for k in KEYS)


async def test_a_master_that_lost_its_data_costs_only_its_shards(
    redis_cluster: RedisClusterServers,
) -> None:
    """t0: claims in every shard. t1: one master is flushed. t2: a call in one
    of its shards raises LensStateLost (counted once); every claim in another
    master's shards completes; every claim in the flushed master's is gone."""
    async with Lens.from_url(redis_cluster.url) as lens:
        claims = [await lens.claim(key, owner="w", lease=60) for key in KEYS]
        flushed = redis_cluster.master_of(lens.keys.epoch(0))
        with redis.Redis(port=flushed.port) as r:
            r.flushall()
        lost = [c for c in claims if redis_cluster.master_of(lens.keys.claim(c.key)) is flushed]
        kept = [c for c in claims if c not in lost]
        assert lost and kept

        with pytest.raises(LensStateLost):
            await lost[0].complete()
        for claim in kept:
            await claim.complete()
        for claim in lost[1:]:
            with pytest.raises(ClaimLost):
                await claim.complete()
        assert lens.state_losses == 1
        again = await lens.claim(lost[0].key, owner="w", lease=60)
        assert again.token > lost[0].token


async def test_the_fenced_store_works_beside_the_lens_on_a_cluster(
    redis_cluster: RedisClusterServers,
) -> None:
    async with (
        Lens.from_url(redis_cluster.url) as lens,
        FencedRedisStore.from_url(redis_cluster.url) as store,
    ):
        claims = [await lens.claim(key, owner="w", lease=60) for key in KEYS[:12]]
        for claim in claims:
            await store.put(claim.key, claim.token, b"v")
        await claims[0].release()
        with pytest.raises(StaleToken):
            await store.put(claims[0].key, claims[0].token, b"late")
        assert sorted(await store.applied()) == sorted((c.key, c.token) for c in claims)


async def test_a_short_wait_fails_a_batch_on_a_cluster(
    redis_cluster: RedisClusterServers,
) -> None:
    """The cluster has no replicas: the WAITs that end each master's part of
    the pipeline answer 0, so the batch fails closed rather than pass
    unchecked. (Which master each WAIT goes to: the next test.)"""
    async with Lens.from_url(redis_cluster.url, wait_replicas=1, wait_timeout=0.1) as lens:
        with pytest.raises(LensUnavailable, match="WAIT 1 100 answered 0"):
            await lens.claim_many([(key, None) for key in KEYS], "w", 60)
    async with Lens.from_url(redis_cluster.url, wait_aof=True) as lens:
        with pytest.raises(LensError, match=r"needs Redis 7\.2 or newer"):
            await lens.claim("k:1", owner="w", lease=60)


async def test_each_batch_waits_for_the_replicas_of_the_masters_it_wrote_to(
    redis_cluster_replicated: RedisClusterServers,
) -> None:
    """t0: every master has a replica; one master's replica hangs. t1: a batch
    of claims in the other masters' shards passes its WAITs. t2: a batch in
    the hung replica's master's shards fails closed: its WAIT went to that
    master, on the connection that wrote (a WAIT sent elsewhere would pass).
    A second for the WAITs: a loaded machine kept a healthy replica past 0.2 s."""
    cluster = redis_cluster_replicated
    async with Lens.from_url(cluster.url, wait_replicas=1, wait_timeout=1.0) as lens:
        await lens.ping()
        await lens.due(1)  # reads every shard's marker while all replicas answer
        hung = cluster.masters[0]
        on_hung = [k for k in KEYS if cluster.master_of(lens.keys.claim(k)) is hung]
        elsewhere = [k for k in KEYS if k not in on_hung]
        assert on_hung and elsewhere
        replica = cluster.replica_of(hung)
        replica.pause()
        try:
            claims = await lens.claim_many([(key, None) for key in elsewhere], "w", 60)
            assert not any(isinstance(claim, LensError) for claim in claims)
            with pytest.raises(LensUnavailable, match="WAIT 1 1000 answered 0"):
                await lens.claim_many([(key, None) for key in on_hung], "w", 60)
        finally:
            replica.resume()


async def test_records_history_cancel_and_scan_work_on_every_master(
    redis_cluster: RedisClusterServers,
) -> None:
    async with Lens.from_url(redis_cluster.url) as lens:
        claims = await lens.claim_many([(key, None) for key in KEYS], "w", 60, [2] * len(KEYS))
        held = [claim for claim in claims if not isinstance(claim, LensError)]
        assert len(held) == len(KEYS)
        for claim in held:
            await lens.record(claim, {"state": "running"}, ttl=60)
        assert {key async for key in lens.scan("claim", count=5)} == set(KEYS)
        assert {key async for key in lens.scan("task", count=5)} == set(KEYS)
        state = await lens.inspect(KEYS[0])
        assert state.claim is not None and state.claim.attempt == 2
        assert state.record["state"] == b"running"
        await held[0].release()
        assert (await lens.cancel(KEYS[0])).state == "cancelled"
        assert [e.event for e in await lens.history(KEYS[0])] == [
            "claimed", "released", "cancelled",
        ]  # fmt: skip
        # The test cluster runs without an AOF: every master is named.
        warnings = await lens.durability()
        assert len([w for w in warnings if "appendonly" in w]) == len(redis_cluster.masters)


async def test_batched_records_inspects_and_forgets_work_on_every_master(
    redis_cluster: RedisClusterServers,
) -> None:
    async with Lens.from_url(redis_cluster.url) as lens:
        # One record_new_many per shard: each call's keys share its shard's slot.
        batch = [NewRecord(key, {"task": "t"}, ttl=60) for key in KEYS]
        assert await lens.record_enqueued_many(batch) == [True] * len(KEYS)
        assert await lens.record_enqueued_many(batch[:3]) == [False] * 3
        states = await lens.inspect_many(KEYS)
        # "ix": the job index's state, kept in each shard's slot (forum.coordinator.jobindex).
        assert [state.record for state in states] == [{"task": b"t", "ix": b"queued"}] * len(KEYS)
        assert all(count > 0 for count in _keys_on(redis_cluster).values())
        assert (await lens.job_counts()).by_task == {"t": {"queued": len(KEYS)}}
        found = await lens.find_jobs(JobQuery(state="queued", limit=500))
        assert sorted(found.keys) == sorted(KEYS) and found.total == len(KEYS)
        assert await lens.forget_record(KEYS[0])
        assert (await lens.inspect(KEYS[0])).record == {}


async def test_limits_admit_all_of_a_jobs_limits_at_once_on_every_master(
    redis_cluster: RedisClusterServers,
) -> None:
    """Each task's limits in its own shard (its group's), the shards on
    every master: one script admits a job under its task's and its key's
    limits, in the one slot of the group."""
    async with Lens.from_url(redis_cluster.url) as lens:
        groups = [f"app:task{i}" for i in range(16)]
        assert {lens.keys.limit_shard(g) for g in groups} != {lens.keys.limit_shard(groups[0])}
        asks = [
            Ask(f"{group}:job{n}", group, (Limit(f"task:{group}", running=2),
                                           Limit(f"key:{group}:c", running=5)))
            for group in groups for n in range(3)
        ]  # fmt: skip
        answers = await lens.admit_many(asks, 30)
        for i in range(0, len(asks), 3):  # per group: two admitted, the third over the task's 2
            assert [wait == 0 for wait, _ in answers[i : i + 3]] == [True, True, False]
        assert await lens.extend_admitted(asks[:2], 30) == [True, True]
        await lens.release_admitted(asks[:1])
        assert (await lens.admit_many([asks[2]], 30))[0][0] == 0
