"""A result store that refuses a stale writer: fencing tokens checked in Lua.

Use it when a job's effect *overwrites state* (a row, a document, a file): a
worker that lost its claim (a long GC pause, a partition) and wakes up late
must not clobber what the newer holder wrote. Every write carries the job's
fencing token; the store keeps the highest token it has seen per job and
refuses a lower one, atomically::

    t0  worker A claims job k, token 41; stalls before writing
    t1  A's lease expires; the job is re-offered; worker B claims k, token 57
    t2  B writes k's result with token 57                     -> stored
    t3  A wakes up, writes with token 41                      -> StaleToken

``job.verify()`` right before the write already refuses A at t3 in the common
case; the token check closes the window between ``verify()`` and the write.

Writing the same token again is accepted (the same holder repeating itself).
Each write that stores a new token is appended to an audit list, so a test
(or an operator) can count how many times each job's effect was applied.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from redis.asyncio import Redis

from coordinator import Handler, Job
from node.resource import AsyncResource

#: KEYS[1] <ns>:result:<job key> (hash: token, value)
#: KEYS[2] <ns>:applied (list of "<job key> <token>", one per new token stored)
#: ARGV[1] the writer's fencing token; ARGV[2] the value; ARGV[3] the job key
#: Returns 1 stored (or repeated by the same token), 0 refused: a higher token wrote first.
_STORE_IF_NOT_STALE = """
local held = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if token < held then
  return 0
end
if token > held then
  redis.call('RPUSH', KEYS[2], ARGV[3] .. ' ' .. ARGV[1])
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1
"""


class StaleToken(Exception):
    """A write with a token lower than one already stored for the job."""


class FencedRedisStore(AsyncResource):
    """Results by job key, each kept with the fencing token that wrote it."""

    def __init__(self, client: Redis, namespace: str = "example:fenced") -> None:
        self._client = client
        self._namespace = namespace
        self._store = client.register_script(_STORE_IF_NOT_STALE)

    @classmethod
    def from_url(cls, url: str, namespace: str = "example:fenced") -> FencedRedisStore:
        return cls(Redis.from_url(url), namespace)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def put(self, key: str, token: int, value: bytes) -> None:
        """Store ``value`` for ``key`` unless a higher token wrote first (:class:`StaleToken`)."""
        keys = [f"{self._namespace}:result:{key}", f"{self._namespace}:applied"]
        if not await self._store(keys=keys, args=[token, value, key]):
            raise StaleToken(f"{key}: token {token} is older than the stored one")

    async def get(self, key: str) -> tuple[int, bytes] | None:
        """The stored ``(token, value)`` for ``key``, or ``None``."""
        key_name = f"{self._namespace}:result:{key}"
        token, value = await self._client.hmget(key_name, ["token", "value"])
        if token is None or not isinstance(value, bytes):
            return None
        return int(token), value

    async def applied(self) -> list[tuple[str, int]]:
        """Every new ``(key, token)`` stored, in order."""
        rows = await self._client.lrange(f"{self._namespace}:applied", 0, -1)
        texts = (row.decode() if isinstance(row, bytes) else row for row in rows)
        pairs = (text.rsplit(" ", 1) for text in texts)
        return [(key, int(token)) for key, token in pairs]


def fenced_handler(store: FencedRedisStore) -> Handler:
    """A handler that computes a result and stores it under the job's token."""

    async def handle(job: Job) -> None:
        result = job.payload.upper()  # the job's real work goes here
        await job.verify()  # the claim still holds, with margin to spare ...
        await store.put(job.key, job.token, result)  # ... and a late writer is refused

    return handle


@contextlib.asynccontextmanager
async def open_handler() -> AsyncIterator[Handler]:
    """For the CLI: the store at ``$FORUM_EXAMPLE_REDIS_URL``."""
    async with FencedRedisStore.from_url(os.environ["FORUM_EXAMPLE_REDIS_URL"]) as store:
        yield fenced_handler(store)
