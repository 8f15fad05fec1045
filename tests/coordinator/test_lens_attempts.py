"""A job's attempts counted where every copy of it meets: the claim
authority (lua/claim.lua, lua/release.lua, lua/complete.lua on a real
redis-server, and the in-memory fake that answers as they do).

The race these close, on two nodes that both hold job k::

    t0  node A's worker claims k (attempt 1); it fails: release with the
        failure -> the Lens records "next 2, due t0 + backoff"
    t1  node B's worker reserves its copy of k (the Take has not reached B)
        and claims it, its trailer saying attempt 1 -> NotDue: parked
    t2  (after the backoff) a copy claims k -> attempt 2, whatever its
        trailer says
"""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from forum.coordinator import AttemptsSpent, Failed, Lens, LensStateLost, NotDue
from forum.coordinator.keys import KeySchema
from tests.coordinator.harness import eventually
from tests.coordinator.test_authority_contract import Subject, subject

__all__ = ["subject"]  # the contract's fixture: the fake and a real Lens


async def test_a_copy_met_after_a_failure_waits_for_the_backoff_and_is_the_next_attempt(
    subject: Subject,
) -> None:
    authority = subject.authority
    first = await authority.claim("k", owner="a", lease=5)
    assert (first.attempt, first.lapsed) == (1, False)
    await first.release(Failed(30.0))
    with pytest.raises(NotDue) as early:
        await authority.claim("k", owner="b", lease=5, attempt=1)
    assert early.value.attempt == 2 and 0 < early.value.remaining <= 30.0

    again = await authority.claim("k2", owner="a", lease=5)
    await again.release(Failed(0.0))
    second = await authority.claim("k2", owner="b", lease=5, attempt=1)
    assert second.attempt == 2  # the Lens's count, not the copy's trailer
    await second.release(Failed(0.0))
    third = await authority.claim("k2", owner="a", lease=5, attempt=7)
    assert third.attempt == 7  # a trailer ahead of the Lens (it forgot) is believed


async def test_a_plain_release_does_not_count_as_an_attempt(
    subject: Subject,
) -> None:
    authority = subject.authority
    first = await authority.claim("k", owner="a", lease=5)
    await first.release(Failed(0.0))
    drained = await authority.claim("k", owner="a", lease=5)
    await drained.release()  # handed back in a drain: not a failure
    run = await authority.claim("k", owner="b", lease=5)
    assert run.attempt == 2  # the drained attempt 2 runs again as 2


async def test_only_a_failure_leaves_an_attempts_record_and_a_completion_drops_it(
    lens: Lens, redis_url: str
) -> None:
    attempts = KeySchema().attempts("k")
    async with Redis.from_url(redis_url) as redis:
        claim = await lens.claim("k", owner="a", lease=5)
        assert not await redis.exists(attempts)  # a job that succeeds first time: no record
        await claim.release(Failed(0.0, revived="n:9"))
        record = await redis.hgetall(attempts)
        assert (record[b"next"], record[b"revived"]) == (b"2", b"n:9")
        assert 0 < await redis.pttl(attempts) <= lens.config.retention * 1000
        again = await lens.claim("k", owner="a", lease=5, revived="n:9")
        await again.complete()
        assert not await redis.exists(attempts)  # the done marker turns copies away now


async def test_a_buried_job_turns_its_copies_away_until_requeued(subject: Subject) -> None:
    authority = subject.authority
    last = await authority.claim("k", owner="a", lease=5, attempt=3)
    await last.release(Failed(None))
    with pytest.raises(AttemptsSpent) as spent:
        await authority.claim("k", owner="b", lease=5, attempt=1)
    assert spent.value.made == 3
    # Requeued from its dead letter: counted afresh, and buried again later.
    revived = await authority.claim("k", owner="b", lease=5, revived="n:9")
    assert revived.attempt == 1
    await revived.release(Failed(None, revived="n:9"))
    for copy in (None, "n:9"):  # a copy from before the first burial, or the second's
        with pytest.raises(AttemptsSpent):
            await authority.claim("k", owner="c", lease=5, revived=copy)


async def test_a_holder_whose_lease_ran_out_counts_as_an_attempt(subject: Subject) -> None:
    authority = subject.authority
    await authority.claim("k", owner="dies", lease=0.2, attempt=2)

    async def claimed() -> bool:
        try:
            claim = await authority.claim("k", owner="b", lease=5, attempt=1)
        except Exception:
            return False
        assert (claim.attempt, claim.lapsed) == (3, True)
        return True

    await eventually(claimed, what="the lapsed claim's key")


async def test_an_authority_that_forgets_counts_from_the_trailer_again(subject: Subject) -> None:
    authority = subject.authority
    first = await authority.claim("k", owner="a", lease=5)
    await first.release(Failed(30.0))
    subject.forget()
    with pytest.raises(LensStateLost):
        await authority.claim("k", owner="b", lease=5)
    copy = await authority.claim("k", owner="b", lease=5, attempt=1)
    assert copy.attempt == 1  # the count went with the state: the copy's trailer decides
