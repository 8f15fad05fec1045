"""The effect sink the demo and the chaos runs use: fenced and idempotent by claim key."""

from __future__ import annotations

import pytest

from forum.deploy.sink import EffectSink, StaleToken


async def test_sink_fences_stale_tokens_and_tells_reruns_from_duplicates(redis_url: str) -> None:
    async with EffectSink.from_url(redis_url) as sink:
        assert await sink.apply("job/1", "a:1", 10) is True
        # t1: the holder died before completing; the job is claimed again (same key).
        assert await sink.apply("job/1", "a:1", 20) is False
        # t2: the first holder wakes up late with its old token: refused.
        with pytest.raises(StaleToken):
            await sink.apply("job/1", "a:1", 10)
        # A second claim key for the same job: applied, and counted twice.
        assert await sink.apply("job/1", "b:7", 30) is True
        await sink.delivered("job/1")
        assert (await sink.effects())["job/1"] == 2
        assert (await sink.reruns())["job/1"] == 1
        assert (await sink.deliveries())["job/1"] == 1
