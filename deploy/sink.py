"""The demo's (and the chaos tests') irreversible effect: a Redis store that
refuses stale fencing tokens and counts every effect it lets through.

Per job name it keeps the highest fencing token that wrote, and refuses a
lower one; an effect with a new, higher token is applied and counted. Two
applied effects for one job are a duplicate effect: the history checker
fails the run. A delivery counter beside it records how often a handler
started on the job (duplicates there are allowed).

Keys (all under ``namespace``; the namespace is a Redis hash tag, so a
cluster-mode Redis keeps them in one slot):

``{ns}:token``       hash job -> highest token applied
``{ns}:effects``     hash job -> effects applied
``{ns}:deliveries``  hash job -> handler starts
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable
from types import TracebackType
from typing import Self, cast

from redis.asyncio import Redis

#: KEYS[1] token hash, KEYS[2] effects hash; ARGV[1] job, ARGV[2] fencing token.
#: Returns 1 if applied, 0 if the same token applied it already (a repeat by
#: the same holder), -1 if refused because a higher token applied first.
_APPLY = """
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local token = tonumber(ARGV[2])
if token < held then return -1 end
if token == held then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
return 1
"""


class StaleToken(Exception):
    """The effect was refused: a newer holder of the job applied it first."""


class EffectSink:
    """Counted, fenced effects in Redis. ``async with EffectSink.from_url(url)``."""

    def __init__(self, client: Redis, namespace: str = "sink") -> None:
        self._client = client
        self._keys = [f"{{{namespace}}}:token", f"{{{namespace}}}:effects"]
        self._deliveries = f"{{{namespace}}}:deliveries"
        self._apply = client.register_script(_APPLY)

    @classmethod
    def from_url(cls, url: str, namespace: str = "sink") -> EffectSink:
        return cls(Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5), namespace)

    async def delivered(self, job: str) -> None:
        # cast: redis-py types its commands as sync-or-async; this client is async.
        await cast(Awaitable[int], self._client.hincrby(self._deliveries, job, 1))

    async def apply(self, job: str, token: int) -> bool:
        """Apply the job's effect under ``token``: ``True`` if applied now,
        ``False`` if this token applied it before; ``StaleToken`` if refused."""
        result = await self._apply(keys=self._keys, args=[job, token])
        if result == -1:
            raise StaleToken(f"{job}: token {token} is older than the one that applied it")
        return bool(result == 1)

    async def effects(self) -> Counter[str]:
        return await self._counts(self._keys[1])

    async def deliveries(self) -> Counter[str]:
        return await self._counts(self._deliveries)

    async def _counts(self, key: str) -> Counter[str]:
        raw = await cast(Awaitable[dict[bytes, bytes]], self._client.hgetall(key))
        return Counter({k.decode(): int(v) for k, v in raw.items()})

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
