"""``Lens.durability()`` on real redis-servers: the settings the guarantees
rest on, one warning line per shortfall, and a Redis that refuses CONFIG."""

from __future__ import annotations

from pathlib import Path

import redis

from forum.coordinator import Lens
from tests.fixtures.redis_server import RedisServer


async def test_a_redis_set_up_as_the_lens_needs_has_nothing_to_warn_of(redis_url: str) -> None:
    async with Lens.from_url(redis_url) as lens:
        assert await lens.durability() == []


async def test_each_setting_that_falls_short_is_one_line(volatile_redis: RedisServer) -> None:
    with redis.Redis.from_url(volatile_redis.url) as r:
        r.config_set("appendfsync", "no")
        r.config_set("maxmemory-policy", "allkeys-lru")
    async with Lens.from_url(volatile_redis.url) as lens:
        warnings = await lens.durability()
    assert len(warnings) == 3
    for setting, value in [("appendonly", "no"), ("appendfsync", "no"),
                           ("maxmemory-policy", "allkeys-lru")]:  # fmt: skip
        [line] = [w for w in warnings if f"has {setting} {value!r}" in w]
        assert "\n" not in line and volatile_redis.url in line


async def test_a_redis_that_refuses_config_is_one_warning_saying_so(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", extra=("--rename-command", "CONFIG", ""))
    server.start()
    try:
        async with Lens.from_url(server.url) as lens:
            [warning] = await lens.durability()
            assert "refuses CONFIG GET" in warning and "appendonly yes" in warning
            await lens.claim("k", owner="w", lease=5)  # the Lens itself works
    finally:
        server.kill()
