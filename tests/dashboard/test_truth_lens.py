"""The Lens's cluster-wide counts (forum.coordinator.tallies) on a real Redis:
each is counted by the script that catches its event, once, whoever asks,
and read back summed over the shards; and the workers' index, which the
listing reads instead of a SCAN."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from forum.coordinator import Lens
from forum.coordinator.errors import AlreadyClaimed, AlreadyDone, ClaimLost
from forum.coordinator.keys import KeySchema
from forum.coordinator.presence import Presence, index_key, list_workers, workers_key
from forum.coordinator.stats import WorkerStats
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


async def test_workers_are_listed_from_the_index_which_beats_keep_and_trim(
    redis_url: str,
) -> None:
    async with Lens.from_url(redis_url) as lens, Redis.from_url(redis_url) as redis:
        index = index_key(KeySchema())
        # A worker dead for good: its record expired, its member left behind.
        await redis.zadd(index, {"long-dead": time.time() - 60})
        beating = Presence(lens.config, "beating", 2, 1.0, "http://n")
        await beating.beat(WorkerStats(), ["k1"], 1.0)
        assert await redis.zrange(index, 0, -1) == [b"beating"]  # trimmed by the beat
        # A record no index names is not listed: the listing reads the index only.
        await redis.hset(workers_key(KeySchema(), "unindexed"), "owner", "unindexed")
        [shown] = await list_workers(lens)
        assert (shown.owner, shown.keys, shown.alive(shown.last_beat + 0.66)) == (
            "beating", ("k1",), True,
        )  # fmt: skip
        assert not shown.alive(shown.last_beat + 0.67)  # two beats of 1/3 s missed: dead
        await beating.aclose()  # a clean stop: out of the index and its record gone
        assert await redis.zrange(index, 0, -1) == []
        assert await list_workers(lens) == []
