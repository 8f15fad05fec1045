"""The example handlers' stores: a stale (lower) fencing token is refused.

(How the stores meet a holder whose claim expired: test_fenced_stores.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from examples.handlers.fenced_redis import FencedRedisStore, StaleToken
from examples.handlers.fenced_sqlite import FencedSqliteStore
from examples.handlers.idempotency_key import Ledger
from forum.coordinator import Lens


async def test_sqlite_store_refuses_a_lower_token(tmp_path: Path) -> None:
    """t0: holder with token 5 writes. t1: a newer holder, token 9, writes.
    t2: the token-5 holder, late, writes again: refused, the newer value stays."""
    async with FencedSqliteStore(tmp_path / "results.db") as store:
        await store.put("a:1", 5, b"old")
        await store.put("a:1", 9, b"new")
        with pytest.raises(StaleToken):
            await store.put("a:1", 5, b"late")
        await store.put("a:1", 9, b"new")  # the same holder repeating itself
        assert await store.get("a:1") == (9, b"new")
        assert await store.get("a:2") is None
        assert await store.applied() == [("a:1", 5), ("a:1", 9)]


async def test_redis_store_refuses_a_lower_token_under_a_forged_claim(
    redis_url: str, lens: Lens, fenced: FencedRedisStore
) -> None:
    """The Redis store's second line: a claim key holding a lower token than
    the one stored (written by hand, restored from a backup; the Lens never
    grants one) still cannot overwrite the newer result."""
    claim_key = lens.keys.claim("a:1")
    async with Redis.from_url(redis_url) as client:
        await client.set(claim_key, 9)
        await fenced.put("a:1", 9, b"new")
        await client.set(claim_key, 5)
        with pytest.raises(StaleToken, match="a higher token wrote first"):
            await fenced.put("a:1", 5, b"late")
    assert await fenced.get("a:1") == (9, b"new")
    assert await fenced.applied() == [("a:1", 9)]


async def test_ledger_applies_each_idempotency_key_once(tmp_path: Path) -> None:
    async with Ledger(tmp_path / "ledger.db") as ledger:
        assert await ledger.charge("a:1", b"10")
        assert not await ledger.charge("a:1", b"10")
        assert await ledger.charge("a:2", b"20")
        assert await ledger.charges() == {"a:1": b"10", "a:2": b"20"}
        assert await ledger.requests() == 3
