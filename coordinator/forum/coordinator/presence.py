"""Worker presence: each running Worker's small record in the Lens's Redis,
so that a dashboard (or anyone) can list the workers and what they count.

A worker writes its record on every heartbeat (each third of a lease), in
one command (a ``MULTI`` of ``HSET`` and ``PEXPIRE``), whatever it runs: one
write per beat per worker, never per job. The record expires
:data:`TTL_LEASES` leases after the last beat, so a worker that died leaves
at most that long; a clean stop deletes it.

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
=================================  ======  ===============================  ============

The key carries shard 0's hash tag (forum.coordinator.keys): it belongs to no job,
so any one slot does, and under Redis Cluster one tag keeps a listing's
``SCAN`` pattern exact. Presence is advice for people, not part of any
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
from collections.abc import Iterable, Mapping, Sequence
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


def _pattern(schema: KeySchema) -> str:
    """The SCAN glob of every record (a namespace's glob characters escaped)."""
    tag = schema.tag(0)
    for special in "\\*?[]":
        tag = tag.replace(special, "\\" + special)
    return f"{tag}:workers:*"


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

    def overdue(self, now: float | None = None) -> bool:
        """Whether a beat is late: none for over a lease (it beats each third)."""
        return (time.time() if now is None else now) - self.last_beat > self.lease

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
        self._key = workers_key(KeySchema(config.namespace, config.shards), owner)
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
                await keep_cancellation(pipe.execute())
        except (redis_errors.RedisError, OSError, TimeoutError) as exc:
            log.debug("presence of %s not written (%s)", self._owner, exc or "timed out")

    async def aclose(self) -> None:
        """Delete the record (a clean stop; best effort, it expires anyway)
        and close the connection."""
        try:
            with contextlib.suppress(redis_errors.RedisError, OSError, TimeoutError):
                async with asyncio.timeout(_CLEAR_WITHIN):  # a stop is not held by a down Redis
                    await keep_cancellation(self._redis.delete(self._key))
        finally:
            await close(self._redis)


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
    """Every worker with a live record in ``lens``'s namespace, by owner:
    a ``SCAN``, then one ``HGETALL`` per worker, pipelined, on a connection
    opened for the listing. :class:`LensUnavailable` when Redis does not answer."""
    config = lens.config
    redis = client_for(config)
    try:
        pattern = _pattern(KeySchema(config.namespace, config.shards))
        names = [bytes(n) async for n in redis.scan_iter(match=pattern, count=100)]
        records: list[dict[bytes, bytes]] = []
        if names:
            async with redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hgetall(name)
                records = await keep_cancellation(pipe.execute())
    except (redis_errors.RedisError, OSError) as exc:
        raise LensUnavailable(f"cannot read the workers' records: {exc}") from exc
    finally:
        await close(redis)
    parsed = (WorkerPresence.parse(r) for r in records if r)
    return sorted((p for p in parsed if p is not None), key=lambda p: p.owner)
