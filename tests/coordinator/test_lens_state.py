"""A Redis that forgets: fencing tokens never go backwards, and the Lens says
it lost its state instead of carrying on as if nothing happened.

Each test makes Redis forget in one of the ways an operator meets: a
``FLUSHALL``, or a restart of a Redis that runs without persistence.
"""

from __future__ import annotations

import pytest
import redis

from coordinator import Claim, Lens, LensUnavailable
from tests.fixtures.redis_server import RedisServer

#: Enough claims to see a reissued token: the probe that found the bug saw 1,200.
_BATCH = 200


async def _claim_batch(lens: Lens, prefix: str) -> list[int]:
    """Claim ``_BATCH`` fresh keys; their tokens. A Lens that noticed the loss
    raises once (it is a :class:`LensUnavailable`): the batch is sent again."""
    requests = [(f"{prefix}:{i}", None) for i in range(_BATCH)]
    try:
        outcomes = await lens.claim_many(requests, owner="w", lease=60)
    except LensUnavailable:
        outcomes = await lens.claim_many(requests, owner="w", lease=60)
    claims = [outcome for outcome in outcomes if isinstance(outcome, Claim)]
    assert len(claims) == _BATCH, outcomes
    return [claim.token for claim in claims]


async def test_tokens_after_a_flushall_exceed_every_earlier_token(
    private_redis: RedisServer,
) -> None:
    async with Lens.from_url(private_redis.url) as lens:
        before = await _claim_batch(lens, "k")
        private_redis.flushall()
        after = await _claim_batch(lens, "k")  # the same keys: Redis forgot them
    assert min(after) > max(before)


async def test_tokens_after_a_restart_without_persistence_exceed_every_earlier_token(
    volatile_redis: RedisServer,
) -> None:
    async with Lens.from_url(volatile_redis.url) as lens:
        before = await _claim_batch(lens, "k")
        await volatile_redis.arestart()
        with redis.Redis(port=volatile_redis.port) as r:
            assert r.dbsize() == 0  # it really forgot
        after = await _claim_batch(lens, "k")
    assert min(after) > max(before)


@pytest.mark.parametrize("tokens", [2**52, 2**53 - 10])
async def test_tokens_stay_exact_integers_near_the_double_limit(
    redis_url: str, tokens: int
) -> None:
    """Lua numbers are doubles: a token must round-trip exactly through the
    claim script and back into the scripts that compare it."""
    async with Lens.from_url(redis_url) as lens:
        with redis.Redis.from_url(redis_url) as r:
            r.set(lens.keys.fence, tokens)
        first = await lens.claim("big:1", owner="w", lease=60)
        second = await lens.claim("big:2", owner="w", lease=60)
        assert (first.token, second.token) == (tokens + 1, tokens + 2)
        await first.verify()
        await first.extend()
        await first.complete()
        assert await lens.done_token("big:1") == tokens + 1
        await second.hand_back(b"job/again", delay=60)
