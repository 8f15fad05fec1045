"""A result store that refuses a stale writer, beside the Lens, in one Lua step.

Use it when a job's effect *overwrites state* (a row, a document, a file): a
worker that lost its claim (a long GC pause, a SIGSTOP, a partition) and
wakes up late must not clobber the job's result. The store lives in the
Lens's Redis database, so its write script can read the Lens's claim key for
the job (``{<lens ns>:<shard>}:claim:<key>``, which holds the live claim's
fencing token and expires with the lease) and writes only if it holds exactly the
writer's token. So a stale holder is refused whether or not a newer holder
has written yet::

    t0  worker A claims job k, token 41; stalls after verify(), before its write
    t1  A's lease expires: the claim key is gone
    t2  A wakes up, writes with token 41                      -> StaleToken
    t3  the job is re-offered; worker B claims k, token 57
    t4  A writes with token 41 again                          -> StaleToken
    t5  B writes k's result with token 57                     -> stored

The store also keeps the highest token that wrote each job and refuses a
lower one, as a store that cannot see the Lens must
(:mod:`examples.handlers.fenced_sqlite`); beside the Lens that check is a
second line, for a claim key that came back in a way the Lens did not grant
(a restored backup, a hand-written key).

Writing the same token again is accepted while the claim is live (the same
holder repeating itself after a lost reply). Each write that stores a new
token is appended to an audit list, so a test (or an operator) can count how
many times each job's effect was applied.

Every key of the store carries the hash tag of the job's Lens shard
(``{<lens ns>:<shard>}``, forum.coordinator.keys), so the script's keys share the
claim key's slot and the store works on a Redis Cluster as the Lens does
(its URL then is ``redis+cluster://...``). So the audit list is one per shard.

A refused write raises :class:`StaleToken`, a :class:`coordinator.ClaimLost`:
the worker counts the job's claim as lost, and the newer holder (or the
re-offer) runs it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from forum.coordinator import ClaimLost, Handler, Job
from forum.coordinator.keys import DEFAULT_NAMESPACE, DEFAULT_SHARDS, KeySchema
from forum.coordinator.redis_url import RedisClient, RedisTarget, close
from forum.node.core.cancellation import keep_cancellation
from forum.node.core.resource import AsyncResource

#: KEYS[1] {<lens ns>:<s>}:claim:<job key> (the Lens's claim: the live holder's token)
#: KEYS[2] <ns>:{<lens ns>:<s>}:result:<job key> (hash: token, value)
#: KEYS[3] <ns>:{<lens ns>:<s>}:applied (list of "<job key> <token>", one per
#:         new token stored)
#: (<s> is the job key's Lens shard: all three keys are in one slot)
#: ARGV[1] the writer's fencing token; ARGV[2] the value; ARGV[3] the job key
#: Returns 1 stored (or repeated by the same token); -1 refused: the claim is
#: not the writer's (expired, completed, released or taken over); 0 refused:
#: a higher token wrote first.
#:
#: Tokens are compared as the strings the Lens wrote (claim.lua formats them
#: with %d, as redis-py sends an int), so no precision is at stake there; the
#: order check uses Lua numbers, exact below 2^53 (forum.coordinator.keys).
_STORE_IF_CLAIM_LIVE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local held = tonumber(redis.call('HGET', KEYS[2], 'token') or '0')
local token = tonumber(ARGV[1])
if token < held then
  return 0
end
if token > held then
  redis.call('RPUSH', KEYS[3], ARGV[3] .. ' ' .. ARGV[1])
end
redis.call('HSET', KEYS[2], 'token', ARGV[1], 'value', ARGV[2])
return 1
"""

_NOT_LIVE, _OLDER = -1, 0


class StaleToken(ClaimLost):
    """A write refused: the writer's claim is not the live one, or a higher
    token wrote first. A :class:`coordinator.ClaimLost` (``key``, ``token``,
    ``reason``)."""


class FencedRedisStore(AsyncResource):
    """Results by job key, in the Lens's Redis database, each written only
    under the job's live claim and kept with the token that wrote it.

    ``lens_namespace`` and ``lens_shards`` must be the Lens's (``forum worker
    --namespace``; its shards are the default); the client must reach the
    Lens's Redis and database (``--redis-url``).
    """

    def __init__(
        self,
        client: RedisClient,
        namespace: str = "example:fenced",
        lens_namespace: str = DEFAULT_NAMESPACE,
        lens_shards: int = DEFAULT_SHARDS,
    ) -> None:
        if "{" in namespace or "}" in namespace:
            raise ValueError(f"the store's namespace must not contain braces: {namespace!r}")
        self._client = client
        self._namespace = namespace
        self._lens = KeySchema(lens_namespace, lens_shards)
        self._store = client.register_script(_STORE_IF_CLAIM_LIVE)

    @classmethod
    def from_url(
        cls, url: str, namespace: str = "example:fenced", lens_namespace: str = DEFAULT_NAMESPACE
    ) -> FencedRedisStore:
        return cls(RedisTarget.from_url(url).client(), namespace, lens_namespace)

    async def aclose(self) -> None:
        await close(self._client)

    def _result(self, key: str) -> str:
        return f"{self._namespace}:{self._lens.tag(self._lens.shard(key))}:result:{key}"

    def _applied(self, shard: int) -> str:
        return f"{self._namespace}:{self._lens.tag(shard)}:applied"

    async def put(self, key: str, token: int, value: bytes) -> None:
        """Store ``value`` for ``key`` if ``token`` holds the job's live claim
        and no higher token wrote first; :class:`StaleToken` otherwise."""
        shard = self._lens.shard(key)
        keys = [self._lens.claim(key), self._result(key), self._applied(shard)]
        # keep_cancellation: redis-py on Python 3.11 can lose one (forum.node.core.cancellation).
        stored = await keep_cancellation(self._store(keys=keys, args=[token, value, key]))
        if stored == _NOT_LIVE:
            raise StaleToken(
                key, token, f"not the live claim in {keys[0]} (expired, completed or taken over)"
            )
        if stored == _OLDER:
            raise StaleToken(key, token, "a higher token wrote first")

    async def get(self, key: str) -> tuple[int, bytes] | None:
        """The stored ``(token, value)`` for ``key``, or ``None``."""
        token, value = await keep_cancellation(
            self._client.hmget(self._result(key), ["token", "value"])
        )
        if token is None or not isinstance(value, bytes):
            return None
        return int(token), value

    async def applied(self) -> list[tuple[str, int]]:
        """Every new ``(key, token)`` stored: in order within a shard, the
        shards one after another."""
        rows = []
        for shard in range(self._lens.shards):
            rows.extend(await keep_cancellation(self._client.lrange(self._applied(shard), 0, -1)))
        texts = (row.decode() if isinstance(row, bytes) else row for row in rows)
        pairs = (text.rsplit(" ", 1) for text in texts)
        return [(key, int(token)) for key, token in pairs]


def fenced_handler(store: FencedRedisStore) -> Handler:
    """A handler that computes a result and stores it under the job's claim."""

    async def handle(job: Job) -> None:
        result = job.payload.upper()  # the job's real work goes here
        await job.verify()  # fail early, before the write, if the claim is gone ...
        await store.put(job.key, job.token, result)  # ... the store re-checks it atomically

    return handle


@contextlib.asynccontextmanager
async def open_handler() -> AsyncIterator[Handler]:
    """For the CLI: the store in the Lens's Redis database
    ``$FORUM_EXAMPLE_REDIS_URL`` (the same URL as ``--redis-url``), beside the
    Lens namespace ``$FORUM_EXAMPLE_LENS_NAMESPACE`` (default ``forum:lens``,
    as ``--namespace``)."""
    url = os.environ["FORUM_EXAMPLE_REDIS_URL"]
    namespace = os.environ.get("FORUM_EXAMPLE_LENS_NAMESPACE", DEFAULT_NAMESPACE)
    async with FencedRedisStore.from_url(url, lens_namespace=namespace) as store:
        yield fenced_handler(store)
