"""The cluster's directory in the Lens's Redis: each replica group's backlog
of each queue, published by the workers, read by the workers.

A worker whose home groups are empty steals from a group with a backlog,
the older of two drawn from the :class:`~forum.node.cluster.directory.Directory`
(forum.node.client.cluster). Here is that directory:

* :class:`RedisDirectory` reads it: one ``HGETALL`` of the queue's hash
  (with Redis ``TIME``, so entries are aged by Redis's clock, not this
  machine's), kept :data:`CACHE_FOR` seconds per queue in the process, so
  a worker reads it at most once a second per queue however often it steals.
  An entry older than :data:`STALE_AFTER` seconds is left out: its group
  is as good as empty to a thief (its publisher stopped).
* :class:`DirectoryKeeper` writes it. Every worker process with a cluster
  map runs one; every :data:`EVERY` seconds it runs :data:`LEASE_SCRIPT`
  once, which leases groups to this keeper (``SET NX PX``, or renews its
  own lease), so each group is published by one keeper at a time. Each
  keeper holds at most its share (``ceil(groups / keepers)``, keepers
  counted by their last tick), so the work spreads as keepers come and go,
  and a free lease is picked up within a tick by a keeper below its share:
  **every group is published as long as any worker runs**, including a
  group no worker calls home, which is what lets its backlog be stolen.
  A map of one group (a cluster without a map is one) publishes nothing:
  there is nowhere to steal from, and such a worker costs Redis nothing more.
  For each group it holds, it asks one member for its per-queue counts
  (``GET /v1/prefixes?separator=/``: ``ForumClient.backlogs``) and writes
  them, and the whole space's (queue ``b""``), in one pipeline.

**Cost.** Per keeper tick, one script; per leased group and queue, one
``HSET`` (and its ``PEXPIRE``): with one queue, 2·G hash writes a second
for G groups across all workers, whatever the job rate, and one small HTTP
request per group a tick. Nothing per job.

**Why Redis.** Workers already need it (the Lens), so the directory adds no
service; nodes stay Redis-free (a node never learns about other groups);
producers never read it (keyed writes go by slot). A stale or missing
directory costs evenness, never a job: a thief that finds a group empty
looks elsewhere, and home groups are always looked in first.

=====================================  ======  ================================  =============
key                                    type    holds                             expires
=====================================  ======  ================================  =============
``{<ns>:0}:dir:<queue>``               hash    per group id: ``<live>            a minute after
                                               <oldest_age> <unix s>`` (Redis    its last write
                                               TIME of the write)
``{<ns>:0}:dir-lease:<group>``         string  the keeper publishing the group   ``LEASE`` (PX)
``{<ns>:0}:dir-keepers``               zset    member keeper id, score its last  never (members
                                               tick (Redis TIME, ms)             older than
                                                                                 ``LEASE`` removed)
=====================================  ======  ================================  =============

They carry shard 0's hash tag, as worker presence does
(forum.coordinator.presence): they belong to no job, and under Redis
Cluster one tag puts every key the lease script touches in one slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from redis import exceptions as redis_errors

from forum.coordinator.keys import KeySchema
from forum.coordinator.redis_url import RedisClient
from forum.node.client.pool import NodePool
from forum.node.cluster.directory import Depth
from forum.node.cluster.map import ClusterMap
from forum.node.core.cancellation import keep_cancellation
from forum.node.core.errors import ClientError
from forum.node.core.resource import AsyncResource

log = logging.getLogger(__name__)

#: Seconds between two ticks of a keeper (a publication of its groups).
EVERY = 0.5
#: Seconds a group's lease lasts unless renewed (three ticks).
LEASE = 1.5
#: Seconds after which a reader ignores an entry (its keeper stopped).
STALE_AFTER = 5.0
#: Seconds a reader keeps a queue's depths before reading them again.
CACHE_FOR = 1.0
#: Seconds a queue's hash outlives its last write (a queue no longer used goes).
KEEP_FOR = 60.0
#: What a payload's queue ends with (forum.node.cluster.directory ``queue_of``).
SEPARATOR = b"/"

#: Leases groups to a keeper, and renews its own (see the module docstring).
LEASE_SCRIPT = """
-- KEYS[1]    <tag>:dir-keepers (zset: keeper id -> last tick, ms)
-- KEYS[2..n] <tag>:dir-lease:<group>, every group of the map, the keeper's
--            preferred order first
-- ARGV[1]    the keeper's id
-- ARGV[2]    the lease, ms
-- returns    {Redis TIME in ms, then 1 or 0 per group: leased to this keeper,
--            then the ids of the keepers counted (the workers, for balancing homes)}
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local me, lease = ARGV[1], tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], ms, me)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - lease)
local share = math.ceil((#KEYS - 1) / redis.call('ZCARD', KEYS[1]))
local held, answer = 0, {ms}
for i = 2, #KEYS do
  local holder = redis.call('GET', KEYS[i])
  local mine = 0
  if holder == me then
    if held < share then
      redis.call('PEXPIRE', KEYS[i], lease)
      mine = 1
    else
      redis.call('DEL', KEYS[i])  -- over its share: another keeper takes it
    end
  elseif not holder and held < share then
    redis.call('SET', KEYS[i], me, 'PX', lease)
    mine = 1
  end
  held = held + mine
  answer[#answer + 1] = mine
end
for _, keeper in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  answer[#answer + 1] = keeper
end
return answer
"""


#: Gives up a stopping keeper's leases (those still its own) at once.
RELEASE_SCRIPT = """
-- KEYS[1]    <tag>:dir-keepers
-- KEYS[2..n] <tag>:dir-lease:<group>, the groups the keeper leased
-- ARGV[1]    the keeper's id
-- returns    how many leases it gave up
redis.call('ZREM', KEYS[1], ARGV[1])
local freed = 0
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    freed = freed + 1
  end
end
return freed
"""
#: The longest a stopping keeper waits to give up its leases (they expire anyway).
_RELEASE_WITHIN = 1.0


def directory_key(schema: KeySchema, queue: bytes) -> bytes:
    """The hash of ``queue``'s depths per group."""
    return f"{schema.tag(0)}:dir:".encode() + queue


def lease_key(schema: KeySchema, group: str) -> str:
    return f"{schema.tag(0)}:dir-lease:{group}"


def keepers_key(schema: KeySchema) -> str:
    return f"{schema.tag(0)}:dir-keepers"


def _entry(depth: Depth, now: float) -> bytes:
    return f"{depth.live} {depth.oldest_age:.3f} {now:.3f}".encode()


def _parse(value: bytes, now: float) -> Depth | None:
    """A fresh entry's depth; ``None`` when stale or not one."""
    try:
        live, age, when = value.split()
        written = float(when)
        depth = Depth(int(live), float(age))
    except ValueError:
        return None
    return depth if now - written <= STALE_AFTER else None


class RedisDirectory:
    """A :class:`~forum.node.cluster.directory.Directory` read from Redis
    (see the module docstring); ``redis`` is the caller's to close."""

    def __init__(self, redis: RedisClient, namespace: str, *, cache_for: float = CACHE_FOR) -> None:
        self._redis = redis
        self._schema = KeySchema(namespace)
        self._cache_for = cache_for
        #: Per queue: when it was read (monotonic) and what it said.
        self._cache: dict[bytes, tuple[float, dict[str, Depth]]] = {}

    async def depths(self, queue: bytes) -> Mapping[str, Depth]:
        """Per group id, ``queue``'s fresh depth there (groups without one left out)."""
        now = time.monotonic()
        cached = self._cache.get(queue)
        if cached is not None and now - cached[0] < self._cache_for:
            return cached[1]
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.hgetall(directory_key(self._schema, queue))
            (seconds, micros), entries = await keep_cancellation(pipe.execute())
        at = seconds + micros / 1e6
        found = {
            group.decode(): depth
            for group, value in entries.items()
            if (depth := _parse(value, at)) is not None
        }
        self._cache[queue] = (now, found)
        return found


class DirectoryKeeper(AsyncResource):
    """Publishes the backlogs of the groups it leases (see the module docstring).

    ``cluster`` gives the map to publish (called each tick, so a client's
    newer map is followed); ``keeper_id`` names this keeper in the leases
    (a worker's owner id); ``prefer``: the groups it leases first (its
    home); ``on_keepers``: called each tick with the ids of the keepers
    counted (the workers: ``ClusterClient.balance`` homes them evenly).
    Started by ``async with`` (or :meth:`start`), stopped by
    :meth:`aclose`; ``redis`` is the caller's to close.
    """

    def __init__(
        self,
        redis: RedisClient,
        namespace: str,
        cluster: Callable[[], ClusterMap],
        keeper_id: str,
        *,
        token: str | None = None,
        prefer: Sequence[str] = (),
        on_keepers: Callable[[Sequence[str]], None] | None = None,
        every: float = EVERY,
        lease: float = LEASE,
    ) -> None:
        if not 0 < every < lease:
            raise ValueError("every must be positive and shorter than lease")
        self._redis = redis
        self._schema = KeySchema(namespace)
        self._cluster = cluster
        self.keeper_id = keeper_id
        self._token = token
        self._prefer = tuple(prefer)
        self._on_keepers = on_keepers
        self._every = every
        self._lease_ms = int(lease * 1000)
        self._lease_script = redis.register_script(LEASE_SCRIPT)
        self._release_script = redis.register_script(RELEASE_SCRIPT)
        self._pools: dict[str, NodePool] = {}
        #: Per group, the queues it published last (a queue gone is written as empty).
        self._published: dict[str, set[bytes]] = {}
        self._task: asyncio.Task[None] | None = None
        #: The groups this keeper held at its last tick.
        self.leased: tuple[str, ...] = ()

    async def __aenter__(self) -> DirectoryKeeper:
        self.start()
        return self

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="directory keeper")

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except (redis_errors.RedisError, OSError) as exc:
                log.debug("the directory was not published (%s)", exc)
            except Exception:  # a keeper that stops leaves its groups to the others' leases
                log.exception("the directory keeper's tick failed; trying again")
            await asyncio.sleep(self._every)

    async def tick(self) -> None:
        """Lease groups, then publish the backlogs of those leased: one pass."""
        cluster = self._cluster()
        groups = [g.id for g in cluster.served]
        if len(groups) < 2:
            return  # one group: no one to steal from, nothing to publish
        order = [g for g in self._prefer if g in groups]
        order += [g for g in groups if g not in order]
        keys = [keepers_key(self._schema)] + [lease_key(self._schema, g) for g in order]
        answer = await keep_cancellation(self._lease_script(keys, [self.keeper_id, self._lease_ms]))
        now = int(answer[0]) / 1000
        flags, keepers = answer[1 : 1 + len(order)], answer[1 + len(order) :]
        self.leased = tuple(g for g, mine in zip(order, flags, strict=True) if mine)
        if self._on_keepers is not None:
            self._on_keepers([k.decode() if isinstance(k, bytes) else str(k) for k in keepers])
        backlogs = await asyncio.gather(*(self._backlogs(cluster, g) for g in self.leased))
        async with self._redis.pipeline(transaction=False) as pipe:
            for group, found in zip(self.leased, backlogs, strict=True):
                if found is None:
                    continue  # no member answered: its entries go stale
                for queue, depth in found.items():
                    key = directory_key(self._schema, queue)
                    pipe.hset(key, group, _entry(depth, now))
                    pipe.pexpire(key, int(KEEP_FOR * 1000))
            await keep_cancellation(pipe.execute())
        for gid in set(self._pools) - set(groups):
            await self._pools.pop(gid).aclose()

    async def _backlogs(self, cluster: ClusterMap, group: str) -> dict[bytes, Depth] | None:
        """``group``'s depth per queue (``b""``: the whole space's), with the
        queues it published last and has no more as empty; ``None`` when no
        member answered."""
        pool = self._pools.get(group)
        members = cluster.group(group).members
        if pool is None or pool.urls != members:
            if pool is not None:
                await pool.aclose()
            pool = self._pools[group] = NodePool(members, self._token)
        try:
            rows = await pool.call(lambda client: client.backlogs(SEPARATOR))
        except ClientError as exc:
            log.debug("group %s's backlogs not read (%s)", group, exc)
            return None
        found: dict[bytes, Depth] = {}
        total, oldest = 0, 0.0
        for prefix, depth in rows.items():
            total += depth.live
            oldest = max(oldest, depth.oldest_age)
            if prefix.endswith(SEPARATOR):
                found[prefix] = depth
        found[b""] = Depth(total, oldest)
        for gone in self._published.get(group, set()) - found.keys():
            found[gone] = Depth(0, 0.0)
        self._published[group] = {q for q, d in found.items() if d.live}
        return found

    async def aclose(self) -> None:
        """Stop publishing, and give up this keeper's leases (best effort:
        they expire within ``lease`` anyway), so others take its groups now."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        leased, self.leased = self.leased, ()
        keys = [keepers_key(self._schema)] + [lease_key(self._schema, g) for g in leased]
        with contextlib.suppress(redis_errors.RedisError, OSError, TimeoutError):
            async with asyncio.timeout(_RELEASE_WITHIN):
                await keep_cancellation(self._release_script(keys, [self.keeper_id]))
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()


__all__ = ["DirectoryKeeper", "RedisDirectory", "directory_key"]
