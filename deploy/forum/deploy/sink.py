"""The demo's (and the chaos tests') irreversible effect: a Redis store that
refuses stale fencing tokens and counts every effect it lets through.

It is an idempotent, fenced store, the kind of effect docs/coordination.md
asks handlers for. Per job name it keeps the claim key and the highest
fencing token that applied it:

* a lower token than the one held is refused (a stale holder, woken late);
* the same claim key again with a higher token is a *rerun*: the holder that
  applied the effect died before completing, its lease ran out, and the job
  was claimed again. The effect is already there: counted as a rerun, not
  applied again;
* a different claim key is a second, separate application of the job: a
  double take the Lens did not catch. It is applied and counted, and the
  history checker fails the run on it.

A delivery counter beside it records how often a handler started on the job
(duplicates there are allowed).

Keys (all under ``namespace``; the namespace is a Redis hash tag, so a
cluster-mode Redis keeps them in one slot):

``{ns}:token``       hash job -> highest token applied
``{ns}:key``         hash job -> claim key of the last application
``{ns}:effects``     hash job -> applications (under distinct claim keys)
``{ns}:reruns``      hash job -> reruns under the same claim key
``{ns}:deliveries``  hash job -> handler starts
"""

from __future__ import annotations

from collections import Counter

from forum.coordinator.redis_url import RedisClient, RedisTarget, close
from forum.node.core.resource import AsyncResource

#: KEYS[1] token hash, KEYS[2] key hash, KEYS[3] effects hash, KEYS[4] reruns hash
#: ARGV[1] job, ARGV[2] fencing token, ARGV[3] claim key
#: Returns 1 applied, 0 already applied under this claim key (a repeat or a
#: rerun), -1 refused: a higher token applied first.
_APPLY = """
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local token = tonumber(ARGV[2])
if token < held then return -1 end
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[3] then
  if token > held then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
    redis.call('HINCRBY', KEYS[4], ARGV[1], 1)
  end
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
return 1
"""


class StaleToken(Exception):
    """The effect was refused: a newer holder of the job applied it first."""


class EffectSink(AsyncResource):
    """Counted, fenced effects in Redis. ``async with EffectSink.from_url(url)``."""

    def __init__(self, client: RedisClient, namespace: str = "sink") -> None:
        self._client = client
        self._keys = [f"{{{namespace}}}:{name}" for name in ("token", "key", "effects", "reruns")]
        self._deliveries = f"{{{namespace}}}:deliveries"
        self._apply = client.register_script(_APPLY)

    @classmethod
    def from_url(cls, url: str, namespace: str = "sink") -> EffectSink:
        """A sink in the Redis ``url`` names: any URL the Lens takes
        (forum.coordinator.redis_url: one server, Sentinel's primary, a Cluster)."""
        target = RedisTarget.from_url(url)
        return cls(target.client(socket_timeout=5, socket_connect_timeout=5), namespace)

    async def delivered(self, job: str) -> None:
        await self._client.hincrby(self._deliveries, job, 1)

    async def apply(self, job: str, key: str, token: int) -> bool:
        """Apply the job's effect under claim ``key`` and ``token``: ``True`` if
        applied now, ``False`` if this claim key applied it before (a repeat or
        a rerun); ``StaleToken`` if a higher token applied it first."""
        result = await self._apply(keys=self._keys, args=[job, token, key])
        if result == -1:
            raise StaleToken(f"{job}: token {token} is older than the one that applied it")
        return bool(result == 1)

    async def effects(self) -> Counter[str]:
        return await self._counts(self._keys[2])

    async def reruns(self) -> Counter[str]:
        return await self._counts(self._keys[3])

    async def deliveries(self) -> Counter[str]:
        return await self._counts(self._deliveries)

    async def _counts(self, key: str) -> Counter[str]:
        raw = await self._client.hgetall(key)
        # This client answers bytes (no decode_responses); _text also takes str.
        return Counter({_text(k): int(v) for k, v in raw.items()})

    async def aclose(self) -> None:
        await close(self._client)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
