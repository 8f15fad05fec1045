"""The Lens with ``wait_replicas``: every writing batch waits for a real
replica (``WAIT``), fails closed when none answers, and a failover to that
replica reuses no token and keeps every completed job done."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
import redis

from forum.coordinator import (
    AlreadyClaimed,
    AlreadyDone,
    Lens,
    LensConfig,
    LensError,
    LensUnavailable,
)
from tests.fixtures.redis_server import RedisServer

pytestmark = pytest.mark.slow  # two redis-servers and a replication link


async def test_a_claim_returns_once_the_replica_holds_it(
    redis_replicated: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = redis_replicated
    async with Lens.from_url(primary.url, wait_replicas=1) as lens:
        claims = await lens.claim_many([(f"k:{i}", b"job") for i in range(20)], "w", 60)
        with redis.Redis(port=replica.port) as r:
            # No wait here: WAIT returned, so the replica has applied every write.
            assert all(r.get(lens.keys.claim(f"k:{i}")) is not None for i in range(20))
        held = [claim for claim in claims if not isinstance(claim, LensError)]
        assert await lens.complete_many(held) == [None] * 20
        with redis.Redis(port=replica.port) as r:
            assert all(int(r.get(lens.keys.done(c.key))) == c.token for c in held)


async def test_a_claim_no_replica_acknowledged_fails_closed(
    redis_replicated: tuple[RedisServer, RedisServer],
) -> None:
    """t0: the replica hangs. t1: a claim is written on the primary, WAIT times
    out -> LensUnavailable: the caller holds nothing. t2: the claim stays on
    the primary until its lease ends, then the key can be claimed again."""
    primary, replica = redis_replicated
    async with Lens.from_url(primary.url, wait_replicas=1, wait_timeout=0.2) as lens:
        await _warmed(lens)  # reads the markers first
        replica.pause()
        try:
            started = time.monotonic()
            with pytest.raises(LensUnavailable, match="too few copies"):
                await lens.claim("k:1", owner="w", lease=0.5)
            assert time.monotonic() - started < 1.5
        finally:
            replica.resume()
        with pytest.raises(AlreadyClaimed):
            await lens.claim("k:1", owner="w2", lease=60)
        deadline = time.monotonic() + 5
        while True:  # until the refused claim's lease ends
            try:
                assert (await lens.claim("k:1", owner="w2", lease=60)).owner == "w2"
                break
            except AlreadyClaimed:
                assert time.monotonic() < deadline, "the refused claim never expired"
                await asyncio.sleep(0.05)


async def test_a_failover_to_the_replica_reuses_no_token_and_forgets_no_completion(
    redis_replicated: tuple[RedisServer, RedisServer],
) -> None:
    """t0: jobs claimed and completed on the primary, each write WAITed for.
    t1: the primary dies (SIGKILL); the replica is promoted (REPLICAOF NO ONE).
    t2: a Lens on the new primary: every completed job is still done, every
    held claim still held, and every new token is above every old one."""
    primary, replica = redis_replicated
    async with Lens.from_url(primary.url, wait_replicas=1) as lens:
        done = [await lens.claim(f"d:{i}", owner="w", lease=60) for i in range(16)]
        assert await lens.complete_many(done) == [None] * 16
        held = [await lens.claim(f"h:{i}", owner="w", lease=60) for i in range(16)]
    primary.kill()
    with redis.Redis(port=replica.port) as r:
        r.execute_command("REPLICAOF", "NO", "ONE")

    async with Lens.from_url(replica.url) as promoted:
        for claim in done:
            assert await promoted.done_token(claim.key) == claim.token
            with pytest.raises(AlreadyDone):
                await promoted.claim(claim.key, owner="w2", lease=60)
        for claim in held:
            with pytest.raises(AlreadyClaimed):
                await promoted.claim(claim.key, owner="w2", lease=60)
        old = max(c.token for c in done + held)
        fresh = [await promoted.claim(f"n:{i}", owner="w2", lease=60) for i in range(16)]
        assert min(c.token for c in fresh) > old
        assert promoted.state_losses == 0


async def test_wait_aof_is_refused_on_a_redis_older_than_7_2(redis_url: str) -> None:
    """Debian 12's redis-server is 7.0, without WAITAOF: wait_aof says so
    rather than fail every batch with an unknown command."""
    with redis.Redis.from_url(redis_url) as r:
        version = r.info("server")["redis_version"]
    assert tuple(int(p) for p in version.split(".")[:2]) < (7, 2), (
        f"redis-server {version} has WAITAOF: this test needs the 7.0 of Debian 12"
    )
    async with Lens.from_url(redis_url, wait_aof=True) as lens:
        with pytest.raises(LensError, match=f"needs Redis 7.2 or newer.*runs {version}"):
            await lens.claim("k:1", owner="w", lease=60)


async def test_with_wait_aof_a_claim_returns_once_both_aofs_hold_it(
    valkey_replicated: tuple[RedisServer, RedisServer],
) -> None:
    """WAITAOF 1 1: each batch returns once the primary's AOF and the replica's
    are fsynced; the replica then holds every claim and completion. (A replica
    reports its fsyncs in its once-a-second ack, so a batch can wait up to a
    second: the wait here is 1.8 s; docs/operations.md.)"""
    primary, replica = valkey_replicated
    async with Lens.from_url(
        primary.url, wait_replicas=1, wait_aof=True, wait_timeout=1.8, timeout=3.0
    ) as lens:
        claims = await lens.claim_many([(f"a:{i}", b"job") for i in range(20)], "w", 60)
        held = [claim for claim in claims if not isinstance(claim, LensError)]
        assert len(held) == 20
        with redis.Redis(port=replica.port) as r:
            assert all(r.get(lens.keys.claim(f"a:{i}")) is not None for i in range(20))
        assert await lens.complete_many(held) == [None] * 20
        with redis.Redis(port=replica.port) as r:
            assert all(int(r.get(lens.keys.done(c.key))) == c.token for c in held)
        with redis.Redis(port=primary.port) as r:
            # Nothing was left unfsynced: the AOF's fsynced offset caught up.
            info = r.info("persistence")
            assert info["aof_enabled"] == 1 and info["aof_last_write_status"] == "ok"


async def test_with_wait_aof_a_replica_that_does_not_fsync_fails_closed(
    valkey_replicated: tuple[RedisServer, RedisServer],
) -> None:
    """The replica hangs: WAITAOF counts no replica's fsync within the wait,
    so the claim is LensUnavailable (the caller holds nothing), and the Lens
    works again once the replica is back."""
    primary, replica = valkey_replicated
    async with Lens.from_url(
        primary.url, wait_replicas=1, wait_aof=True, wait_timeout=1.8, timeout=3.0
    ) as lens:
        await lens.claim("warm", owner="w", lease=60)
        replica.pause()
        try:
            with pytest.raises(LensUnavailable, match="too few copies"):
                await lens.claim("k:1", owner="w", lease=60)
        finally:
            replica.resume()
        claim = await lens.claim("k:2", owner="w", lease=60)
        assert await lens.complete_many([claim]) == [None]


def test_wait_timeout_must_be_shorter_than_the_reply_timeout() -> None:
    with pytest.raises(ValueError, match="wait_timeout"):
        LensConfig(wait_replicas=1, wait_timeout=2.0, timeout=2.0)
    with pytest.raises(ValueError, match="wait_replicas"):
        LensConfig(wait_replicas=-1)


async def _warmed(lens: Lens) -> None:
    """A first claim through ``lens`` (it reads the shards' markers), once
    the replica acknowledges within the 0.2 s WAIT: a loaded machine's
    replica may take longer to catch up with the markers' first writes."""
    deadline = time.monotonic() + 10
    for attempt in itertools.count():
        try:
            # A new key each time: a claim refused for its WAIT stays held.
            await lens.claim(f"warm:{attempt}", owner="w", lease=60)
            return
        except LensUnavailable:
            assert time.monotonic() < deadline, "the replica never acknowledged a write"
            await asyncio.sleep(0.1)
