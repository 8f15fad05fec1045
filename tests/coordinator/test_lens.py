"""The Lens against a real redis-server: claims, conflicts, fencing, expiry, outages."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from forum.coordinator import AlreadyClaimed, AlreadyDone, Claim, ClaimLost, Lens, LensUnavailable
from forum.coordinator.lens import LensConfig
from tests.coordinator.harness import eventually
from tests.fixtures.redis_server import RedisServer


async def test_claim_conflict_release_complete_done(lens: Lens) -> None:
    a = await lens.claim("o:1", owner="worker-a", lease=30)
    assert a.key == "o:1" and a.owner == "worker-a" and a.token > 0

    with pytest.raises(AlreadyClaimed) as conflict:
        await lens.claim("o:1", owner="worker-b", lease=30)
    assert conflict.value.owner == "worker-a"
    # The holder's lease left, as Redis counts it: at most 30 s, and not long gone.
    assert conflict.value.remaining is not None and 25 < conflict.value.remaining <= 30

    await a.release()
    b = await lens.claim("o:1", owner="worker-b", lease=30)
    assert b.token > a.token

    await b.verify()
    await b.extend(30)
    await b.complete()
    assert await lens.done_token("o:1") == b.token

    with pytest.raises(AlreadyDone) as done:
        await lens.claim("o:1", owner="worker-c", lease=30)
    assert done.value.token == b.token


async def test_an_ended_claim_refuses_everything(lens: Lens) -> None:
    claim = await lens.claim("o:2", owner="a", lease=30)
    await claim.complete()
    for operation in (claim.verify, claim.extend, claim.complete, claim.release):
        with pytest.raises(ClaimLost, match="completed"):
            await operation()


async def test_expiry_take_over_stale_holder_refused_everywhere(lens: Lens) -> None:
    """t0: A claims (lease 0.3 s) and stalls. t1: the lease runs out.
    t2: B claims the key. t3: A wakes up: every call it makes is refused."""
    a = await lens.claim("o:3", owner="a", lease=0.3)

    async def b_claims() -> bool:
        try:
            await lens.claim("o:3", owner="b", lease=30)
        except AlreadyClaimed:
            return False
        return True

    await eventually(b_claims, what="B's take-over")

    async def hand_back() -> None:
        await a.hand_back(b"x")

    for operation in (a.verify, a.extend, a.complete, a.release, hand_back):
        with pytest.raises(ClaimLost):
            await operation()
    assert await lens.done_token("o:3") is None


async def test_stale_holder_refused_by_redis_not_only_locally(lens: Lens) -> None:
    """A stale holder whose own clock still says "valid" is refused by Redis."""
    a = await lens.claim("o:4", owner="a", lease=30)
    await a.release()
    fresh = await lens.claim("o:4", owner="b", lease=30)
    # Rebuild A's view of the world: the same token, a deadline far away.
    deadline = time.monotonic() + 30
    ghost = type(a)(lens, key="o:4", owner="a", token=a.token, lease=30, deadline=deadline)
    for operation in (ghost.verify, ghost.extend, ghost.complete, ghost.release):
        with pytest.raises(ClaimLost):
            await operation()
    await fresh.verify()


async def test_verify_refuses_within_the_safety_margin(redis_url: str) -> None:
    async with Lens.from_url(redis_url, safety_margin=0.2) as lens:
        claim = await lens.claim("o:5", owner="a", lease=1.0)
        assert claim.margin == pytest.approx(0.2)
        await claim.verify()
        await eventually(lambda: claim.remaining() < 0.2, what="lease inside the margin")
        with pytest.raises(ClaimLost, match="safety margin"):
            await claim.verify()
        # Extending gives the holder back a full lease.
        await claim.extend(1.0)
        await claim.verify()


async def test_lease_is_measured_from_before_the_request(lens: Lens) -> None:
    before = time.monotonic()
    claim = await lens.claim("o:6", owner="a", lease=10)
    after = time.monotonic()
    # remaining() reads the clock first, then the test: its deadline is at
    # most that much earlier than now + remaining, never later.
    remaining = claim.remaining()
    assert before + 10 - 1e-6 <= time.monotonic() + remaining <= after + 10 + 1e-3


async def test_tokens_strictly_increase_across_keys_and_connections(redis_url: str) -> None:
    # 200 concurrent claims open up to 200 connections at once: on a loaded
    # machine that can outlast the default 1 s connect timeout.
    async with (
        Lens.from_url(redis_url, connect_timeout=10) as one,
        Lens.from_url(redis_url, connect_timeout=10) as two,
    ):
        issued = []
        for i in range(40):
            lens = one if i % 2 else two
            claim = await lens.claim(f"k:{i}", owner=f"w{i % 2}", lease=30)
            issued.append(claim.token)
        assert issued == sorted(issued) and len(set(issued)) == len(issued)

        # Concurrent claims on many keys from both connections: all distinct.
        claims = await asyncio.gather(
            *((one if i % 2 else two).claim(f"c:{i}", owner="w", lease=30) for i in range(200))
        )
        tokens = [c.token for c in claims]
        assert len(set(tokens)) == len(tokens)
        assert min(tokens) > max(issued)


@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_tokens_keep_increasing_after_redis_restart(
    private_redis: RedisServer, how: str
) -> None:
    """appendfsync always: even after SIGKILL, the fence is never reused."""
    async with Lens.from_url(private_redis.url) as lens:
        before = [(await lens.claim(f"k:{i}", owner="a", lease=60)).token for i in range(5)]
        await (private_redis.astop() if how == "stop" else private_redis.akill())
        await private_redis.astart()
        # The client reconnects by itself; the claims are still held (AOF).
        with pytest.raises(AlreadyClaimed):
            await lens.claim("k:0", owner="b", lease=60)
        after = await lens.claim("k:new", owner="b", lease=60)
        assert after.token > max(before)


async def test_scripts_reload_after_script_flush(lens: Lens, redis_server: RedisServer) -> None:
    await (await lens.claim("o:7", owner="a", lease=30)).complete()
    with redis.Redis(port=redis_server.port) as r:
        r.script_flush()
    claim = await lens.claim("o:8", owner="a", lease=30)
    await claim.complete()


async def test_namespaces_do_not_meet(redis_url: str) -> None:
    async with (
        Lens.from_url(redis_url, namespace="blue") as blue,
        Lens.from_url(redis_url, namespace="green") as green,
    ):
        await (await blue.claim("o:9", owner="a", lease=30)).complete()
        await (await green.claim("o:9", owner="a", lease=30)).complete()


async def test_redis_down_is_lens_unavailable_fast(private_redis: RedisServer) -> None:
    async with Lens.from_url(private_redis.url, timeout=0.5, connect_timeout=0.5) as lens:
        claim = await lens.claim("o:10", owner="a", lease=30)
        await private_redis.astop()
        started = time.monotonic()
        async with asyncio.timeout(5):
            with pytest.raises(LensUnavailable) as failure:
                await lens.claim("o:11", owner="a", lease=30)
            assert failure.value.retriable and isinstance(failure.value, ConnectionError)
            for operation in (claim.verify, claim.extend, claim.complete, lens.ping):
                with pytest.raises(LensUnavailable):
                    await operation()
        assert time.monotonic() - started < 3

        # The claim survived in the AOF and is usable once Redis is back.
        await private_redis.astart()
        await claim.complete()


async def test_hung_redis_is_lens_unavailable_not_a_hang(private_redis: RedisServer) -> None:
    async with Lens.from_url(private_redis.url, timeout=0.3, connect_timeout=0.3) as lens:
        claim = await lens.claim("o:12", owner="a", lease=30)
        private_redis.pause()
        try:
            async with asyncio.timeout(5):
                with pytest.raises(LensUnavailable):
                    await claim.verify()
                with pytest.raises(LensUnavailable):
                    await lens.claim("o:13", owner="a", lease=30)
        finally:
            private_redis.resume()
        await eventually(_answers(lens), what="Redis answering again")
        await claim.complete()


def _answers(lens: Lens):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        try:
            await lens.ping()
        except LensUnavailable:
            return False
        return True

    return check


async def test_repeats_after_a_lost_reply_succeed(lens: Lens) -> None:
    """complete and hand_back are safe to send again when the first reply was lost."""
    claim = await lens.claim("o:14", owner="a", lease=30)
    await claim.complete()
    assert await lens._run("complete", "o:14", claim.token, 60_000) == 2
    assert [e.event for e in await lens.history("o:14")] == ["claimed", "completed"]

    other = await lens.claim("o:15", owner="a", lease=30)
    await other.hand_back(b"job/again", delay=60)
    assert await lens._run("hand_back", "o:15", other.token, 0, b"job/again", 60_000) == 2
    assert [e.event for e in await lens.history("o:15")] == ["claimed", "handed_back"]


# --- in-flight records and the reaper's side of the Lens ---------------------------------


async def test_expired_claim_is_reoffered_once(lens: Lens) -> None:
    await lens.claim("o:20", owner="a", lease=0.2, reoffer=b"job/20")
    assert await lens.due() == []
    await eventually(lambda: _due_has(lens, "o:20"), what="record due")

    # Many reapers at once: exactly one grabs it.
    grabs = await asyncio.gather(*(lens.grab("o:20") for _ in range(8)))
    won = [g for g in grabs if g is not None]
    assert len(won) == 1 and won[0].payload == b"job/20"
    assert await lens.due() == []
    assert await lens.reaped(won[0])
    assert await lens.grab("o:20") is None


async def test_a_crashed_reapers_grab_falls_due_again(redis_url: str) -> None:
    async with Lens.from_url(redis_url, reaper_lease=0.2) as lens:
        await lens.claim("o:21", owner="a", lease=0.1, reoffer=b"job/21")
        await eventually(lambda: _due_has(lens, "o:21"), what="record due")
        first = await lens.grab("o:21")
        assert first is not None
        # The first reaper dies here, before writing the job back.
        await eventually(lambda: _due_has(lens, "o:21"), what="grab expired")
        second = await lens.grab("o:21")
        assert second is not None and second.payload == b"job/21"
        assert not await lens.reaped(first)  # the dead reaper's grab is void
        assert await lens.reaped(second)


async def test_reoffered_job_claimed_before_reaped_keeps_its_new_record(lens: Lens) -> None:
    """t0: A's claim expires. t1: the reaper grabs and writes the job back.
    t2: B takes it and claims the key. t3: the reaper reports it reaped:
    the record now belongs to B's claim and stays."""
    await lens.claim("o:22", owner="a", lease=0.1, reoffer=b"job/22 v1")
    await eventually(lambda: _due_has(lens, "o:22"), what="record due")
    grab = await lens.grab("o:22")
    assert grab is not None
    b = await lens.claim("o:22", owner="b", lease=0.2, reoffer=b"job/22 v2")
    assert not await lens.reaped(grab)
    # B dies too: its record, not A's, is re-offered.
    await eventually(lambda: _due_has(lens, "o:22"), what="B's record due")
    again = await lens.grab("o:22")
    assert again is not None and again.payload == b"job/22 v2"
    with pytest.raises(ClaimLost):
        await b.complete()


async def test_a_claim_without_reoffer_after_an_expired_one_drops_its_record(
    lens: Lens,
) -> None:
    """t0: A claims with a re-offer and dies. t1: A's lease ends; its record
    is due. t2: B claims the key with nothing to re-offer (claim.lua removes
    the zset member only when an earlier record was there): A's job is not
    re-offered behind B's back, and a refused claim changes nothing."""
    await lens.claim("o:23", owner="a", lease=0.1, reoffer=b"job/23")
    await eventually(lambda: _due_has(lens, "o:23"), what="record due")
    b = await lens.claim("o:23", owner="b", lease=30)
    assert await lens.due() == []
    assert await lens.grab("o:23") is None
    with redis.Redis.from_url(lens.config.url) as r:
        fence = r.get(lens.keys.fence(lens.keys.shard("o:23")))
        with pytest.raises(AlreadyClaimed) as refused:
            await lens.claim("o:23", owner="c", lease=30)
        assert r.get(lens.keys.fence(lens.keys.shard("o:23"))) == fence
        record = r.hgetall(lens.keys.job("o:23"))
        assert (set(record), record[b"owner"], record[b"token"]) == (
            {b"token", b"owner", b"attempt", b"since"}, b"b", str(b.token).encode(),
        )  # fmt: skip
    assert refused.value.owner == "b"
    await b.complete()
    assert await lens.due() == []


async def test_live_and_completed_claims_are_not_reoffered(lens: Lens) -> None:
    # Leases far longer than the pauses: a loaded machine must not expire them.
    live = await lens.claim("o:23", owner="a", lease=2.0, reoffer=b"job/23")
    done = await lens.claim("o:24", owner="a", lease=0.3, reoffer=b"job/24")
    await done.complete()
    for _ in range(3):
        await live.extend(2.0)
        assert await lens.due() == []
        assert await lens.grab("o:23") is None
        await asyncio.sleep(0.1)
    await live.release()
    await asyncio.sleep(0.35)
    assert await lens.due() == []


async def test_hand_back_delays_the_reoffer_and_frees_the_key(lens: Lens) -> None:
    claim = await lens.claim("o:25", owner="a", lease=30, reoffer=b"job/25 attempt 1")
    await claim.hand_back(b"job/25 attempt 2", delay=0.3)
    started = time.monotonic()
    assert await lens.grab("o:25") is None
    await eventually(lambda: _due_has(lens, "o:25"), what="handed-back record due")
    assert time.monotonic() - started >= 0.25
    grab = await lens.grab("o:25")
    assert grab is not None and grab.payload == b"job/25 attempt 2"
    assert await lens.reaped(grab)
    retry = await lens.claim("o:25", owner="b", lease=30)
    await retry.complete()


async def _due_has(lens: Lens, key: str) -> bool:
    return key in await lens.due()


def test_config_checks_its_invariants() -> None:
    with pytest.raises(ValueError):
        LensConfig(url="http://nope")
    with pytest.raises(ValueError):
        LensConfig(timeout=0)
    with pytest.raises(ValueError):
        LensConfig(namespace="")


# --- batches: one round trip for many claims or completions --------------------------------


async def test_claim_many_reports_each_outcome(lens: Lens) -> None:
    held = await lens.claim("b:2", owner="other", lease=30)
    await (await lens.claim("b:3", owner="other", lease=30)).complete()
    outcomes = await lens.claim_many(
        [("b:1", b"job/1"), ("b:2", None), ("b:3", None), ("b:4", b"job/4")], "me", 30
    )
    first, conflict, done, last = outcomes
    assert isinstance(first, Claim) and isinstance(last, Claim)
    assert held.token < first.token < last.token
    assert isinstance(conflict, AlreadyClaimed) and conflict.owner == "other"
    assert isinstance(done, AlreadyDone)
    results = await lens.complete_many([first, last])
    assert results == [None, None]
    assert await lens.done_token("b:4") == last.token
    # A stale claim in a batch is reported, not raised; the rest complete.
    await held.release()
    again = await lens.claim("b:2", owner="third", lease=30)
    stale, fresh = await lens.complete_many([held, again])
    assert isinstance(stale, ClaimLost) and fresh is None


async def test_batches_reload_scripts_after_script_flush(
    lens: Lens, redis_server: RedisServer
) -> None:
    with redis.Redis(port=redis_server.port) as r:
        r.script_flush()
    outcomes = await lens.claim_many([(f"f:{i}", None) for i in range(5)], "me", 30)
    claims = [c for c in outcomes if isinstance(c, Claim)]
    assert len(claims) == 5
    with redis.Redis(port=redis_server.port) as r:
        r.script_flush()
    assert await lens.complete_many(claims) == [None] * 5


async def test_a_batch_fails_whole_when_redis_is_down(private_redis: RedisServer) -> None:
    async with Lens.from_url(private_redis.url, timeout=0.5, connect_timeout=0.5) as lens:
        claims = await lens.claim_many([("d:1", None)], "me", 30)
        await private_redis.astop()
        with pytest.raises(LensUnavailable):
            await lens.claim_many([("d:2", None), ("d:3", None)], "me", 30)
        with pytest.raises(LensUnavailable):
            await lens.complete_many(claims)  # type: ignore[arg-type]


async def test_a_full_redis_is_unavailable_not_a_bug(private_redis: RedisServer) -> None:
    """maxmemory reached with noeviction: Redis answers OOM; the Lens says
    LensUnavailable (retriable), so a worker fails closed and puts jobs back."""
    with redis.Redis(port=private_redis.port) as admin:
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", "1")
    async with Lens.from_url(private_redis.url) as lens:
        with pytest.raises(LensUnavailable) as full:
            await lens.claim("o:full", owner="worker-a", lease=30)
        assert full.value.retriable


async def cancellation_lost(call: asyncio.Task[object], turns: int) -> bool:
    """Cancel ``call`` after ``turns`` turns of the loop: whether it then
    ended some other way than cancelled (a call already done counts as kept)."""
    for _ in range(turns):
        await asyncio.sleep(0)
    if not call.cancel():
        return False
    await asyncio.wait([call], timeout=5)
    return not call.cancelled()


async def test_a_lens_call_cancelled_at_any_step_ends_cancelled(lens: Lens) -> None:
    """A cancellation that lands in any turn of the loop of a Lens call ends
    it. redis-py sends each command under ``asyncio.wait_for``, which on
    Python 3.11 drops a cancellation landing as the send finishes; a worker's
    reaper then ran on for ever after its worker was cancelled."""
    await lens.ping()
    lost = []
    for _ in range(2):  # the second sweep starts from reconnected connections
        for turns in range(60):
            call = asyncio.create_task(lens.ping())
            if await cancellation_lost(call, turns):
                lost.append(turns)
    assert lost == [], f"cancellations lost at turns {lost}"
