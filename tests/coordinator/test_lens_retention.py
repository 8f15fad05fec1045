"""What a completed job leaves in the Lens's Redis, and for how long: the
done marker follows the cluster's ``forget_after`` (not a fixed week), the
history is kept apart and shorter (or not at all), and each completed job
costs a counted number of keys of a known shape, whatever the traffic before.
(The behaviour shared with the in-memory authority is in
test_authority_contract.py.)"""

from __future__ import annotations

import pytest
import redis

from forum.coordinator import Lens, LensConfig
from forum.coordinator.keys import DONE_MARGIN, HISTORY_TTL
from forum.node.config.node import FORGET_AFTER
from tests.coordinator.harness import eventually

#: Jobs completed per test: enough that a per-job key shows as N of them.
JOBS = 200


async def _complete(lens: Lens, keys: list[str]) -> None:
    claims = await lens.claim_many([(key, None) for key in keys], owner="w", lease=30)
    outcomes = await lens.complete_many([c for c in claims if not isinstance(c, Exception)])
    assert outcomes == [None] * len(keys)


async def _jobs_done(redis_url: str, history_ttl: float) -> dict[str, list[bytes]]:
    """Complete JOBS jobs on a 4-shard namespace; its keys then, by role
    (``epoch``, ``fence``, ``done``, ...)."""
    async with Lens.from_url(redis_url, shards=4, history_ttl=history_ttl) as lens:
        await _complete(lens, [f"n1-4f2a:{i}" for i in range(JOBS)])
    found: dict[str, list[bytes]] = {}
    with redis.Redis.from_url(redis_url) as r:
        for name in r.scan_iter(match=f"{{{lens.keys.namespace}:*", count=1000):
            role = name.split(b"}:", 1)[1].split(b":", 1)[0].decode()
            found.setdefault(role, []).append(name)
    return found


@pytest.mark.parametrize("forget_after", [None, 7200.0, 30 * 86400.0])
async def test_the_done_marker_lives_forget_after_and_the_margin(
    redis_url: str, forget_after: float | None
) -> None:
    """By default (``None``) the nodes' default ``forget_after``, a day: not a week."""
    options = {} if forget_after is None else {"forget_after": forget_after}
    async with Lens.from_url(redis_url, **options) as lens:
        await _complete(lens, ["k"])
        with redis.Redis.from_url(redis_url) as r:
            pttl = r.pttl(lens.keys.done("k")) / 1000
    expected = (forget_after or FORGET_AFTER) + DONE_MARGIN
    assert expected - 60 < pttl <= expected
    assert lens.config.retention == expected


async def test_the_history_lives_its_own_shorter_ttl(redis_url: str) -> None:
    async with Lens.from_url(redis_url) as lens:
        await _complete(lens, ["k"])
        with redis.Redis.from_url(redis_url) as r:
            pttl = r.pttl(lens.keys.history("k")) / 1000
    assert HISTORY_TTL - 60 < pttl <= HISTORY_TTL


def test_a_done_ttl_below_forget_after_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be shorter than forget_after"):
        LensConfig(forget_after=3600, done_ttl=600)
    with pytest.raises(ValueError, match="history_ttl must not be negative"):
        LensConfig(history_ttl=-1)
    assert LensConfig(forget_after=3600, done_ttl=3600).retention == 3600


async def test_a_completed_job_leaves_one_integer_key_without_history(redis_url: str) -> None:
    """With ``history_ttl=0`` each completed job leaves exactly one key, its
    done marker, holding the token as an integer (no allocation of its own);
    nothing else grows with the jobs: no history, in-flight record, claim."""
    kinds = await _jobs_done(redis_url, history_ttl=0)
    assert {role: len(names) for role, names in kinds.items()} == {
        "epoch": 4, "fence": 4, "done": JOBS,
    }  # fmt: skip
    with redis.Redis.from_url(redis_url) as r:
        assert {r.object("encoding", name) for name in kinds["done"]} == {b"int"}


async def test_with_history_a_job_leaves_two_lines_that_expire_first(redis_url: str) -> None:
    """With a history each job adds one list of two lines (its claim and its
    completion), which expires ``history_ttl`` after: then one key is left."""
    kinds = await _jobs_done(redis_url, history_ttl=3.0)
    assert len(kinds["done"]) == len(kinds["history"]) == JOBS
    with redis.Redis.from_url(redis_url) as r:
        assert {r.llen(name) for name in kinds["history"]} == {2}
        histories = kinds["history"]
        await eventually(lambda: r.exists(*histories) == 0, what="the histories expired")
        assert r.exists(*kinds["done"]) == JOBS
