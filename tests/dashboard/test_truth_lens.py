"""The Lens's cluster-wide counts (forum.coordinator.tallies) on a real Redis:
each is counted by the script that catches its event, once, whoever asks,
and read back summed over the shards."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from forum.coordinator import Lens
from forum.coordinator.errors import AlreadyClaimed, AlreadyDone, ClaimLost
from forum.coordinator.keys import KeySchema
from forum.coordinator.tallies import Tallies, read_tallies
from tests.fixtures.nodes import eventually


async def test_double_takes_stale_completions_and_lapsed_claims_are_counted_in_redis(
    redis_url: str,
) -> None:
    async with Lens.from_url(redis_url) as lens, Redis.from_url(redis_url) as redis:
        assert await read_tallies(lens) == Tallies()
        lost = await lens.claim("k1", "gone", 0.2)  # its worker dies: the lease runs out

        async def lapsed() -> bool:
            return await redis.exists(KeySchema().claim("k1")) == 0

        await eventually(lapsed, what="the first claim's lease over")
        took_over = await lens.claim("k1", "next", 30.0)  # a lost worker's job, offered again
        assert took_over.lapsed
        with pytest.raises(ClaimLost):
            await lens.complete_claim(lost)  # the dead holder's late completion
        with pytest.raises(AlreadyClaimed):
            await lens.claim("k1", "copy", 30.0)  # a copy of a job running elsewhere
        await lens.complete_claim(took_over)
        with pytest.raises(AlreadyDone):
            await lens.claim("k1", "copy", 30.0)  # a copy of a job done
        for key in ("k2", "k3"):  # other shards: summed
            done = await lens.claim(key, "w", 30.0)
            await lens.complete_claim(done)
            with pytest.raises(AlreadyDone):
                await lens.claim(key, "copy", 30.0)
        assert await read_tallies(lens) == Tallies(double_takes=4, claims_lost=1, reoffered=1)


async def test_a_reaped_job_is_one_reoffer_even_when_claimed_before_it_is_reaped(
    redis_url: str,
) -> None:
    async with Lens.from_url(redis_url) as lens, Redis.from_url(redis_url) as redis:
        await lens.claim("k1", "gone", 0.2, reoffer=b"job/1")

        async def lapsed() -> bool:
            return await redis.exists(KeySchema().claim("k1")) == 0

        await eventually(lapsed, what="the claim's lease over")
        grab = await lens.grab("k1")  # a reaper's, to write the job back
        assert grab is not None and grab.payload == b"job/1"
        # The job written back is claimed before the reaper says it is reaped.
        await lens.claim("k1", "next", 30.0)
        assert not await lens.reaped(grab)
        assert await read_tallies(lens) == Tallies(reoffered=1)
