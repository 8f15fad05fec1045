"""The Lens through Sentinel (``redis+sentinel://``): it finds the primary,
and after the primary dies and Sentinel promotes its replica, the same Lens
carries on there, with every completed job still done and no token reused."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from forum.coordinator import AlreadyDone, Lens, LensUnavailable
from tests.fixtures.redis_server import SENTINEL_SERVICE, RedisServer

pytestmark = pytest.mark.slow  # three redis-servers and a failover


async def test_a_lens_through_sentinel_follows_a_failover(
    redis_sentinel: tuple[RedisServer, RedisServer, RedisServer],
) -> None:
    """t0: through Sentinel, jobs claimed and completed on the primary, each
    write WAITed for by the replica. t1: the primary dies (SIGKILL). t2:
    Sentinel promotes the replica; the Lens's calls fail closed meanwhile.
    t3: the same Lens works on the new primary: every completed job is still
    done, and every new token is above every old one."""
    primary, replica, sentinel = redis_sentinel
    url = f"redis+sentinel://127.0.0.1:{sentinel.port}/{SENTINEL_SERVICE}"
    async with Lens.from_url(url, wait_replicas=1, timeout=1.0) as waited:
        done = [await waited.claim(f"d:{i}", owner="w", lease=60) for i in range(16)]
        assert await waited.complete_many(done) == [None] * 16
    old = max(claim.token for claim in done)

    async with Lens.from_url(url, timeout=1.0) as lens:
        assert await lens.done_token("d:0") == done[0].token
        primary.kill()
        deadline = time.monotonic() + 30
        while True:  # until Sentinel has promoted the replica
            try:
                fresh = await lens.claim("n:0", owner="w2", lease=60)
                break
            except LensUnavailable:
                assert time.monotonic() < deadline, "Sentinel did not fail over in time"
                await asyncio.sleep(0.1)
        with redis.Redis(port=replica.port) as r:
            assert r.info("replication")["role"] == "master"
        assert fresh.token > old
        for claim in done:
            assert await lens.done_token(claim.key) == claim.token
            with pytest.raises(AlreadyDone):
                await lens.claim(claim.key, owner="w2", lease=60)
        assert lens.state_losses == 0


def test_a_sentinel_url_must_name_the_primary() -> None:
    with pytest.raises(ValueError, match="name the primary"):
        Lens.from_url("redis+sentinel://127.0.0.1:26379/")
    with pytest.raises(ValueError, match="not a number"):
        Lens.from_url("redis+sentinel://127.0.0.1:26379/forum/x")
