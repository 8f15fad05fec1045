"""Single Lens calls from many tasks at once are coalesced into pipelines
(forum.coordinator.scripts ``Scripts.run``): each still gets its own outcome, a
cancelled one is never sent, and a cancellation always ends its call."""

from __future__ import annotations

import asyncio

import redis

from forum.coordinator import AlreadyClaimed, Claim, Lens
from tests.coordinator.test_lens import cancellation_lost


async def test_concurrent_claims_share_round_trips_and_each_gets_its_own_outcome(
    redis_url: str,
) -> None:
    """64 tasks claim at once (two of them the same key): every outcome is
    the one a claim alone would get, and Redis sees a few connections, not
    one per task (one pipeline per turn of the loop, not a command each)."""
    async with Lens.from_url(redis_url, connect_timeout=10) as lens:
        keys = [f"c:{i}" for i in range(63)] + ["c:0"]
        outcomes = await asyncio.gather(
            *(lens.claim(key, owner=f"w{i}", lease=30) for i, key in enumerate(keys)),
            return_exceptions=True,
        )
        claims = [o for o in outcomes if isinstance(o, Claim)]
        conflicts = [o for o in outcomes if isinstance(o, AlreadyClaimed)]
        assert len(claims) == 63 and len(conflicts) == 1
        assert conflicts[0].key == "c:0"
        assert len({c.token for c in claims}) == 63
        await asyncio.gather(*(claim.complete() for claim in claims))
        with redis.Redis.from_url(redis_url) as r:
            connected = int(r.info("clients")["connected_clients"])
            done = [r.get(lens.keys.done(c.key)) for c in claims]
        assert connected <= 8, f"{connected} connections for 64 concurrent claims"
        assert [int(d) for d in done if d is not None] == [c.token for c in claims]


async def test_a_queued_claim_cancelled_before_its_pipeline_left_is_never_sent(
    lens: Lens,
) -> None:
    await (await lens.claim("warm", owner="a", lease=30)).complete()
    first = asyncio.create_task(lens.claim("q:1", owner="a", lease=30))
    await asyncio.sleep(0)  # first is in flight: the next call queues
    queued = asyncio.create_task(lens.claim("q:2", owner="a", lease=30))
    await asyncio.sleep(0)  # queued is waiting for the next turn's pipeline
    queued.cancel()
    await asyncio.wait([first, queued])
    assert queued.cancelled()
    assert (await first).key == "q:1"
    # q:2 was never claimed: another owner gets it at once.
    assert (await lens.claim("q:2", owner="b", lease=30)).owner == "b"


async def test_a_coalesced_claim_cancelled_at_any_step_ends_cancelled(lens: Lens) -> None:
    """As test_lens's sweep for a call alone, for calls that queue behind
    another one in flight: a cancellation in any turn of the loop ends it."""
    await (await lens.claim("warm", owner="a", lease=30)).complete()
    lost = []
    for turns in range(40):
        ahead = asyncio.create_task(lens.claim(f"ahead:{turns}", owner="a", lease=30))
        await asyncio.sleep(0)
        call = asyncio.create_task(lens.claim(f"sweep:{turns}", owner="a", lease=30))
        if await cancellation_lost(call, turns):
            lost.append(turns)
        await asyncio.wait([ahead, call], timeout=5)
    assert lost == [], f"cancellations lost at turns {lost}"
