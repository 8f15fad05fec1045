"""A Lens that cannot take writes: the check that finds it, the reason it
gives, and the worker's back-off (forum.coordinator.availability).

Real servers throughout: a ``redis-server`` filled past ``maxmemory`` with
``noeviction`` (the recommended policy), a replica, a stopped server, one
that wants a password. The worker processes and cluster outages are in
test_worker_backoff.py.
"""

from __future__ import annotations

import logging
import random

import pytest
import redis

from forum.cli_args import UsageError
from forum.cli_worker import check_lens
from forum.coordinator import Lens, LensUnavailable
from forum.coordinator.availability import Availability
from forum.coordinator.errors import UNAVAILABLE
from tests.coordinator.full_redis import fill, make_room
from tests.fixtures.redis_server import RedisServer


async def test_the_check_finds_a_full_redis_that_answers_ping(private_redis: RedisServer) -> None:
    """PING passes on a full Redis; the Lens's check does not, and says why.
    Once there is room again the check passes and a claim is granted."""
    async with Lens.from_url(private_redis.url) as lens:
        await lens.ping()
        await lens.claim("before", owner="w", lease=30)
        fill(private_redis.port)
        with redis.Redis(port=private_redis.port) as r:
            assert r.ping()
        with pytest.raises(LensUnavailable, match=r"\(full\): OOM") as raised:
            await lens.ping()
        assert raised.value.reason == "full"
        with pytest.raises(LensUnavailable) as refused:
            await lens.claim("during", owner="w", lease=30)
        assert refused.value.reason == "full"
        make_room(private_redis.port)
        await lens.ping()
        await lens.claim("after", owner="w", lease=30)


async def test_the_check_makes_no_key(private_redis: RedisServer) -> None:
    """The check's write changes nothing: no key where there was none."""
    async with Lens.from_url(private_redis.url, namespace="probe") as lens:
        with redis.Redis(port=private_redis.port) as r:
            r.flushall()
            await lens.ping()
            assert r.dbsize() == 0


async def test_a_replica_is_read_only(redis_replicated: tuple[RedisServer, RedisServer]) -> None:
    primary, replica = redis_replicated
    async with Lens.from_url(primary.url) as lens:
        await lens.claim("k", owner="w", lease=30)  # the markers exist on both
    async with Lens.from_url(replica.url) as lens:
        with pytest.raises(LensUnavailable) as raised:
            await lens.ping()
        assert raised.value.reason == "read-only"


async def test_a_stopped_redis_is_unreachable(private_redis: RedisServer) -> None:
    private_redis.stop()
    async with Lens.from_url(private_redis.url, timeout=0.5, connect_timeout=0.5) as lens:
        with pytest.raises(LensUnavailable) as raised:
            await lens.ping()
        assert raised.value.reason == "unreachable"


async def test_a_redis_that_refuses_the_credentials_is_refused(private_redis: RedisServer) -> None:
    with redis.Redis(port=private_redis.port) as r:
        r.config_set("requirepass", "sesame")
    try:
        async with Lens.from_url(private_redis.url) as lens:
            with pytest.raises(LensUnavailable) as raised:
                await lens.ping()
            assert raised.value.reason == "refused"
    finally:
        with redis.Redis(port=private_redis.port, password="sesame") as r:
            r.config_set("requirepass", "")


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_one_line_per_state_change_and_a_rate_limited_reminder(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """t0: full (one warning). t0..t0+59: 1,000 more failures (no line).
    t0+60: a reminder. t0+61: read-only (a new reason: one line). Then a
    granted claim: one info line; a new outage is a new warning."""
    clock = _Clock()
    availability = Availability("w", random.Random(1), reminder=60.0, clock=clock)
    full = LensUnavailable("OOM command not allowed", "full")
    with caplog.at_level(logging.INFO, logger="forum.coordinator.worker"):
        availability.failed(full, put_back=8)
        for _ in range(1000):
            clock.now += 0.05
            availability.failed(full)
        assert len(_warnings(caplog)) == 1
        assert "unavailable (full)" in _warnings(caplog)[0]
        assert "8 reserved jobs released" in _warnings(caplog)[0]
        clock.now = 160.0
        availability.failed(full)
        assert len(_warnings(caplog)) == 2 and "still unavailable (full)" in _warnings(caplog)[1]
        clock.now = 161.0
        availability.failed(LensUnavailable("READONLY", "read-only"))
        assert len(_warnings(caplog)) == 3 and "(read-only)" in _warnings(caplog)[2]
        assert availability.state().reason == "read-only"
        availability.granted()
        assert availability.state().available
        assert any("available again" in r.getMessage() for r in caplog.records)
        availability.failed(full)
        assert len(_warnings(caplog)) == 4


def test_the_wait_grows_until_a_claim_is_granted_not_when_a_check_passes() -> None:
    """A Redis at the edge of full passes the check and refuses the claim:
    the waits keep growing to the cap (jittered: never below half of it)."""
    availability = Availability("w", random.Random(7), clock=_Clock())
    full = LensUnavailable("OOM", "full")
    waits = []
    for _ in range(12):
        availability.failed(full)
        waits.append(availability.next_wait())
        availability.checked()
        assert availability.may_try() and availability.state().available
    assert waits[0] <= 0.05 and 1.0 <= waits[-1] <= 2.0
    availability.granted()
    availability.failed(full)
    assert availability.next_wait() <= 0.05
    assert not availability.may_try()


def test_every_reason_is_a_label() -> None:
    assert set(UNAVAILABLE) >= {"full", "read-only", "unreachable", "master down", "refused"}


async def test_a_worker_starts_on_a_full_redis_and_refuses_a_wrong_password(
    private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``forum worker``'s start: a full Redis is an outage to wait out (even
    for an app's worker, which refuses a Redis that does not answer); a
    password Redis refuses is a mistake, said in one line."""
    fill(private_redis.port)
    async with Lens.from_url(private_redis.url) as lens:
        with caplog.at_level(logging.WARNING, logger="coordinator.cli"):
            await check_lens(lens, private_redis.url, required=True)
        assert any("unavailable (full" in r.getMessage() for r in caplog.records)
    make_room(private_redis.port)
    with redis.Redis(port=private_redis.port) as r:
        r.config_set("requirepass", "sesame")
    try:
        url = f"redis://:wrong@127.0.0.1:{private_redis.port}/0"
        async with Lens.from_url(url) as lens:
            with pytest.raises(UsageError, match=r"redis://:\*\*\*@.*(invalid|WRONGPASS)"):
                await check_lens(lens, url, required=False)
    finally:
        with redis.Redis(port=private_redis.port, password="sesame") as r:
            r.config_set("requirepass", "")
