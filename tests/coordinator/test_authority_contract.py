"""The ``ClaimAuthority`` contract, run against the in-memory fake
(``coordinator.memory.MemoryAuthority``) and a real ``Lens`` on a real
redis-server: the fake answers as the Lens does, so worker logic tested on
the fake holds on the Lens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import pytest

from coordinator import (
    AlreadyClaimed,
    AlreadyDone,
    ClaimAuthority,
    ClaimLost,
    HeldClaim,
    Lens,
    LensStateLost,
)
from coordinator.memory import MemoryAuthority
from tests.coordinator.harness import eventually
from tests.fixtures.redis_server import RedisServer


@dataclass(frozen=True)
class Subject:
    """An authority under test, and how to make it forget its state."""

    authority: ClaimAuthority
    forget: Callable[[], None]


@pytest.fixture(params=["memory", "lens"])
async def subject(request: pytest.FixtureRequest) -> AsyncIterator[Subject]:
    if request.param == "memory":
        memory = MemoryAuthority(reaper_lease=0.3)
        yield Subject(memory, memory.forget)
        return
    redis: RedisServer = request.getfixturevalue("redis_server")
    request.getfixturevalue("redis_url")  # a flushed server
    async with Lens.from_url(redis.url, reaper_lease=0.3) as lens:
        yield Subject(lens, redis.flushall)


async def test_a_claim_turns_others_away_until_it_completes_then_all_are_done(
    subject: Subject,
) -> None:
    authority = subject.authority
    first = await authority.claim("k", owner="a", lease=5)
    assert (first.key, first.owner, first.lease) == ("k", "a", 5)
    with pytest.raises(AlreadyClaimed) as held:
        await authority.claim("k", owner="b", lease=5)
    assert held.value.owner == "a"
    assert held.value.remaining is not None and 4 < held.value.remaining <= 5
    await first.complete()
    with pytest.raises(AlreadyDone) as done:
        await authority.claim("k", owner="b", lease=5)
    assert done.value.token == first.token


async def test_tokens_strictly_increase_across_keys_and_takeovers(subject: Subject) -> None:
    authority = subject.authority
    tokens = []
    for key in ["a", "b", "a", "c"]:
        claim = await authority.claim(key, owner="w", lease=5)
        tokens.append(claim.token)
        await claim.release()
    assert tokens == sorted(tokens) and len(set(tokens)) == 4


async def test_an_ended_claim_refuses_everything(subject: Subject) -> None:
    claim = await subject.authority.claim("k", owner="a", lease=5)
    await claim.release()
    for step in (claim.verify, claim.extend, claim.complete, claim.release):
        with pytest.raises(ClaimLost):
            await step()
    with pytest.raises(ClaimLost):
        await claim.hand_back(b"bytes")
    again = await subject.authority.claim("k", owner="b", lease=5)
    assert again.token > claim.token


async def test_an_expired_holder_is_refused_once_another_holds_the_key(subject: Subject) -> None:
    authority = subject.authority
    stale = await authority.claim("k", owner="a", lease=0.2)
    await eventually(lambda: stale.remaining() < 0, what="the lease over")
    fresh = await _claim_when_free(authority, "k")
    assert fresh.token > stale.token
    assert _kinds(await authority.extend_many([stale, fresh])) == ["ClaimLost", None]
    for step in (stale.verify, stale.complete):
        with pytest.raises(ClaimLost):
            await step()
    await fresh.verify()
    assert fresh.remaining() > 4


async def test_verify_refuses_within_the_safety_margin(subject: Subject) -> None:
    claim = await subject.authority.claim("k", owner="a", lease=0.4)  # margin: 0.1 s
    await claim.verify()
    await eventually(lambda: claim.remaining() < 0.1, what="inside the margin")
    with pytest.raises(ClaimLost, match="safety margin"):
        await claim.verify()


async def test_batches_report_each_outcome(subject: Subject) -> None:
    authority = subject.authority
    done = await authority.claim("done", owner="x", lease=5)
    await done.complete()
    await authority.claim("held", owner="x", lease=5)
    outcomes = await authority.claim_many(
        [("new", None), ("held", None), ("done", None)], owner="w", lease=5
    )
    new, held, finished = outcomes
    assert not isinstance(new, Exception) and new.key == "new"
    assert isinstance(held, AlreadyClaimed) and held.owner == "x"
    assert isinstance(finished, AlreadyDone) and finished.token == done.token
    other = await authority.claim("other", owner="w", lease=5)
    await other.release()
    assert _kinds(await authority.extend_many([new, other])) == [None, "ClaimLost"]
    assert _kinds(await authority.complete_many([new, other])) == [None, "ClaimLost"]
    with pytest.raises(AlreadyDone):
        await authority.claim("new", owner="w", lease=5)


async def test_a_handed_back_job_is_due_and_grabbed_by_one_reaper(subject: Subject) -> None:
    authority = subject.authority
    claim = await authority.claim("k", owner="a", lease=5, reoffer=b"if lost")
    assert await authority.due(10) == []
    await claim.hand_back(b"retry", delay=0)
    assert await authority.due(10) == ["k"]
    grab = await authority.grab("k")
    assert grab is not None and grab.payload == b"retry"
    assert await authority.grab("k") is None  # another reaper: not due any more
    assert await authority.reaped(grab)
    assert await authority.due(10) == []


async def test_an_expired_claims_reoffer_falls_due_and_a_crashed_grab_again(
    subject: Subject,
) -> None:
    authority = subject.authority
    await authority.claim("k", owner="a", lease=0.2, reoffer=b"job")
    await eventually(lambda: _due(authority, "k"), what="the record due")
    first = await authority.grab("k")
    assert first is not None and first.payload == b"job"
    # The reaper dies before reaped(): after its grab's lease, the record is due again.
    await eventually(lambda: _due(authority, "k"), what="due again")
    second = await authority.grab("k")
    assert second is not None and second.grab_id != first.grab_id
    assert not await authority.reaped(first)
    assert await authority.reaped(second)


async def test_completed_and_live_claims_are_not_reoffered(subject: Subject) -> None:
    authority = subject.authority
    live = await authority.claim("live", owner="a", lease=5, reoffer=b"x")
    done = await authority.claim("done", owner="a", lease=5, reoffer=b"y")
    await done.complete()
    assert await authority.grab("live") is None and await authority.grab("done") is None
    await live.release()
    assert await authority.due(10) == []


async def test_a_forgotten_state_is_raised_once_then_the_authority_works(
    subject: Subject,
) -> None:
    authority = subject.authority
    before = await authority.claim("k", owner="a", lease=5)
    assert authority.state_losses == 0
    subject.forget()
    with pytest.raises(LensStateLost):
        await authority.claim("other", owner="a", lease=5)
    assert authority.state_losses == 1
    after = await authority.claim("k", owner="b", lease=5)  # the old claim is gone
    assert after.token > before.token
    with pytest.raises(ClaimLost):
        await before.complete()
    await after.complete()
    assert authority.state_losses == 1


def _kinds(outcomes: Sequence[Exception | None]) -> list[str | None]:
    """Each batch outcome by its kind (errors compare by identity)."""
    return [None if outcome is None else type(outcome).__name__ for outcome in outcomes]


async def _claim_when_free(authority: ClaimAuthority, key: str) -> HeldClaim:
    """Claim ``key`` once its holder's lease is over by the authority's clock
    too (the holder's own clock ends it first)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        try:
            return await authority.claim(key, owner="b", lease=5)
        except AlreadyClaimed:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.01)


async def _due(authority: ClaimAuthority, key: str) -> bool:
    return key in await authority.due(10)
