"""``ClusterClient``: the tuple space of a scaled-out cluster, over its replica groups.

::

    async with await ClusterClient.discover("http://10.0.0.1:7000") as space:
        await space.write(b"mail/42", key="mail-42")          # to slot(mail-42)'s group
        job = await space.reserve(Pattern(b"mail/"), lease=30, timeout=5)

It has ``ForumClient``'s interface (a :class:`forum.coordinator.spaces.WorkSpace`),
so a worker runs on it unchanged. Each group is reached through a
:class:`~forum.node.client.pool.NodePool` of its members (sticky, failing
over inside the group). What goes where (docs/scaling.md):

* **Writes.** A keyed write goes to its slot's group (``crc32(key) mod
  16384``, weighted rendezvous: forum.node.cluster.slots), so every copy of
  one job key meets the same group and dedup at write stays exact. When no
  member of that group answers, it goes to the next group in the slot's
  rendezvous order: *misplaced*, never refused while any group is up (its
  copies still meet the same Lens keys, which do not depend on placement).
  A keyless write goes to this producer's group: one chosen by weight at
  first, kept while it answers (one producer's writes stay in one order).
* **Takes and reserves.** Each client has **home groups**: ``home`` groups
  ranked by rendezvous on its id, the first of them, once a directory
  keeper has counted the consumers, from their balanced assignment
  (:meth:`balance`: rendezvous with bounded loads, so every group has its
  share of consumers); each looks where it lives, with long polls,
  scanning nothing.
  When home has nothing, it **steals**: from the :class:`Directory` (each
  group's backlog per queue, a moment old), it draws two groups with a
  backlog and looks in the one whose oldest tuple is older (power of two
  choices), and keeps looking there while it finds work; without a
  directory, it looks in every other group, from the next in turn.
  Oldest-first and priority are exact inside a group and best effort across
  groups, as in SQS.
* A reservation is acked, extended and released on the node that made it
  (reservations are not replicated): the client remembers which, per entry.
* ``count`` sums over the groups; ``list`` pages through them one after the
  other; ``pause`` and ``resume`` reach every group; ``watch`` merges the
  groups' streams.
* **The map.** The client starts from a :class:`ClusterMap` (or fetches one
  from any node: :meth:`discover`) and takes a newer one whenever an answer
  names a higher epoch (``Forum-Map-Epoch``) and every ``map_refresh``
  seconds, checking its signature when given the cluster secret. A client
  with a stale map is never wrong, only less even: a write to a group that
  no longer owns the slot is misplaced, not lost.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import hmac
import logging
import random
import time
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar, Unpack

from forum.node.api.model import ClusterMapBody
from forum.node.api.status import NodeStatus
from forum.node.client.pool import NodePool
from forum.node.client.remote import ForumClient
from forum.node.client.watch import WatchEvent
from forum.node.cluster.directory import Depth, Directory, queue_of
from forum.node.cluster.map import ClusterMap, Group, local_map
from forum.node.cluster.slots import SLOTS, balanced, group_seed, ranked, slot_of
from forum.node.core.cancellation import gather_all
from forum.node.core.entries import EntryId, Reserved, Tuple
from forum.node.core.errors import ClusterMapError, NodeRejected, NodeUnavailable
from forum.node.core.resource import AsyncResource
from forum.node.core.space import ListPage, Pattern
from forum.node.core.write_options import WriteOptions

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds between two fetches of the map when no answer named a newer one.
MAP_REFRESH = 5.0
#: Seconds a blocking take or reserve waits on home before it looks for work
#: to steal again; and how long an empty home is not asked first again.
STEAL_EVERY = 1.0
#: A ``list`` cursor holds the group's place in its high bits.
_CURSOR_SHIFT = 40


class ClusterClient(AsyncResource):
    """The tuple space of the cluster ``cluster`` describes (see the module docstring).

    ``cluster``: a :class:`ClusterMap`, or node URLs (one group, as a cluster
    without a map is). ``client_id`` places its home groups (default: random,
    per client); ``home``: how many. ``directory``: where group backlogs are
    published, for stealing. ``cluster_secret``: check fetched maps' signatures.
    ``prefer``: the member its group is reached through first (a worker given
    one node's URL works through that node); the other groups' members are
    tried from one drawn by the client id, so clients spread over a group's
    members.
    """

    def __init__(
        self,
        cluster: ClusterMap | Sequence[str],
        token: str | None = None,
        *,
        client_id: str | None = None,
        home: int = 1,
        directory: Directory | None = None,
        cluster_secret: str | None = None,
        map_refresh: float = MAP_REFRESH,
        rng: random.Random | None = None,
        prefer: str | None = None,
    ) -> None:
        if home < 1:
            raise ValueError("home must be at least 1")
        self._map = cluster if isinstance(cluster, ClusterMap) else local_map(cluster)
        self._token = token
        self._random = rng or random.Random()
        self.client_id = client_id or f"client-{self._random.getrandbits(48):012x}"
        self._home_count = home
        self._directory = directory
        self._secret = cluster_secret
        self._map_refresh = map_refresh
        self._prefer = None if prefer is None else prefer.rstrip("/")
        self._pools: dict[str, NodePool] = {}
        #: The node that made each reservation this client holds.
        self._holders: dict[EntryId, ForumClient] = {}
        #: The keyless writes' group, and the group a steal last found work in.
        self._sticky: str | None = None
        self._stealing: dict[bytes, str] = {}
        #: When home was last found empty (loop time), per prefix.
        self._home_empty: dict[bytes, float] = {}
        self._turn = 0
        self._next_refresh = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        #: Pools of an older map's groups, to close (:meth:`_close_retired`).
        self._retired: list[NodePool] = []
        #: Set by :meth:`aclose`: the map is no longer refreshed.
        self._closed = False
        self.misplaced = 0
        self._home: tuple[str, ...] = ()
        #: The consumers a keeper counted last (:meth:`balance`).
        self._workers: tuple[str, ...] = ()
        self._place()

    def __repr__(self) -> str:
        return f"ClusterClient(epoch={self._map.epoch}, groups={len(self._map.groups)})"

    @classmethod
    async def discover(
        cls, urls: str | Sequence[str], token: str | None = None, **kwargs: Any
    ) -> ClusterClient:
        """A client of the cluster whose map the first answering node of
        ``urls`` serves; of those nodes as one group when it has none."""
        listed = [urls] if isinstance(urls, str) else list(urls)
        async with NodePool(listed, token) as pool:
            try:
                body = await pool.call(lambda client: client.cluster_map())
            except NodeRejected as exc:
                if exc.status != 404:
                    raise
                return cls(pool.urls, token, **{"prefer": pool.current.url, **kwargs})
        cluster = _checked(body, kwargs.get("cluster_secret"))
        return cls(cluster, token, **{"prefer": pool.current.url, **kwargs})

    @property
    def map(self) -> ClusterMap:
        """The map this client routes by."""
        return self._map

    @property
    def url(self) -> str:
        """The URL of the home group's node that answered last (as
        ``ForumClient.url``: what a worker's presence names)."""
        return self._pool(self._home[0]).current.url

    @property
    def home(self) -> tuple[str, ...]:
        """The ids of this client's home groups."""
        return self._home

    def balance(self, workers: Sequence[str]) -> None:
        """Home on this client's group in the balanced assignment of
        ``workers`` (the ids of every consumer known, this one's among them:
        :func:`~forum.node.cluster.slots.balanced`), so that every group has
        its share of consumers however their ids hash. A directory keeper
        calls it with the workers it counts."""
        self._workers = tuple(workers)
        self._place()

    def _place(self) -> None:
        served = self._map.served
        seeds = [(g.id, group_seed(g.id), g.weight) for g in served]
        order = ranked(zlib.crc32(self.client_id.encode()), seeds)
        if self.client_id in self._workers:
            first = balanced(self._workers, seeds).get(self.client_id)
            if first is not None:
                order = [first] + [gid for gid in order if gid != first]
        home = tuple(order[: self._home_count])
        if self._home and home != self._home:
            log.info("home group(s) %s, was %s", ",".join(home), ",".join(self._home))
        self._home = home
        ids = {g.id for g in served}
        self._stealing = {q: gid for q, gid in self._stealing.items() if gid in ids}
        if self._sticky is not None and self._sticky not in {g.id for g in self._map.active}:
            self._sticky = None

    def _pool(self, group: Group | str) -> NodePool:
        gid = group if isinstance(group, str) else group.id
        pool = self._pools.get(gid)
        if pool is None:
            if self._closed:
                # A call that outlived aclose (a blocking reserve given up, say)
                # opens no pool: its session would be left for the collector.
                raise NodeUnavailable(f"group {gid}", "this cluster client is closed")
            pool = self._pools[gid] = NodePool(self._members(gid), self._token)
        return pool

    def _members(self, gid: str) -> list[str]:
        """Group ``gid``'s members in the order this client tries them: from
        the preferred one, else from one drawn by the client id."""
        members = list(self._map.group(gid).members)
        if self._prefer in members:
            start = members.index(self._prefer)
        else:
            start = zlib.crc32(self.client_id.encode()) % len(members)
        return members[start:] + members[:start]

    async def _call(
        self,
        group: Group | str,
        call: Callable[[ForumClient], Awaitable[T]],
        *,
        skip_current: bool = False,
    ) -> T:
        """``call`` on a member of ``group`` that answers; a newer map an
        answer names is fetched (in the background)."""
        pool = self._pool(group)
        try:
            return await pool.call(call, skip_current=skip_current)
        finally:
            self._check_map(pool.current)

    # -- the map ---------------------------------------------------------------

    def _check_map(self, client: ForumClient | None = None) -> None:
        """Fetch the map in the background when due, or when ``client``'s
        last answer named a newer epoch."""
        if self._closed:  # a call that ended after aclose: no refresh, no pool, left behind
            return
        newer = client is not None and (client.map_epoch or 0) > self._map.epoch
        now = time.monotonic()
        if (newer or now >= self._next_refresh) and self._refreshing is None:
            self._next_refresh = now + self._map_refresh
            self._refreshing = asyncio.create_task(self._refresh(client), name="cluster-map")

    async def _refresh(self, client: ForumClient | None) -> None:
        try:
            source = client or self._pool(self._home[0]).current
            body = await source.cluster_map()
            self.take_map(_checked(body, self._secret))
            await self._close_retired()
        except (NodeUnavailable, NodeRejected, ClusterMapError) as exc:
            log.debug("the cluster map could not be refreshed: %s", exc)
        finally:
            self._refreshing = None

    def take_map(self, cluster: ClusterMap) -> bool:
        """Route by ``cluster`` from now on if its epoch is higher; whether it was taken."""
        if cluster.epoch <= self._map.epoch:
            return False
        log.info("cluster map epoch %d taken (was %d)", cluster.epoch, self._map.epoch)
        old = self._pools
        self._map = cluster
        keep = {g.id for g in cluster.groups if g.state != "retired"}
        self._pools = {
            gid: pool
            for gid, pool in old.items()
            if gid in keep and set(pool.urls) == set(cluster.group(gid).members)
        }
        # Pools of groups gone or changed are closed now, or at the latest by
        # aclose (the caller may be on its way out: no session left behind).
        self._retired.extend(p for gid, p in old.items() if self._pools.get(gid) is not p)
        self._place()
        return True

    # -- writes ----------------------------------------------------------------

    async def write(self, payload: bytes, **options: Unpack[WriteOptions]) -> EntryId:
        """Write to the key's group (else this producer's); see the module docstring."""
        key = options.get("key")
        if key is not None:
            # The hot path, inline: the slot's owner's member that answered
            # last (a table lookup and a dict's), then the map checked once.
            owner = self._map.owner(slot_of(key)).id
            client = (self._pools.get(owner) or self._pool(owner)).current
            try:
                written = await client.write(payload, **options)
            except NodeUnavailable:
                pass  # the pool's other members, then the next groups: below
            else:
                self._check_map(client)
                return written
        return await self._write(key, lambda c: c.write(payload, **options), tried=key is not None)

    async def write_many(
        self,
        payloads: Sequence[bytes],
        *,
        keys: Sequence[bytes | str] | None = None,
        **options: Unpack[WriteOptions],
    ) -> builtins.list[EntryId]:
        """Write many tuples in one request to one group: all become durable,
        or none. With ``keys`` (one per payload), the payloads go to their
        keys' groups, one request per group, in parallel: all or none in
        each group, and the ids in the payloads' order."""
        if not payloads:
            return []
        if keys is None:
            return await self._write(
                options.get("key"), lambda c: c.write_many(payloads, **options)
            )
        if len(keys) != len(payloads):
            raise ValueError("keys names each write of a batch: one per payload")
        by_group: dict[str, builtins.list[int]] = {}
        for i, key in enumerate(keys):
            by_group.setdefault(self._map.owner(slot_of(key)).id, []).append(i)

        async def one_group(indexes: builtins.list[int]) -> builtins.list[EntryId]:
            some, their_keys = [payloads[i] for i in indexes], [keys[i] for i in indexes]
            return await self._write(
                their_keys[0], lambda c: c.write_many(some, keys=their_keys, **options)
            )

        answers = await gather_all(*(one_group(ix) for ix in by_group.values()))
        ids: builtins.list[EntryId | None] = [None] * len(payloads)
        for indexes, written in zip(by_group.values(), answers, strict=True):
            for i, entry_id in zip(indexes, written, strict=True):
                ids[i] = entry_id
        return [i for i in ids if i is not None]

    async def _write(
        self,
        key: str | bytes | None,
        call: Callable[[ForumClient], Awaitable[T]],
        tried: bool = False,
    ) -> T:
        """``call`` in the key's slot's group (this producer's without a key);
        in the next group of the slot's rendezvous order (of the active
        groups) with a member that answers, when none of that group's does."""
        slot = None if key is None else slot_of(key)
        if slot is not None:
            first = self._map.owner(slot).id  # a table lookup: the common case ranks nothing
        else:
            if self._sticky is None:
                self._sticky = await self._lighter(self._map.active)
            first = self._sticky
        # The member that answered last, called directly (``tried``: the
        # caller just did, and it did not answer).
        if not tried:
            client = (self._pools.get(first) or self._pool(first)).current
            try:
                result = await call(client)
            except NodeUnavailable:
                pass
            else:
                self._check_map(client)
                return result
        try:
            return await self._call(first, call, skip_current=True)
        except NodeUnavailable as exc:
            failure = exc
        groups = self._map.active if slot is None else self._map.order(slot)
        for group in groups:
            if group.id == first:
                continue
            log.warning("no member of group %s answers (%s); trying %s", first, failure, group.id)
            try:
                result = await self._call(group.id, call)
            except NodeUnavailable as exc:
                failure = exc
                continue
            if slot is None:
                self._sticky = group.id
            else:
                self.misplaced += 1
            return result
        raise failure

    async def _lighter(self, active: Sequence[Group]) -> str:
        """A keyless producer's group: of two drawn by weight, the one with
        fewer live tuples in the directory (power of two choices); the first
        drawn without a directory."""
        two = self._random.choices(active, [g.weight for g in active], k=2)
        if self._directory is None or two[0] is two[1]:
            return two[0].id
        try:
            depths = await self._directory.depths(b"")
        except Exception as exc:  # a directory that fails only costs evenness
            log.debug("the directory failed (%s); placing by weight", exc)
            return two[0].id
        return min(two, key=lambda g: depths.get(g.id, _EMPTY).live).id

    # -- takes and reservations ------------------------------------------------

    async def reserve(
        self, pattern: Pattern, lease: float, timeout: float | None = None
    ) -> Reserved | None:
        found = await self.reserve_many(pattern, lease, 1, timeout)
        return found[0] if found else None

    async def reserve_many(
        self, pattern: Pattern, lease: float, limit: int, timeout: float | None = None
    ) -> builtins.list[Reserved]:
        """Up to ``limit`` reservations from home, else stolen; waits up to
        ``timeout`` s (on home, looking for work elsewhere every ``STEAL_EVERY``)."""
        if limit < 1:
            raise ValueError("limit must be at least 1")

        async def reserve(client: ForumClient, wait: float | None) -> list[Reserved]:
            found = await client.reserve_many(pattern, lease, limit, wait)
            for item in found:
                self._holders[item.id] = client
            return found

        return await self._find(pattern, timeout, reserve)

    async def take_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        async def take(client: ForumClient, wait: float | None) -> list[Tuple]:
            found = await client.take_entry(pattern, wait)
            return [] if found is None else [found]

        found = await self._find(pattern, timeout, take)
        return found[0] if found else None

    async def take(self, pattern: Pattern, timeout: float | None = None) -> bytes | None:
        found = await self.take_entry(pattern, timeout)
        return None if found is None else found.payload

    async def take_many(
        self, pattern: Pattern, limit: int, timeout: float | None = None
    ) -> builtins.list[Tuple]:
        return await self._find(
            pattern, timeout, lambda client, wait: client.take_many(pattern, limit, wait)
        )

    async def withdraw(self, pattern: Pattern, limit: int = 100) -> builtins.list[Tuple]:
        """:meth:`ForumClient.withdraw` in every served group (a job's tuple
        may be misplaced); up to ``limit`` from each."""
        taken = await self._each(lambda client: client.withdraw(pattern, limit))
        return [item for group in taken for item in group]

    async def _find(
        self,
        pattern: Pattern,
        timeout: float | None,
        get: Callable[[ForumClient, float | None], Awaitable[list[T]]],
    ) -> list[T]:
        """What ``get`` finds at once in the groups to look in (home, then
        where to steal from), else what it finds waiting on home, a
        ``STEAL_EVERY`` at a time, until ``timeout``."""
        self._check_map()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or 0.0)
        while True:
            async for gid in self._looking(pattern.prefix):
                found = await self._in_group(gid, lambda c: get(c, None))
                if found:
                    if gid not in self._home:
                        self._stealing[queue_of(pattern.prefix)] = gid
                    return found
                self._seen_empty(pattern.prefix, gid)
            left = deadline - loop.time()
            if left <= 0:
                return []
            wait = min(left, STEAL_EVERY)
            found = await self._in_group(self._home[0], functools.partial(_waiting, get, wait))
            if found:
                return found

    async def _in_group(
        self, gid: str, call: Callable[[ForumClient], Awaitable[list[T]]]
    ) -> list[T]:
        """``call`` in group ``gid``; nothing when no member of it answers
        (a take goes on in the groups that do)."""
        try:
            return await self._call(gid, call)
        except NodeUnavailable as exc:
            log.debug("group %s: %s", gid, exc)
            return []

    async def _looking(self, prefix: bytes) -> AsyncIterator[str]:
        """The groups to look in now, in order, each drawn only when the one
        before had nothing: home (unless found empty in the last
        ``STEAL_EVERY``), the group a steal last found work in, then one
        drawn from the directory (or, without one, every other group)."""
        now = asyncio.get_running_loop().time()
        # Home found empty a moment ago: look elsewhere first, home after.
        home_last = now - self._home_empty.get(prefix, -STEAL_EVERY) < STEAL_EVERY
        if not home_last:
            for gid in self._home:
                yield gid
        queue = queue_of(prefix)
        sticky = self._stealing.get(queue)
        if sticky is not None:
            yield sticky
        others = [g.id for g in self._map.served if g.id not in self._home and g.id != sticky]
        if others:
            for gid in await self._draw(queue, others):
                yield gid
        if home_last:
            for gid in self._home:
                yield gid

    async def _draw(self, queue: bytes, others: list[str]) -> list[str]:
        """Where to steal from: the older of two groups with a backlog of
        ``queue`` (power of two choices), or without a directory every
        other group, from the next in turn."""
        if self._directory is None:
            # Every other group, from the next in turn: a look without a
            # directory misses no group's work (one probe each; fine at small G).
            self._turn += 1
            start = self._turn % len(others)
            return others[start:] + others[:start]
        try:
            depths = await self._directory.depths(queue)
        except Exception as exc:  # a directory that fails only costs evenness
            log.debug("the directory failed (%s); stealing in turn", exc)
            depths = {}
        backlog = [(gid, d) for gid in others if (d := depths.get(gid, _EMPTY)).live > 0]
        if not backlog:
            return []
        two = self._random.sample(backlog, min(2, len(backlog)))
        return [max(two, key=lambda item: (item[1].oldest_age, item[1].live))[0]]

    def _seen_empty(self, prefix: bytes, gid: str) -> None:
        if gid in self._home:
            self._home_empty[prefix] = asyncio.get_running_loop().time()
        elif self._stealing.get(queue_of(prefix)) == gid:
            del self._stealing[queue_of(prefix)]

    async def ack_reserve(
        self,
        entry_ids: Sequence[EntryId],
        pattern: Pattern,
        lease: float,
        limit: int,
        timeout: float | None = None,
    ) -> tuple[builtins.list[bool], builtins.list[Reserved]]:
        """Ack ``entry_ids``, then reserve up to ``limit``: one request to
        home when every id was reserved from the node home is reached through
        (a worker's steady state), then :meth:`reserve_many` if home had
        none; else the acks on their holders and then :meth:`reserve_many`."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        home = self._pool(self._home[0]).current
        if all(self._holders.get(i) is home for i in entry_ids):
            acked, found = await home.ack_reserve(entry_ids, pattern, lease, limit)
            for entry_id in entry_ids:
                self._holders.pop(entry_id, None)
            for item in found:
                self._holders[item.id] = home
            if found:
                return acked, found
            self._seen_empty(pattern.prefix, self._home[0])
            return acked, await self.reserve_many(pattern, lease, limit, timeout)
        acked = await self.ack_many(entry_ids)
        return acked, await self.reserve_many(pattern, lease, limit, timeout)

    async def ack_many(self, entry_ids: Sequence[EntryId]) -> builtins.list[bool]:
        """Ack each reservation on the node that made it."""
        return await self._by_holder(entry_ids, lambda c, ids: c.ack_many(ids), forget=True)

    async def ack(self, entry_id: EntryId) -> bool:
        return (await self.ack_many([entry_id]))[0]

    async def extend_many(self, entry_ids: Sequence[EntryId], lease: float) -> builtins.list[bool]:
        return await self._by_holder(entry_ids, lambda c, ids: c.extend_many(ids, lease))

    async def extend(self, entry_id: EntryId, lease: float) -> bool:
        return (await self.extend_many([entry_id], lease))[0]

    async def release(self, entry_id: EntryId) -> bool:
        return (await self._by_holder([entry_id], _release_each, forget=True))[0]

    async def _by_holder(
        self,
        entry_ids: Sequence[EntryId],
        call: Callable[[ForumClient, list[EntryId]], Awaitable[list[bool]]],
        forget: bool = False,
    ) -> builtins.list[bool]:
        """``call`` on each holder with its share of ``entry_ids``; the flags
        in the order given (``False`` for an id no node here reserved, or
        whose reservation is over)."""
        shares: dict[ForumClient, list[int]] = {}
        flags = [False] * len(entry_ids)
        for n, entry_id in enumerate(entry_ids):
            holder = self._holders.get(entry_id)
            if holder is not None:
                shares.setdefault(holder, []).append(n)
        for holder, places in shares.items():
            answers = await call(holder, [entry_ids[n] for n in places])
            for n, flag in zip(places, answers, strict=True):
                flags[n] = flag
                if forget or not flag:
                    self._holders.pop(entry_ids[n], None)
        return flags

    # -- reading and looking ---------------------------------------------------

    async def read_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        """The oldest live match in the first group that has one (home first)."""
        for gid in self._home + tuple(g.id for g in self._map.served if g.id not in self._home):
            found = await self._call(gid, lambda c: c.read_entry(pattern))
            if found is not None:
                return found
        if timeout:
            return await self._call(self._home[0], lambda c: c.read_entry(pattern, timeout))
        return None

    async def read(self, pattern: Pattern) -> bytes | None:
        found = await self.read_entry(pattern)
        return None if found is None else found.payload

    async def count(self, pattern: Pattern) -> int:
        """The live matches of every served group, summed (each as of its replication)."""
        return sum(await self._each(lambda c: c.count(pattern)))

    async def list(self, pattern: Pattern, cursor: int = 0, limit: int = 100) -> ListPage:
        """Live matches a page at a time: each group's, oldest first, one group after another."""
        groups = self._map.served
        index, inner = cursor >> _CURSOR_SHIFT, cursor & ((1 << _CURSOR_SHIFT) - 1)
        while index < len(groups):
            page = await self._call(
                groups[index],
                functools.partial(ForumClient.list, pattern=pattern, cursor=inner, limit=limit),
            )
            if page.next_cursor is not None:
                return ListPage(page.tuples, (index << _CURSOR_SHIFT) | page.next_cursor)
            index, inner = index + 1, 0
            if page.tuples or index == len(groups):
                next_cursor = (index << _CURSOR_SHIFT) if index < len(groups) else None
                return ListPage(page.tuples, next_cursor)
        return ListPage([], None)

    async def statuses(self) -> dict[str, NodeStatus]:
        """Per served group, the status of the member that answers."""
        groups = self._map.served
        answers = await self._each(lambda c: c.status())
        return {g.id: status for g, status in zip(groups, answers, strict=True)}

    async def status(self) -> NodeStatus:
        """The status of the home group's node that answers."""
        return await self._call(self._home[0], lambda c: c.status())

    async def pause(self, prefix: bytes) -> EntryId:
        """Pause ``prefix`` in every served group; the home group's marker id."""
        markers = await self._each(lambda c: c.pause(prefix))
        return markers[[g.id for g in self._map.served].index(self._home[0])]

    async def resume(self, prefix: bytes) -> int:
        """End every pause of exactly ``prefix`` in every group; how many ended."""
        return sum(await self._each(lambda c: c.resume(prefix)))

    async def paused(self) -> builtins.list[bytes]:
        """The prefixes paused in any group, sorted."""
        found: set[bytes] = set()
        for listed in await self._each(lambda c: c.paused()):
            found.update(listed)
        return sorted(found)

    async def _each(self, call: Callable[[ForumClient], Awaitable[T]]) -> builtins.list[T]:
        """``call`` in every served group at once, in map order."""
        self._check_map()
        return await gather_all(*(self._pool(g).call(call) for g in self._map.served))

    async def watch(
        self, pattern: Pattern, *, reconnects: int = 10
    ) -> AsyncGenerator[WatchEvent, None]:
        """Every served group's events of the prefix, merged as they come."""
        queue: asyncio.Queue[WatchEvent | BaseException] = asyncio.Queue(maxsize=1024)

        async def follow(group: Group) -> None:
            try:
                async with contextlib.aclosing(
                    self._pool(group).current.watch(pattern, reconnects=reconnects)
                ) as events:
                    async for event in events:
                        await queue.put(event)
            except Exception as exc:
                await queue.put(exc)

        tasks = [asyncio.create_task(follow(g)) for g in self._map.served]
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- closing ---------------------------------------------------------------

    async def aclose(self) -> None:
        self._closed = True
        if self._refreshing is not None:
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refreshing
        pools, self._pools = list(self._pools.values()), {}
        self._retired.extend(pools)
        await self._close_retired()

    async def _close_retired(self) -> None:
        retired, self._retired = self._retired, []
        for pool in retired:
            await pool.aclose()


_EMPTY = Depth(0, 0.0)


def _waiting(
    get: Callable[[ForumClient, float | None], Awaitable[list[T]]], wait: float, client: ForumClient
) -> Awaitable[list[T]]:
    return get(client, wait)


async def _release_each(client: ForumClient, ids: list[EntryId]) -> list[bool]:
    return [await client.release(entry_id) for entry_id in ids]


def _checked(body: ClusterMapBody, secret: str | None) -> ClusterMap:
    """The map a node answered, its signature checked when ``secret`` is given."""
    document = {"epoch": body.epoch, "slots": body.slots, "groups": [
        {"id": g.id, "members": g.members, "weight": g.weight, "state": g.state}
        for g in body.groups
    ]}  # fmt: skip
    cluster = ClusterMap.from_document(document, "the node's cluster map")
    if secret is not None and (
        body.signature is None or not hmac.compare_digest(body.signature, cluster.signature(secret))
    ):
        raise ClusterMapError("the node's cluster map is not signed with this cluster's secret")
    return cluster


__all__ = ["SLOTS", "ClusterClient"]
