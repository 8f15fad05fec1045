"""The ``ClaimAuthority`` contract, run against the in-memory fake
(``forum.coordinator.memory.MemoryAuthority``) and a real ``Lens`` on a real
redis-server: the fake answers as the Lens does, so worker logic tested on
the fake holds on the Lens."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace

import pytest

from forum.coordinator import (
    AlreadyClaimed,
    AlreadyDone,
    CancelOutcome,
    ClaimAuthority,
    ClaimLost,
    HeldClaim,
    KeyState,
    Lens,
    LensStateLost,
)
from forum.coordinator.keys import HISTORY_LENGTH
from forum.coordinator.limits import Ask, Limit, Limiter
from forum.coordinator.memory import MemoryAuthority
from forum.coordinator.records import NewRecord
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


# -- what is known about a key (forum.coordinator.records) -----------------------------------


async def test_inspect_shows_the_holder_with_its_attempt_then_the_done_token(
    subject: Subject,
) -> None:
    authority = subject.authority
    assert await authority.inspect("k") == KeyState("k")
    before = time.time()
    (claim,) = await authority.claim_many([("k", None)], owner="w1", lease=5, attempts=[3])
    assert not isinstance(claim, Exception)
    state = await authority.inspect("k")
    assert state.claim is not None and state.done_token is None
    assert (state.claim.token, state.claim.owner, state.claim.attempt) == (claim.token, "w1", 3)
    assert before - 1 <= state.claim.since <= time.time() + 1  # Redis's clock, near ours
    assert 4 < state.claim.remaining <= 5
    await claim.complete()
    assert await authority.inspect("k") == KeyState("k", done_token=claim.token)


async def test_a_fenced_record_is_written_by_the_live_claim_only(subject: Subject) -> None:
    authority = subject.authority
    stale = await authority.claim("k", owner="a", lease=0.2)
    await authority.record(stale, {"state": "running", "n": 1, "x": 0.5, "raw": b"\xff"}, ttl=60)
    record = (await authority.inspect("k")).record
    assert record == {
        "state": b"running", "n": b"1", "x": b"0.5", "raw": b"\xff",
        "token": str(stale.token).encode(),
    }  # fmt: skip
    await eventually(lambda: stale.remaining() < 0, what="the lease over")
    fresh = await _claim_when_free(authority, "k")
    with pytest.raises(ClaimLost):
        await authority.record(stale, {"state": "stale result"}, ttl=60)
    assert (await authority.inspect("k")).record == record  # the refused write wrote nothing
    # A newer claim's first write replaces the older claim's record; later ones add to it.
    await authority.record(fresh, {"state": "running"}, ttl=60)
    await authority.record(fresh, {"result": b"42"}, ttl=60)
    assert (await authority.inspect("k")).record == {
        "state": b"running", "result": b"42", "token": str(fresh.token).encode(),
    }  # fmt: skip


async def test_a_producers_record_is_written_once_and_kept_by_the_first_claim(
    subject: Subject,
) -> None:
    authority = subject.authority
    assert await authority.record_enqueued("k", {"task": "resize"}, ttl=60)
    assert not await authority.record_enqueued("k", {"task": "other"}, ttl=60)
    claim = await authority.claim("k", owner="a", lease=5)
    await authority.record(claim, {"state": "running"}, ttl=60)
    assert (await authority.inspect("k")).record == {
        "task": b"resize", "state": b"running", "token": str(claim.token).encode(),
        "ix": b"running",  # the job index's state (forum.coordinator.jobindex)
    }  # fmt: skip


async def test_a_batch_of_producers_records_writes_each_new_key_once(subject: Subject) -> None:
    authority = subject.authority
    claim = await authority.claim("held", owner="a", lease=5)
    await authority.record(claim, {"state": "running"}, ttl=60)
    keys = [f"job-{i}" for i in range(40)]  # spread over the shards
    batch = [NewRecord(key, {"task": "t", "n": i}, ttl=60) for i, key in enumerate(keys)]
    batch += [NewRecord("held", {"task": "late"}, 60), NewRecord("job-0", {"task": "again"}, 60)]
    written = await authority.record_enqueued_many(batch)
    assert written == [True] * 40 + [False, False]
    states = await authority.inspect_many([*keys, "held", "none"])
    assert [state.key for state in states] == [*keys, "held", "none"]
    assert [state.record for state in states[:40]] == [
        {"task": b"t", "n": str(i).encode(), "ix": b"queued"} for i in range(40)
    ]
    assert states[40].record["state"] == b"running" and states[40].claim is not None
    assert states[41] == KeyState("none")
    assert await authority.record_enqueued_many([]) == []
    assert await authority.inspect_many([]) == []


@pytest.mark.parametrize(
    "bad", [NewRecord("", {"task": "t"}, 60), NewRecord("k", {}, 60), NewRecord("k", {"a": 1}, 0)]
)
async def test_a_batch_with_a_bad_record_writes_none(subject: Subject, bad: NewRecord) -> None:
    authority = subject.authority
    with pytest.raises(ValueError):
        await authority.record_enqueued_many([NewRecord("good", {"task": "t"}, 60), bad])
    assert (await authority.inspect("good")).record == {}


async def test_forget_record_drops_a_record_nobody_holds_only(subject: Subject) -> None:
    authority = subject.authority
    assert await authority.record_enqueued("free", {"state": "dead"}, ttl=60)
    claim = await authority.claim("held", owner="a", lease=5)
    await authority.record(claim, {"state": "running"}, ttl=60)
    assert await authority.forget_record("free")
    assert not await authority.forget_record("free")
    with pytest.raises(AlreadyClaimed):
        await authority.forget_record("held")
    assert (await authority.inspect("free")).record == {}
    assert (await authority.inspect("held")).record["state"] == b"running"


async def test_records_expire_with_their_ttl(subject: Subject) -> None:
    authority = subject.authority
    assert await authority.record_enqueued("k", {"task": "t"}, ttl=0.1)
    await eventually(lambda: _no_record(authority, "k"), what="the record expired")
    assert await authority.record_enqueued("k", {"task": "t"}, ttl=60)


@pytest.mark.parametrize(
    "fields",
    [{"token": "1"}, {"cancelled": "1"}, {"": "x"}, {"flag": True}, {"none": None}],
)
async def test_a_record_refuses_fields_it_cannot_keep_and_writes_nothing(
    subject: Subject, fields: dict[str, object]
) -> None:
    authority = subject.authority
    claim = await authority.claim("k", owner="a", lease=5)
    with pytest.raises((ValueError, TypeError)):
        await authority.record(claim, fields, ttl=60)  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError)):
        await authority.record_enqueued("other", fields, ttl=60)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl"):
        await authority.record(claim, {"a": 1}, ttl=0)
    assert (await authority.inspect("k")).record == {}
    assert (await authority.inspect("other")).record == {}


async def test_the_history_tells_each_claim_and_how_it_ended(subject: Subject) -> None:
    authority = subject.authority
    first = await authority.claim("k", owner="w1", lease=5, attempt=1)
    await first.release()
    second = await authority.claim("k", owner="w2", lease=5, attempt=2)
    await second.hand_back(b"again", delay=0)
    grab = await authority.grab("k")
    assert grab is not None and await authority.reaped(grab)
    third = await authority.claim("k", owner="w3", lease=5, attempt=3)
    await third.complete()
    events = await authority.history("k")
    assert [(e.event, e.token, e.owner, e.attempt) for e in events] == [
        ("claimed", first.token, "w1", 1),
        ("released", first.token, "w1", 1),
        ("claimed", second.token, "w2", 2),
        ("handed_back", second.token, "w2", 2),
        ("reoffered", second.token, "w2", 2),
        ("claimed", third.token, "w3", 3),
        ("completed", third.token, "w3", 3),
    ]
    ats = [event.at for event in events]
    assert ats == sorted(ats) and abs(ats[-1] - time.time()) < 60
    assert await authority.history("never") == []


async def test_the_history_keeps_the_last_events_only(subject: Subject) -> None:
    authority = subject.authority
    tokens = []
    for attempt in range(1, HISTORY_LENGTH):  # two events each
        claim = await authority.claim("k", owner="w", lease=5, attempt=attempt)
        await claim.release()
        tokens.append(claim.token)
    events = await authority.history("k")
    assert len(events) == HISTORY_LENGTH
    assert events[-1] == replace(events[-1], event="released", token=tokens[-1])
    assert events[0].attempt == HISTORY_LENGTH - HISTORY_LENGTH // 2


async def test_cancel_makes_a_key_done_and_retires_its_holders_token(subject: Subject) -> None:
    authority = subject.authority
    await authority.record_enqueued("queued", {"task": "t"}, ttl=60)
    cancelled = await authority.cancel("queued")
    assert cancelled.state == "cancelled" and cancelled.token is not None
    with pytest.raises(AlreadyDone) as done:
        await authority.claim("queued", owner="w", lease=5)  # every copy is turned away
    assert done.value.token == cancelled.token
    state = await authority.inspect("queued")
    assert state.done_token == cancelled.token
    assert state.record == {
        "task": b"t", "cancelled": str(cancelled.token).encode(), "ix": b"cancelled",
    }  # fmt: skip
    assert [e.event for e in await authority.history("queued")] == ["cancelled"]
    assert await authority.cancel("queued") == CancelOutcome("done", token=cancelled.token)

    held = await authority.claim("held", owner="w1", lease=5, attempt=2)
    await authority.record(held, {"state": "running"}, ttl=60)
    stopped = await authority.cancel("held")
    assert (stopped.state, stopped.owner) == ("cancelled", "w1")
    assert stopped.token is not None and stopped.token > held.token
    # The holder's token is retired: the store refuses its record and completion.
    with pytest.raises(ClaimLost):
        await authority.record(held, {"state": "done"}, ttl=60)
    with pytest.raises(ClaimLost):
        await held.complete()
    assert await authority.cancelled_many([held]) == [
        True
    ]  # ended by a refusal, found all the same
    state = await authority.inspect("held")
    assert state.claim is None and state.done_token == stopped.token
    assert state.record["state"] == b"running"  # the late write was refused
    assert [(e.event, e.token, e.owner, e.attempt) for e in await authority.history("held")] == [
        ("claimed", held.token, "w1", 2),
        ("cancelled", stopped.token, "w1", 2),
    ]
    assert await authority.cancel("held") == CancelOutcome("done", token=stopped.token)

    # A holder asks whether it was cancelled (the worker's watch): then its
    # claim is ended, every call refused, saying so.
    watched = [await authority.claim(k, owner="w2", lease=5) for k in ("w-1", "w-2", "w-3")]
    await watched[1].complete()
    await authority.cancel("w-3")
    assert await authority.cancelled_many(watched) == [False, False, True]
    for call in (watched[2].verify, watched[2].extend, watched[2].release):
        with pytest.raises(ClaimLost, match="cancelled"):
            await call()
    await watched[0].verify()  # not cancelled: still held

    # Lost to a lapse and completed by the next holder: not a cancel (the
    # heartbeat tells the holder it lost its claim).
    lapsed = await authority.claim("w-4", owner="w3", lease=0.2)
    await eventually(lambda: _claimable(authority, "w-4"), what="the lease to run out")
    await (await authority.claim("w-4", owner="w4", lease=5)).complete()
    assert await authority.cancelled_many([lapsed]) == [False]

    nothing = await authority.cancel("unknown")  # a key never seen can be cancelled too
    assert nothing.state == "cancelled" and nothing.token is not None
    assert nothing.token > held.token


async def test_scan_lists_every_key_with_a_record_or_a_live_claim(subject: Subject) -> None:
    authority = subject.authority
    keys = {f"job-{i}" for i in range(40)} | {"with space", "ünïcode", "a:b:c"}
    for key in keys:
        assert await authority.record_enqueued(key, {"task": "t"}, ttl=60)
    held = {await authority.claim(k, owner="w", lease=5) for k in ("c1", "c2")}
    done = await authority.claim("c3", owner="w", lease=5)
    await done.complete()
    assert {key async for key in authority.scan("task", count=7)} == keys
    assert {key async for key in authority.scan("claim")} == {c.key for c in held}
    with pytest.raises(ValueError):
        [key async for key in authority.scan("done")]  # type: ignore[arg-type]


async def _no_record(authority: ClaimAuthority, key: str) -> bool:
    return not (await authority.inspect(key)).record


async def test_the_history_shows_the_live_claim_and_a_lease_that_ran_out(
    subject: Subject,
) -> None:
    """t0: A claims k (0.2 s). t1: A's lease runs out (A died). t2: B claims
    k: A's claim is "expired" in the history, B's the live "claimed". t3: B
    releases; a cancel finds k free."""
    authority = subject.authority
    a = await authority.claim("k", owner="a", lease=0.2, attempt=1)
    assert [(e.event, e.token) for e in await authority.history("k")] == [("claimed", a.token)]
    await eventually(lambda: a.remaining() < 0, what="A's lease over")
    b = await _claim_when_free(authority, "k")
    events = await authority.history("k")
    assert [(e.event, e.token, e.owner) for e in events] == [
        ("claimed", a.token, "a"), ("expired", a.token, "a"), ("claimed", b.token, "b"),
    ]  # fmt: skip
    assert events[0].at <= events[1].at <= time.time() + 1
    await b.release()
    c = await authority.claim("k", owner="c", lease=0.2)
    await eventually(lambda: c.remaining() < 0, what="C's lease over")
    await eventually(lambda: _free(authority, "k"), what="C's lease over in the authority")
    cancelled = await authority.cancel("k")
    assert cancelled.state == "cancelled"
    assert [(e.event, e.token) for e in await authority.history("k")][-3:] == [
        ("claimed", c.token), ("expired", c.token), ("cancelled", cancelled.token),
    ]  # fmt: skip


async def _free(authority: ClaimAuthority, key: str) -> bool:
    return (await authority.inspect(key)).claim is None


# -- retention: what a completed job leaves, and for how long -------------------------------

#: A short retention to watch it end: the done marker lives RETENTION s, the
#: history HISTORY_TTL s after its last event (both authorities alike).
RETENTION, HISTORY_TTL = 3.0, 1.0


@pytest.fixture(params=["memory", "lens"])
async def short_lived(request: pytest.FixtureRequest) -> AsyncIterator[ClaimAuthority]:
    """An authority whose done markers and histories expire within a second."""
    if request.param == "memory":
        yield MemoryAuthority(retention=RETENTION, history_ttl=HISTORY_TTL)
        return
    url: str = request.getfixturevalue("redis_url")
    options = {"forget_after": RETENTION / 2, "done_ttl": RETENTION, "history_ttl": HISTORY_TTL}
    async with Lens.from_url(url, **options) as lens:
        yield lens


async def test_the_done_marker_turns_a_late_copy_away_after_the_history_is_gone(
    short_lived: ClaimAuthority,
) -> None:
    """t0: A completes k. t1 (HISTORY_TTL later): k's history is gone. t2: a
    late copy of k (a double take across a partition) claims it: AlreadyDone,
    with A's token, until the done marker's retention is over."""
    authority = short_lived
    first = await authority.claim("k", owner="a", lease=5)
    await first.complete()
    assert [e.event for e in await authority.history("k")] == ["claimed", "completed"]
    await eventually(lambda: _no_history(authority, "k"), what="the history gone")
    with pytest.raises(AlreadyDone) as late:
        await authority.claim("k", owner="b", lease=5)
    assert late.value.token == first.token
    assert (await authority.inspect("k")).done_token == first.token


async def test_the_done_marker_ends_with_its_retention(short_lived: ClaimAuthority) -> None:
    """The marker is kept for the retention, then dropped: a completed job's
    memory follows the retention, not the history of every job ever run."""
    authority = short_lived
    first = await authority.claim("k", owner="a", lease=5)
    await first.complete()
    await eventually(lambda: _not_done(authority, "k"), what="the retention over")
    again = await authority.claim("k", owner="b", lease=5)
    assert again.token > first.token


async def test_no_history_is_kept_with_a_history_ttl_of_zero(subject: Subject) -> None:
    authority = subject.authority
    if isinstance(authority, MemoryAuthority):
        authority = MemoryAuthority(history_ttl=0)
    else:
        authority = Lens(replace(authority.config, history_ttl=0))
    try:
        first = await authority.claim("k", owner="a", lease=5)
        await first.complete()
        assert await authority.history("k") == []
        second = await authority.claim("j", owner="a", lease=5)
        assert [e.event for e in await authority.history("j")] == ["claimed"]  # the live one
        await second.release()
        assert await authority.history("j") == []
        with pytest.raises(AlreadyDone):
            await authority.claim("k", owner="b", lease=5)
    finally:
        if isinstance(authority, Lens):
            await authority.aclose()


async def _no_history(authority: ClaimAuthority, key: str) -> bool:
    return await authority.history(key) == []


async def _not_done(authority: ClaimAuthority, key: str) -> bool:
    return (await authority.inspect(key)).done_token is None


# -- limits (forum.coordinator.limits): the Lens's and the memory authority's --------


def _limiter(subject: Subject) -> Limiter:
    assert isinstance(subject.authority, Limiter)
    return subject.authority


async def test_a_running_limit_admits_at_most_its_number_until_one_is_released(
    subject: Subject,
) -> None:
    limiter = _limiter(subject)
    two = (Limit("task:t", running=2),)
    asks = [Ask(f"job-{n}", "t", two) for n in range(3)]
    answers = await limiter.admit_many(asks, 5)
    assert answers[:2] == [(0.0, False), (0.0, False)]
    wait, exact = answers[2]
    assert 0 < wait <= 5 and not exact  # to the earliest slot's expiry, at most
    # One admitted already is admitted again (a retry of the same admission).
    assert await limiter.admit_many([asks[0]], 5) == [(0.0, False)]
    await limiter.release_admitted([asks[0]])
    assert await limiter.admit_many([asks[2]], 5) == [(0.0, False)]
    assert (await limiter.admit_many([asks[0]], 5))[0][0] > 0


async def test_a_job_is_admitted_under_all_of_its_limits_or_none(subject: Subject) -> None:
    limiter = _limiter(subject)
    task, key = Limit("task:t", running=1), Limit("key:t:k", running=1)
    assert await limiter.admit_many([Ask("a", "t", (task,))], 5) == [(0.0, False)]
    # Refused by the task's limit: it holds no slot of the key's.
    (refused,) = await limiter.admit_many([Ask("b", "t", (task, key))], 5)
    assert refused[0] > 0
    assert await limiter.admit_many([Ask("c", "t", (key,))], 5) == [(0.0, False)]


async def test_a_rate_admits_one_a_turn_and_says_exactly_when_the_next_is(
    subject: Subject,
) -> None:
    limiter = _limiter(subject)
    ten = (Limit("task:r", rate=10.0),)
    (first, second) = await limiter.admit_many([Ask("a", "r", ten), Ask("b", "r", ten)], 5)
    assert first == (0.0, False)
    wait, exact = second
    assert exact and 0 < wait <= 0.05  # to the turn, less half an interval
    await asyncio.sleep(wait)
    assert await limiter.admit_many([Ask("b", "r", ten)], 5) == [(0.0, False)]


async def test_an_admission_not_extended_expires_and_frees_its_slot(subject: Subject) -> None:
    limiter = _limiter(subject)
    one = (Limit("task:e", running=1),)
    held, waiting = Ask("dead-worker", "e", one), Ask("next", "e", one)
    assert await limiter.admit_many([held], 0.2) == [(0.0, False)]
    assert await limiter.extend_admitted([held], 0.2) == [True]
    assert (await limiter.admit_many([waiting], 0.2))[0][0] > 0

    async def admitted() -> bool:
        return await limiter.admit_many([waiting], 5) == [(0.0, False)]

    await eventually(admitted, 5, "the dead holder's slot to expire")
    assert await limiter.extend_admitted([held], 5) == [False]


async def _claimable(authority: ClaimAuthority, key: str) -> bool:
    return (await authority.inspect(key)).claim is None
