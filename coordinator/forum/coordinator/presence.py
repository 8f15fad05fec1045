"""Worker presence: each running Worker's small record in the Lens's Redis,
so that a dashboard (or anyone) can list the workers and what they count.

A worker writes its record on every heartbeat (each third of a lease, its
*beat interval*), in one command (a ``MULTI`` of ``HSET``, ``PEXPIRE`` and
the index's ``ZADD``), whatever it runs: one write per beat per worker,
never per job. The record expires :data:`TTL_LEASES` leases after the last
beat, so a worker that died leaves at most that long; a clean stop deletes
it. A worker is alive while its last beat is at most :data:`DEAD_AFTER_BEATS`
beat intervals old, dead after (:meth:`WorkerPresence.alive`): one late beat
is a busy event loop, two a worker gone. A dead worker's claims and its
reservations on the node run out at its lease's end (a lease after its last
beat, which extended both): its jobs are live on the node again, offered to
the next worker, whose claim takes over (:func:`awaiting`).

The workers are listed from an index, never by ``SCAN`` (which walks the
whole keyspace, the Lens's claims and records included): a sorted set of
owners scored by their last beat, kept by the beat itself, which also trims
the members whose records have expired (:data:`TTL_LEASES` leases without a
beat). A worker of a version before the index writes no member, so is not
listed until it is upgraded.

Besides its running jobs' claim keys it names, by their payloads' first
:data:`HEAD` bytes, the jobs it runs (``heads``) and the retries it holds
parked until their backoff is over (``retrying``; forum.coordinator.holding
``Parked``): enough for a dashboard to count them per group of payloads
(docs/dashboard.md, Prefixes), at most :data:`MAX_HEADS` of each, base64,
one a line, so a record stays small (some 45 KiB at most for both).

=================================  ======  ===============================  ============
key                                type    holds                            expires
=================================  ======  ===============================  ============
``{<ns>:0}:workers:<owner>``       hash    :data:`FIELDS` (text values)     4 leases
``{<ns>:0}:workers``               zset    member an owner, score its last  never; its
                                           beat (Unix seconds)              members trimmed
=================================  ======  ===============================  ============

The key carries shard 0's hash tag (forum.coordinator.keys): it belongs to no job,
so any one slot does, and under Redis Cluster one tag keeps the index and the
records in one slot. Presence is advice for people, not part of any
guarantee: a failed write is logged and the next beat tries again, and a
reader may see a worker that stopped a moment ago.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from redis import exceptions as redis_errors

from forum.coordinator.errors import LensUnavailable
from forum.coordinator.keys import KeySchema
from forum.coordinator.lens import Lens, LensConfig
from forum.coordinator.redis_url import RedisClient, RedisTarget, close
from forum.node.core.cancellation import keep_cancellation

if TYPE_CHECKING:
    from forum.coordinator.stats import WorkerStats

log = logging.getLogger(__name__)

#: A record outlives its worker's last beat by this many leases.
TTL_LEASES = 4
#: A worker beats each this fraction of its lease (forum.coordinator.keeping).
BEATS_PER_LEASE = 3
#: A worker is dead once its last beat is older than this many beat intervals.
DEAD_AFTER_BEATS = 2
#: The longest a stopping worker waits to delete its record (it expires anyway).
_CLEAR_WITHIN = 1.0
#: The WorkerStats counters a record carries.
COUNTERS = ("done", "retried", "dead", "double_takes", "claims_lost", "reoffered")
#: How many bytes of a job's payload a record keeps (a group of payloads is
#: told apart within them), and the most payloads it names of each kind.
HEAD = 64
MAX_HEADS = 256


def workers_key(schema: KeySchema, owner: str) -> str:
    """The presence record of worker ``owner``."""
    return f"{schema.tag(0)}:workers:{owner}"


def index_key(schema: KeySchema) -> str:
    """The index of the workers: owners scored by their last beat."""
    return f"{schema.tag(0)}:workers"


@dataclass(frozen=True, slots=True)
class WorkerPresence:
    """One worker as its last beat described it. Times are Unix seconds."""

    owner: str
    slots: int
    running: int
    #: The claim keys of the jobs running at the beat.
    keys: tuple[str, ...]
    started: float
    last_beat: float
    lease: float
    #: The node the worker reserves from (``""`` when it did not say).
    node: str
    lens_reachable: bool
    done: int = 0
    retried: int = 0
    dead: int = 0
    double_takes: int = 0
    claims_lost: int = 0
    reoffered: int = 0
    #: The first :data:`HEAD` bytes of the payload of each job running at
    #: the beat (at most :data:`MAX_HEADS`).
    heads: tuple[bytes, ...] = ()
    #: The same of each retry parked until its backoff is over.
    retrying: tuple[bytes, ...] = ()

    @property
    def interval(self) -> float:
        """Seconds between two of its beats."""
        return self.lease / BEATS_PER_LEASE

    def alive(self, now: float | None = None) -> bool:
        """Whether it is alive: a beat within the last :data:`DEAD_AFTER_BEATS`
        intervals (else dead)."""
        now = time.time() if now is None else now
        return now - self.last_beat <= DEAD_AFTER_BEATS * self.interval

    @property
    def lease_end(self) -> float:
        """When the claims it held at its last beat run out unless it beats
        again (each beat extends them by a lease): the earliest their jobs
        are re-offered, should it be dead."""
        return self.last_beat + self.lease

    def fields(self) -> dict[str, str]:
        """The record's fields, as written."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["keys"] = "\n".join(self.keys)
        values["lens_reachable"] = "1" if self.lens_reachable else "0"
        for name in ("heads", "retrying"):
            values[name] = "\n".join(base64.b64encode(head).decode() for head in values[name])
        return {name: str(value) for name, value in values.items()}

    @classmethod
    def parse(cls, record: Mapping[bytes, bytes]) -> WorkerPresence | None:
        """The presence a record holds; ``None`` for one unreadable (a newer
        writer's or a torn one: skipped, it expires by itself)."""
        text = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in record.items()}
        try:
            return cls(
                owner=text["owner"],
                slots=int(text["slots"]),
                running=int(text["running"]),
                keys=tuple(k for k in text.get("keys", "").split("\n") if k),
                started=float(text["started"]),
                last_beat=float(text["last_beat"]),
                lease=float(text["lease"]),
                node=text.get("node", ""),
                lens_reachable=text.get("lens_reachable") == "1",
                **{name: int(text.get(name, "0")) for name in COUNTERS},
                heads=_heads(text.get("heads", "")),
                retrying=_heads(text.get("retrying", "")),
            )
        except (KeyError, ValueError):  # binascii.Error is a ValueError
            return None


class Presence:
    """Writes one worker's record on each beat, and deletes it at the end.

    Made by :meth:`for_lens` for a :class:`~forum.coordinator.lens.Lens` (other
    claim authorities, the in-memory one, have nowhere to write it), with a
    Redis connection of its own to the Lens's Redis: presence never queues
    behind, nor slows, the claims' calls.
    """

    def __init__(self, config: LensConfig, owner: str, slots: int, lease: float, node: str) -> None:
        self._redis = client_for(config)
        schema = KeySchema(config.namespace, config.shards)
        self._key = workers_key(schema, owner)
        self._index = index_key(schema)
        self._owner = owner
        self._slots = slots
        self._lease = lease
        self._node = node
        self._started = time.time()

    @classmethod
    def for_lens(
        cls, authority: object, owner: str, slots: int, lease: float, node: str
    ) -> Presence | None:
        """A presence for a worker of ``authority``; ``None`` if it is no Lens."""
        if not isinstance(authority, Lens):
            return None
        return cls(authority.config, owner, slots, lease, node)

    async def beat(
        self,
        stats: WorkerStats,
        keys: Sequence[str],
        within: float,
        *,
        heads: Iterable[bytes] = (),
        retrying: Iterable[bytes] = (),
    ) -> None:
        """Write the record: one ``MULTI``, given up after ``within`` s (best
        effort: a failure is logged at debug, and the next beat writes it
        again). ``heads`` and ``retrying``: the payloads of the jobs running
        and of the retries parked (cut to :data:`HEAD` bytes, the first
        :data:`MAX_HEADS` of each)."""
        presence = WorkerPresence(
            owner=self._owner, slots=self._slots, running=stats.running, keys=tuple(keys),
            started=self._started, last_beat=time.time(), lease=self._lease, node=self._node,
            lens_reachable=stats.lens_reachable,
            **{name: getattr(stats, name) for name in COUNTERS},
            heads=_cut(heads), retrying=_cut(retrying),
        )  # fmt: skip
        ttl_ms = int(self._lease * TTL_LEASES * 1000) + 1
        try:
            async with asyncio.timeout(within), self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(self._key)  # the keys field shrinks: nothing of an older beat stays
                pipe.hset(self._key, items=[x for pair in presence.fields().items() for x in pair])
                pipe.pexpire(self._key, ttl_ms)
                pipe.zadd(self._index, {self._owner: presence.last_beat})
                # Members whose records expired: dead for good, out of the listing.
                pipe.zremrangebyscore(self._index, "-inf", f"({presence.last_beat - ttl_ms / 1000}")
                await keep_cancellation(pipe.execute())
        except (redis_errors.RedisError, OSError, TimeoutError) as exc:
            log.debug("presence of %s not written (%s)", self._owner, exc or "timed out")

    async def aclose(self) -> None:
        """Delete the record (a clean stop; best effort, it expires anyway)
        and close the connection."""
        try:
            with contextlib.suppress(redis_errors.RedisError, OSError, TimeoutError):
                async with (
                    asyncio.timeout(_CLEAR_WITHIN),  # a stop is not held by a down Redis
                    self._redis.pipeline(transaction=True) as pipe,
                ):
                    pipe.delete(self._key)
                    pipe.zrem(self._index, self._owner)
                    await keep_cancellation(pipe.execute())
        finally:
            await close(self._redis)


def _text(reply: object) -> str:
    """A Redis reply's bytes as text (the connection does not decode)."""
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)


def _cut(payloads: Iterable[bytes]) -> tuple[bytes, ...]:
    return tuple(payload[:HEAD] for payload in itertools.islice(payloads, MAX_HEADS))


def _heads(text: str) -> tuple[bytes, ...]:
    """The payloads' heads of a record's field (``ValueError``: not base64)."""
    return tuple(base64.b64decode(line, validate=True) for line in text.split("\n") if line)


def client_for(config: LensConfig) -> RedisClient:
    """A plain connection to ``config``'s Redis, for the records beside the Lens's own."""
    return RedisTarget.from_url(config.url).client(
        socket_timeout=config.timeout,
        socket_connect_timeout=config.connect_timeout,
        decode_responses=False,
    )


async def list_workers(lens: Lens) -> list[WorkerPresence]:
    """Every worker in ``lens``'s namespace's index whose record is still
    there, by owner: one ``ZRANGE`` and one ``HGETALL`` per worker, in one
    pipelined round trip after the index's, on a connection opened for the
    listing (never a ``SCAN``). :class:`LensUnavailable` when Redis does not
    answer."""
    config = lens.config
    schema = KeySchema(config.namespace, config.shards)
    redis = client_for(config)
    try:
        owners = await keep_cancellation(redis.zrange(index_key(schema), 0, -1))
        records: list[dict[bytes, bytes]] = []
        if owners:
            async with redis.pipeline(transaction=False) as pipe:
                for owner in owners:
                    pipe.hgetall(workers_key(schema, _text(owner)))
                records = await keep_cancellation(pipe.execute())
    except (redis_errors.RedisError, OSError) as exc:
        raise LensUnavailable(f"cannot read the workers' records: {exc}") from exc
    finally:
        await close(redis)
    parsed = (WorkerPresence.parse(r) for r in records if r)
    return sorted((p for p in parsed if p is not None), key=lambda p: p.owner)


@dataclass(frozen=True, slots=True)
class Abandoned:
    """What became of a claim a dead worker held, as the Lens says now."""

    key: str
    #: Seconds its claim's lease still runs (``None``: it ran out).
    left: float | None
    #: Who holds the key's in-flight record now (``""``: nobody, the job
    #: settled): another owner than the dead worker's means its job was
    #: offered again and claimed.
    holder: str

    def awaiting(self, owner: str) -> bool:
        """Whether its job still awaits its re-offer: the dead ``owner``'s
        record stands, no claim took over."""
        return self.holder == owner


async def awaiting(lens: Lens, keys: Collection[str]) -> dict[str, Abandoned]:
    """What became of each of ``keys`` (dead workers' claim keys): one
    ``PTTL`` of its claim and one ``HGET`` of its record's owner each, in
    one pipelined round trip."""
    if not keys:
        return {}
    config = lens.config
    schema = KeySchema(config.namespace, config.shards)
    redis = client_for(config)
    try:
        async with redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.pttl(schema.claim(key))
                pipe.hget(schema.job(key), "owner")
            replies = await keep_cancellation(pipe.execute())
    except (redis_errors.RedisError, OSError) as exc:
        raise LensUnavailable(f"cannot read the dead workers' claims: {exc}") from exc
    finally:
        await close(redis)
    found = {}
    for i, key in enumerate(keys):
        pttl, holder = int(replies[2 * i]), replies[2 * i + 1]
        left = pttl / 1000 if pttl > 0 else None
        found[key] = Abandoned(key, left, "" if holder is None else _text(holder))
    return found
