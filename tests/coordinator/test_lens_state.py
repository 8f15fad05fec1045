"""A Redis that forgets: fencing tokens never go backwards, and the Lens says
it lost its state instead of carrying on as if nothing happened.

Each test makes Redis forget in one of the ways an operator meets: a
``FLUSHALL``, or a restart of a Redis that runs without persistence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from examples.handlers.fenced_sqlite import FencedSqliteStore, fenced_handler
from forum.coordinator import (
    Backoff,
    Claim,
    ClaimLost,
    Lens,
    LensStateLost,
    LensUnavailable,
    Worker,
)
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.coordinator.harness import eventually, running
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
    # One shard, so that both keys share one fence.
    async with Lens.from_url(redis_url, shards=1) as lens:
        with redis.Redis.from_url(redis_url) as r:
            r.set(lens.keys.fence(0), tokens)
        first = await lens.claim("big:1", owner="w", lease=60)
        second = await lens.claim("big:2", owner="w", lease=60)
        assert (first.token, second.token) == (tokens + 1, tokens + 2)
        await first.verify()
        await first.extend()
        await first.complete()
        assert await lens.done_token("big:1") == tokens + 1
        await second.hand_back(b"job/again", delay=60)


async def test_a_rerun_after_a_flushall_is_a_newer_holder_to_a_fenced_store(
    redis_server: RedisServer, lens: Lens, tmp_path: Path
) -> None:
    """t0: job k runs with token T, its effect stored with T, completed.
    t1: FLUSHALL: k's done marker is gone. t2: k is re-delivered and runs again.
    With a reissued token the store could not tell the two holders apart (the
    second effect looked like a repeat by the first); now the rerun is a newer
    holder: recorded as a second application, never mistaken for the first."""
    async with FencedSqliteStore(tmp_path / "results.sqlite") as store:
        first = await lens.claim("k", owner="w", lease=60)
        await store.put("k", first.token, b"one")
        await first.complete()
        redis_server.flushall()
        with pytest.raises(LensStateLost):
            await lens.claim("k", owner="w", lease=60)
        rerun = await lens.claim("k", owner="w", lease=60)
        await store.put("k", rerun.token, b"two")
        assert await store.applied() == [("k", first.token), ("k", rerun.token)]
        assert rerun.token > first.token


# --- detecting a Redis that lost the Lens's state -----------------------------------------


def _loss_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.ERROR and "lost the Lens's state" in record.getMessage()
    ]


async def test_a_flushall_mid_use_raises_state_lost_once_then_the_lens_works(
    redis_server: RedisServer, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """t0: k:1 held, k:2 completed. t1: FLUSHALL. t2: the next claim raises
    LensStateLost, logged and counted. t3: the Lens works, tokens above t0's."""
    async with Lens.from_url(redis_url) as lens:
        held = await lens.claim("k:1", owner="w", lease=60)
        completed = await lens.claim("k:2", owner="w", lease=60)
        await completed.complete()
        redis_server.flushall()

        with (
            caplog.at_level(logging.ERROR, logger="forum.coordinator.lens"),
            pytest.raises(LensStateLost) as lost,
        ):
            await lens.claim("k:3", owner="w", lease=60)
        assert lost.value.found is None and lost.value.retriable
        assert lens.state_losses == 1
        [message] = _loss_logs(caplog)
        assert redis_url in message and lost.value.lost in message and "is gone" in message
        assert str(max(held.token, completed.token)) in message  # the clock must pass it

        after = await lens.claim("k:3", owner="w", lease=60)
        assert after.token > max(held.token, completed.token)
        with pytest.raises(ClaimLost):
            await held.complete()  # its claim went with the old state
        # What stays open: the done marker went too, so the job can run again.
        again = await lens.claim("k:2", owner="w", lease=60)
        assert again.token > completed.token
        assert lens.state_losses == 1


async def test_a_complete_after_a_flushall_raises_state_lost(
    redis_server: RedisServer, lens: Lens
) -> None:
    claim = await lens.claim("k:1", owner="w", lease=60)
    redis_server.flushall()
    with pytest.raises(LensStateLost):
        await claim.complete()
    assert lens.state_losses == 1
    with pytest.raises(ClaimLost):
        await claim.complete()  # the Lens works again; this claim is gone


_Operation = Callable[[Lens, Claim], Awaitable[Any]]
_OPERATIONS: dict[str, _Operation] = {
    "claim": lambda lens, _: lens.claim("k:2", owner="w", lease=60),
    "claim_many": lambda lens, _: lens.claim_many([("k:2", b"job")], owner="w", lease=60),
    "verify": lambda _, claim: claim.verify(),
    "extend": lambda _, claim: claim.extend(),
    "extend_many": lambda lens, claim: lens.extend_many([claim]),
    "complete": lambda _, claim: claim.complete(),
    "complete_many": lambda lens, claim: lens.complete_many([claim]),
    "release": lambda _, claim: claim.release(),
    "hand_back": lambda _, claim: claim.hand_back(b"job", delay=1),
    "due": lambda lens, _: lens.due(),
    "grab": lambda lens, claim: lens.grab(claim.key),
}


@pytest.mark.parametrize("operation", sorted(_OPERATIONS))
async def test_every_stateful_operation_refuses_a_lost_state(
    redis_server: RedisServer, lens: Lens, operation: str
) -> None:
    claim = await lens.claim("k:1", owner="w", lease=60, reoffer=b"job")
    redis_server.flushall()
    with pytest.raises(LensStateLost):
        await _OPERATIONS[operation](lens, claim)
    with redis.Redis(port=redis_server.port) as r:
        assert r.dbsize() == 0  # refused before it wrote anything


async def test_calls_in_flight_at_a_loss_all_raise_but_count_it_once(
    redis_server: RedisServer, lens: Lens, caplog: pytest.LogCaptureFixture
) -> None:
    await lens.claim("k:0", owner="w", lease=60)
    redis_server.flushall()
    with caplog.at_level(logging.ERROR, logger="forum.coordinator.lens"):
        outcomes = await asyncio.gather(
            *(lens.claim(f"k:{i}", owner="w", lease=60) for i in range(1, 11)),
            return_exceptions=True,
        )
    assert all(isinstance(outcome, LensStateLost) for outcome in outcomes), outcomes
    assert lens.state_losses == 1
    assert len(_loss_logs(caplog)) == 1


async def test_a_marker_another_lens_recreated_is_a_loss_too(
    redis_server: RedisServer, redis_url: str
) -> None:
    """t0: A and B share epoch E1. t1: FLUSHALL. t2: B meets the loss first and
    starts E2. t3: A's next call finds E2, not E1: a loss for A as well."""
    async with Lens.from_url(redis_url) as a, Lens.from_url(redis_url) as b:
        before = [(await lens.claim(f"{name}:1", owner=name, lease=60)).token
                  for lens, name in ((a, "a"), (b, "b"))]  # fmt: skip
        redis_server.flushall()
        with pytest.raises(LensStateLost):
            await b.claim("b:2", owner="b", lease=60)
        await b.claim("b:2", owner="b", lease=60)
        with redis.Redis(port=redis_server.port) as r:
            recreated = r.get(a.keys.epoch(a.keys.shard("a:2")))
        assert recreated is not None

        with pytest.raises(LensStateLost) as lost:
            await a.claim("a:2", owner="a", lease=60)
        assert lost.value.found == recreated.decode()
        assert (await a.claim("a:2", owner="a", lease=60)).token > max(before)
        assert (a.state_losses, b.state_losses) == (1, 1)


async def test_a_restart_without_persistence_raises_state_lost(
    volatile_redis: RedisServer,
) -> None:
    async with Lens.from_url(volatile_redis.url) as lens:
        before = await lens.claim("k:1", owner="w", lease=60)
        await volatile_redis.arestart()
        with pytest.raises(LensStateLost):
            await lens.claim("k:1", owner="w", lease=60)
        after = await lens.claim("k:1", owner="w", lease=60)  # Redis forgot k:1 was held
        assert after.token > before.token and lens.state_losses == 1


async def test_lenses_on_one_redis_share_one_marker_and_count_no_loss(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="forum.coordinator.lens"):
        async with Lens.from_url(redis_url) as a, Lens.from_url(redis_url) as b:
            await a.claim("k:1", owner="a", lease=60)
            await b.claim("k:2", owner="b", lease=60)
            await (await a.claim("k:3", owner="a", lease=60)).complete()
            assert (a.state_losses, b.state_losses) == (0, 0)
            with redis.Redis.from_url(redis_url) as r:
                marker = r.get(a.keys.epoch(0))
            assert marker is not None and r.ttl(a.keys.epoch(0)) == -1
    # The one Lens that found no marker says so, once, and calmly: a first
    # start on an empty Redis is normal (it used to greet a new user with a WARNING).
    started = [record for record in caplog.records if "started epoch" in record.getMessage()]
    assert len(started) == 1 and marker.decode() in started[0].getMessage()
    assert started[0].levelno == logging.INFO and "first start" in started[0].getMessage()


async def test_a_lens_that_lost_its_state_starts_the_next_epoch_with_a_warning(
    redis_server: RedisServer, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After a loss the shards are new again, as on a first start: but this
    Lens knows they were not, and says so louder."""
    async with Lens.from_url(redis_url) as lens:
        await lens.claim("k:1", owner="w", lease=60)
        redis_server.flushall()
        with caplog.at_level(logging.INFO, logger="forum.coordinator.lens"):
            with pytest.raises(LensStateLost):
                await lens.claim("k:2", owner="w", lease=60)
            await lens.claim("k:2", owner="w", lease=60)
    started = [record for record in caplog.records if "started epoch" in record.getMessage()]
    assert [record.levelno for record in started] == [logging.WARNING]
    assert "lost the Lens's keys" in started[0].getMessage()


async def test_some_shards_kept_and_others_not_is_a_warning(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with Lens.from_url(redis_url, shards=2) as lens:
        await lens.claim("k:1", owner="w", lease=60)
        with redis.Redis.from_url(redis_url) as r:
            r.delete(lens.keys.epoch(1))
    with caplog.at_level(logging.INFO, logger="forum.coordinator.lens"):
        async with Lens.from_url(redis_url, shards=2) as again:
            await again.claim("k:2", owner="w", lease=60)
    started = [record for record in caplog.records if "started epoch" in record.getMessage()]
    assert [record.levelno for record in started] == [logging.WARNING]
    assert "for 1 of 2 shards" in started[0].getMessage()


async def test_a_redis_url_password_stays_out_of_the_error(volatile_redis: RedisServer) -> None:
    with redis.Redis(port=volatile_redis.port) as r:
        r.config_set("requirepass", "s3cret")
    url = f"redis://:s3cret@127.0.0.1:{volatile_redis.port}/0"
    async with Lens.from_url(url) as lens:
        await lens.claim("k:1", owner="w", lease=60)
        with redis.Redis(port=volatile_redis.port, password="s3cret") as r:
            r.flushall()
        with pytest.raises(LensStateLost) as lost:
            await lens.claim("k:1", owner="w", lease=60)
    assert "s3cret" not in str(lost.value)
    assert f"127.0.0.1:{volatile_redis.port}" in str(lost.value)


async def test_a_worker_carries_on_after_redis_forgets(
    redis_server: RedisServer, forum: Forum, lens: Lens, tmp_path: Path
) -> None:
    """The Lens raises once and re-establishes its epoch: a worker that fails
    closed on it keeps running jobs, each effect applied once, tokens rising."""
    async with FencedSqliteStore(tmp_path / "results.sqlite") as store:
        work = Worker(
            forum, lens, Pattern(b"job/"), fenced_handler(store), concurrency=4, lease=2.0,
            take_wait=0.2, reaper_interval=0.05, backoff=Backoff(base=0.02, cap=0.1),
        )  # fmt: skip
        async with running(work):
            await forum.write_many([f"job/a{i}".encode() for i in range(20)])
            await eventually(lambda: work.stats().done == 20, what="the first jobs done")
            before = max(token for _, token in await store.applied())
            redis_server.flushall()
            await forum.write_many([f"job/b{i}".encode() for i in range(20)])
            await eventually(lambda: work.stats().done == 40, what="the jobs after the loss done")
        applied = await store.applied()
        assert len(applied) == len({key for key, _ in applied}) == 40
        assert min(token for _, token in applied[20:]) > before
        assert lens.state_losses == 1
