"""The Lens: claims on keys in Redis, with fencing tokens and done markers.

::

    async with Lens.from_url("redis://127.0.0.1:6379/0") as lens:
        claim = await lens.claim(key, owner="worker-a", lease=30)
        await claim.verify()       # right before the irreversible step
        await claim.complete()     # leaves a done marker: duplicates get AlreadyDone

Every operation is one Lua script (see ``coordinator/lua``), so it is atomic
and safe to repeat after a lost reply. A fencing token is
``max(last + 1, Redis TIME in microseconds)``, from the fence of the key's
shard (forum.coordinator.keys): strictly increasing for each key, across every
connection, across restarts with ``appendonly yes`` and ``appendfsync
always``, and still above every earlier token when Redis forgot the counter
(a ``FLUSHALL``, a restart without persistence), unless Redis's clock went
back past the last token.

The URL names one Redis (``redis://``), a primary found through Sentinel
(``redis+sentinel://host:port,.../name``) or a Redis Cluster
(``redis+cluster://host:port,...``, forum.coordinator.redis_url): every script's
keys are in one shard, so in one slot, and the same code runs on all.

A Redis that forgets is also detected. The first Lens to meet a Redis writes
an epoch marker in every shard (``{<ns>:<s>}:epoch``, ``SET NX``); each Lens
remembers the markers it saw and passes the shard's to every script, which
checks it before anything else (no extra round trip). When a marker is gone
or changed (a whole Redis, or one Cluster master, lost its data)::

    t0  Lens A claims k1 (epoch E1)          Redis is flushed / restarted empty
    t1  A claims k2 with E1  -> LensStateLost, logged as an error, counted once
    t2  A claims k2          -> A adopts (or creates) epoch E2; token above t0's
    t3  A completes k1       -> ClaimLost (k1's claim went with the old state)

Calls already in flight with E1 at t1 raise ``LensStateLost`` too, but the
loss is logged and counted once per Lens.

Two clocks, each used where it is safe:

* Lease expiry in Redis (the claim's ``PX`` and the in-flight record's due
  time) is Redis's own clock, so workers' clocks do not matter.
* The holder's idea of its lease starts *before* it sent the request
  (``time.monotonic()``), so it always ends no later than Redis's.
  ``verify()`` refuses locally when less than the safety margin is left, then
  asks Redis, which must also report at least the margin.

Timeline of the race the Lens catches (two nodes took the same tuple before
the Take replicated)::

    t0  node A: worker A takes job 7        node B: worker B takes job 7
    t1  worker A claims "a:7"  -> token 41
    t2                                      worker B claims "a:7" -> AlreadyClaimed
                                            (B counts a double take, runs nothing)
    t3  worker A verifies, charges the card, completes -> done marker
    t4                                      (had B been slower, after t3:
                                             claim -> AlreadyDone)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from forum.coordinator import keys
from forum.coordinator.authority import Grab, HeldClaim
from forum.coordinator.errors import (
    AlreadyClaimed,
    AlreadyDone,
    ClaimLost,
    LensError,
    LensStateLost,
    LensUnavailable,
    UnavailableReason,
)
from forum.coordinator.records import (
    CancelOutcome,
    FieldValue,
    HistoryEvent,
    Holder,
    KeyState,
    NewRecord,
    ScanKind,
    attempts_of,
    checked_ttl,
    encode_fields,
    pack_fields,
    pack_records,
    parse_event,
    with_live_claim,
)
from forum.coordinator.redis_url import DEFAULT_REDIS_URL, RedisTarget, close, redacted
from forum.coordinator.scripts import Call, ReplicasBehind, Scripts, Wait
from forum.node.config.node import FORGET_AFTER
from forum.node.core.cancellation import keep_cancellation
from forum.node.core.resource import AsyncResource

#: Redis error replies that mean "not now" rather than "never", and what each
#: says of the Lens (forum.coordinator.errors, UNAVAILABLE): a server out of memory
#: (maxmemory with noeviction), a replica after a failover, an AOF or snapshot
#: write that failed, too few replicas, a shard without a master, a server
#: still loading its AOF, a busy script, credentials or commands refused.
_UNAVAILABLE_REPLIES: dict[str, UnavailableReason] = {
    "OOM": "full",
    "READONLY": "read-only",
    "MISCONF": "read-only",
    "NOREPLICAS": "replicas behind",
    "MASTERDOWN": "master down",
    "CLUSTERDOWN": "master down",
    "TRYAGAIN": "master down",
    "LOADING": "loading",
    "BUSY": "busy",
    "NOAUTH": "refused",
    "WRONGPASS": "refused",
    "NOPERM": "refused",
}

#: redis-py's own classes for some of those replies (it strips the reply's
#: first word from their messages), and for refusals it makes itself. The
#: first that matches decides: a MasterDownError is a ClusterDownError, a
#: BusyLoadingError and an AuthenticationError are ConnectionErrors.
_UNAVAILABLE_CLASSES: tuple[tuple[type[Exception], UnavailableReason], ...] = (
    (ReplicasBehind, "replicas behind"),
    (redis_errors.OutOfMemoryError, "full"),
    (redis_errors.ReadOnlyError, "read-only"),
    (redis_errors.ClusterDownError, "master down"),
    (redis_errors.TryAgainError, "master down"),
    (redis_errors.SlotNotCoveredError, "master down"),
    (redis_errors.BusyLoadingError, "loading"),
    (redis_errors.AuthenticationError, "refused"),
    (redis_errors.AuthorizationError, "refused"),
    (redis_errors.NoPermissionError, "refused"),
    (redis_errors.ConnectionError, "unreachable"),
    (redis_errors.TimeoutError, "unreachable"),
    (redis_errors.RedisClusterException, "unreachable"),
    (OSError, "unreachable"),
)

log = logging.getLogger(__name__)

#: The first word of the error reply of a script that found the epoch marker
#: gone or changed (``epoch_lost()`` in ``lua/prelude.lua``).
_STATE_REPLY = "LENSSTATE"

_CLAIMED, _DONE, _HELD = 1, 2, 3
_NOW, _REPEAT = 1, 2
_CANCELLED, _CANCEL_REFUSED = 1, 2

#: What durability() reads, and what each must be for the guarantees to hold:
#: a completion or claim acknowledged is on disk (or within a second of it),
#: and Redis never evicts a claim, a done marker or a fence to make room.
_DURABLE: dict[str, tuple[str, ...]] = {
    "appendonly": ("yes",),
    "appendfsync": ("always", "everysec"),
    "maxmemory-policy": ("noeviction",),
}


def _claim_args(
    key: str, owner: str, lease: float, reoffer: bytes | None, *, attempt: int, history_ms: int
) -> tuple[Any, ...]:
    """claim.lua's ARGV after the key (see its header)."""
    if not key:
        raise ValueError("a claim key must not be empty")
    if lease <= 0:
        raise ValueError("lease must be positive")
    attempts_of(1, [attempt])
    flag = b"0" if reoffer is None else b"1"
    return (_ms(lease), owner, flag, reoffer or b"", attempt, history_ms)


def _shortfalls(name: str, found: Mapping[Any, Any]) -> list[str]:
    """durability()'s lines for one server's ``CONFIG GET`` answers."""
    text = {_text(k): _text(v) for k, v in found.items()}
    lines = []
    for setting, good in _DURABLE.items():
        value = text.get(setting)
        if value is not None and value not in good:
            lines.append(
                f"Redis {name} has {setting} {value!r}, not {' or '.join(good)}: " + _WHY[setting]
            )
    return lines


#: Why each setting of _DURABLE matters, for the warning's second half.
_WHY = {
    "appendonly": "a restart forgets every claim and done marker (finished jobs may run again)",
    "appendfsync": "a crash may forget acknowledged claims and completions",
    "maxmemory-policy": "Redis may evict claims and done markers when full (jobs run twice)",
}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _hash(flat: Sequence[Any]) -> dict[str, bytes]:
    """A script's ``HGETALL`` reply (field, value, ...) as a mapping."""
    return {
        bytes(flat[i]).decode(errors="replace"): bytes(flat[i + 1]) for i in range(0, len(flat), 2)
    }


def _ms(seconds: float) -> int:
    # Redis wants whole milliseconds; never round a positive duration to 0,
    # which PX refuses and PEXPIRE treats as "delete now".
    return max(1, round(seconds * 1000))


@dataclass(frozen=True, slots=True)
class LensConfig:
    """Where the Lens's Redis is and how the Lens behaves. Times in seconds."""

    url: str = DEFAULT_REDIS_URL
    namespace: str = keys.DEFAULT_NAMESPACE
    #: The cluster's ``forget_after`` (the node setting; the largest of its
    #: nodes'): how long a member cut off can still hold a copy of a job the
    #: others completed. The done markers' default retention follows it.
    forget_after: float = FORGET_AFTER
    #: How long a done marker turns copies away; ``None``: ``forget_after +
    #: keys.DONE_MARGIN`` (:attr:`retention`). Never below ``forget_after``.
    done_ttl: float | None = None
    #: How long a key's claim history is kept after its last event; 0 keeps
    #: none (the done marker alone turns copies away either way).
    history_ttl: float = keys.HISTORY_TTL
    #: How long a reaper's grab of an abandoned record lasts.
    reaper_lease: float = keys.REAPER_LEASE
    #: verify() refuses with less than min(safety_margin, lease * MARGIN_FRACTION) left.
    safety_margin: float = keys.SAFETY_MARGIN
    #: Longest wait for one Redis reply; past it the call raises LensUnavailable.
    timeout: float = 2.0
    #: Longest wait for a TCP connection to Redis.
    connect_timeout: float = 1.0
    #: How many shards the namespace is split into (forum.coordinator.keys). Fixed
    #: for the namespace's life: a Lens with another count refuses it.
    shards: int = keys.DEFAULT_SHARDS
    #: After each batch that writes, ``WAIT`` until this many replicas of each
    #: master it wrote to hold the writes; 0: do not wait. A batch that
    #: reaches fewer within ``wait_timeout`` raises LensUnavailable (fail
    #: closed): what it claimed is not held by the caller and expires with
    #: its lease (docs/operations.md, "Redis topologies").
    wait_replicas: int = 0
    #: The longest ``WAIT``; shorter than ``timeout``, which bounds the reply.
    wait_timeout: float = 0.5
    #: Wait with ``WAITAOF`` instead: each batch's writes fsynced to the
    #: master's AOF and to ``wait_replicas`` replicas' AOFs. Needs Redis 7.2
    #: or newer (and ``appendonly yes``); an older one is refused at first use.
    wait_aof: bool = False

    def __post_init__(self) -> None:
        RedisTarget.from_url(self.url)
        keys.KeySchema(self.namespace, self.shards)
        for name in ("forget_after", "reaper_lease", "timeout", "connect_timeout", "wait_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.done_ttl is not None and self.done_ttl < self.forget_after:
            raise ValueError(
                f"done_ttl ({self.done_ttl:g} s) must not be shorter than forget_after "
                f"({self.forget_after:g} s): a member cut off that long may still offer "
                "a completed job, which would run again"
            )
        if self.history_ttl < 0:
            raise ValueError("history_ttl must not be negative")
        if self.safety_margin < 0:
            raise ValueError("safety_margin must not be negative")
        if self.wait_replicas < 0:
            raise ValueError("wait_replicas must not be negative")
        if (self.wait_replicas or self.wait_aof) and self.wait_timeout >= self.timeout:
            raise ValueError("wait_timeout must be shorter than timeout")

    @property
    def retention(self) -> float:
        """Seconds a done marker lives: ``done_ttl``, else ``forget_after +
        keys.DONE_MARGIN`` (why: forum.coordinator.keys)."""
        return self.forget_after + keys.DONE_MARGIN if self.done_ttl is None else self.done_ttl


class Claim:
    """One granted claim. ``key``, ``owner`` and ``token`` never change; the
    lease deadline moves with ``extend``, and the claim ends (locally, after
    Redis confirmed) with ``complete``, ``release`` or ``hand_back``.

    Not a frozen dataclass because its lease deadline and end state change.
    """

    __slots__ = ("_deadline", "_ended", "_key", "_lease", "_lens", "_owner", "_token")

    def __init__(
        self, lens: Lens, *, key: str, owner: str, token: int, lease: float, deadline: float
    ) -> None:
        self._lens = lens
        self._key = key
        self._owner = owner
        self._token = token
        self._lease = lease
        self._deadline = deadline
        self._ended: str | None = None

    @property
    def key(self) -> str:
        return self._key

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def token(self) -> int:
        """The fencing token: larger than every token issued before this claim."""
        return self._token

    @property
    def lease(self) -> float:
        return self._lease

    def __repr__(self) -> str:
        state = self._ended or f"{self.remaining():.3f}s left"
        return f"<Claim {self.key!r} token={self._token} owner={self._owner!r} {state}>"

    def remaining(self) -> float:
        """Seconds of lease left, measured from before the request that granted
        or last extended it (so never more than Redis thinks)."""
        return self._deadline - time.monotonic()

    @property
    def margin(self) -> float:
        """``verify()`` refuses with less than this many seconds of lease left."""
        config = self._lens.config
        return min(config.safety_margin, self._lease * keys.MARGIN_FRACTION)

    async def verify(self) -> None:
        """Raise :class:`ClaimLost` unless this claim holds its key for at
        least the safety margin longer. Call it right before irreversible work."""
        self._check_open()
        if self.remaining() < self.margin:
            raise ClaimLost(self.key, self._token, "less than the safety margin of lease left")
        started = time.monotonic()
        pttl = int(await self._lens._run("verify", self.key, self._token))
        if pttl < 0:
            self._ended = "expired, released or taken over"
            raise ClaimLost(self.key, self._token, self._ended)
        # Redis's count of what is left, from before we asked, may be the tighter.
        self._deadline = min(self._deadline, started + pttl / 1000)
        if self.remaining() < self.margin:
            raise ClaimLost(self.key, self._token, "less than the safety margin of lease left")

    async def extend(self, lease: float | None = None) -> None:
        """Renew the lease for ``lease`` seconds (default: the current lease)
        from now; :class:`ClaimLost` if this claim no longer holds the key."""
        self._check_open()
        lease = self._lease if lease is None else lease
        if lease <= 0:
            raise ValueError("lease must be positive")
        started = time.monotonic()
        reply = await self._lens._run("extend", self.key, self._token, _ms(lease))
        lost = self._extended(reply, lease, started)
        if lost is not None:
            raise lost

    def _extended(self, reply: Any, lease: float, started: float) -> ClaimLost | None:
        """Apply extend.lua's reply to this claim; the error if it was refused."""
        if self._ended is not None:
            # Completed or handed back while the extension was in flight.
            return self._lost()
        if not reply:
            self._ended = "expired, released or taken over"
            return ClaimLost(self.key, self._token, self._ended)
        self._lease = lease
        self._deadline = started + lease
        return None

    async def complete(self) -> None:
        """Finish: leave a done marker; :class:`ClaimLost` for a stale holder."""
        self._check_open()
        lens = self._lens
        reply = await lens._run("complete", self.key, self._token, lens._done_ms, lens._history_ms)
        lost = self._completed(reply)
        if lost is not None:
            raise lost

    def _completed(self, reply: Any) -> ClaimLost | None:
        """Apply complete.lua's reply to this claim; the error if it was refused."""
        if reply not in (_NOW, _REPEAT):
            self._ended = "expired, released or taken over before completion"
            return ClaimLost(self.key, self._token, self._ended)
        self._ended = "completed"
        return None

    async def release(self) -> None:
        """Give the key back without completing it. Nothing is re-offered: use
        :meth:`hand_back` when the job must run again."""
        self._check_open()
        history_ms = self._lens._history_ms
        if not await self._lens._run("release", self.key, self._token, history_ms):
            self._ended = "expired, released or taken over"
            raise ClaimLost(self.key, self._token, self._ended)
        self._ended = "released"

    async def hand_back(self, payload: bytes, delay: float = 0.0) -> None:
        """Give the key back and have a reaper write ``payload`` into the space
        after ``delay`` seconds, in one step: the job is never in neither place."""
        self._check_open()
        if delay < 0:
            raise ValueError("delay must not be negative")
        delay_ms = max(0, round(delay * 1000))
        history_ms = self._lens._history_ms
        result = await self._lens._run(
            "hand_back", self.key, self._token, delay_ms, payload, history_ms
        )
        if result not in (_NOW, _REPEAT):
            self._ended = "expired, released or taken over"
            raise ClaimLost(self.key, self._token, self._ended)
        self._ended = "handed back"

    def _check_open(self) -> None:
        lost = self._lost()
        if lost is not None:
            raise lost

    def _lost(self) -> ClaimLost | None:
        """Why this claim has ended here, if it has."""
        return None if self._ended is None else ClaimLost(self.key, self._token, self._ended)


class Lens(AsyncResource):
    """Claims on keys, in Redis. An async context manager; ``aclose()`` ends it."""

    def __init__(self, config: LensConfig) -> None:
        self._config = config
        self._keys = keys.KeySchema(config.namespace, config.shards)
        target = RedisTarget.from_url(config.url)
        #: The Redis, for logs and errors: the URL without its password.
        self._where = redacted(config.url)
        #: The epoch marker this Lens saw last in each shard; ``None`` until
        #: the first script call reads (or creates) them, and again right
        #: after a loss in any shard (the next call reads them all again).
        self._epochs: dict[int, str] | None = None
        #: The one read of every marker in progress, shared by all callers.
        self._reading: asyncio.Future[dict[int, str]] | None = None
        self._schema_checked = False
        self._state_losses = 0
        #: The largest token this Lens granted: logged at a loss, so an operator
        #: can check that Redis's clock is past it (docs/coordination.md).
        self._highest_token = 0
        options: dict[str, Any] = {
            "socket_timeout": config.timeout,
            "socket_connect_timeout": config.connect_timeout,
            # Fail fast and let the caller decide: a retry inside redis-py
            # would stretch "Redis is down" into a hang. One exception: a
            # pooled connection that Redis closed (it restarted) is retried
            # once on a new connection, at once; a down Redis refuses that
            # one as fast. (Timeouts are not retried.)
            "retry": Retry(NoBackoff(), 1, supported_errors=(redis_errors.ConnectionError,)),
            "decode_responses": False,
        }
        if not target.cluster:
            options["retry_on_timeout"] = False  # a cluster client has no such switch
        self._redis = target.client(**options)
        wait = None
        if config.wait_replicas or config.wait_aof:
            wait = Wait(config.wait_replicas, _ms(config.wait_timeout), config.wait_aof)
        self._scripts = Scripts(self._redis, self._keys, wait)
        #: A done marker's TTL, and a history's (0: no history), as the scripts take them.
        self._done_ms = _ms(config.retention)
        self._history_ms = _ms(config.history_ttl) if config.history_ttl else 0

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Lens:
        """``Lens.from_url("redis://host:6379/0", lease_margin=...)``: options are
        :class:`LensConfig` fields."""
        return cls(LensConfig(url=url, **options))

    @property
    def config(self) -> LensConfig:
        return self._config

    @property
    def keys(self) -> keys.KeySchema:
        return self._keys

    @property
    def state_losses(self) -> int:
        """How many times this Lens found that Redis had lost its state (each
        loss counted once, however many calls raised :class:`LensStateLost`)."""
        return self._state_losses

    async def aclose(self) -> None:
        """Close the connections to Redis (ending a read of the markers that
        every caller gave up on)."""
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, LensError):
                await self._reading
        await self._scripts.aclose()
        await close(self._redis)

    async def ping(self) -> None:
        """Return when every shard of this Lens takes a write now;
        :class:`LensUnavailable`, with its reason, when one does not (full,
        read-only, without a master, unreachable, refusing), :class:`LensError`
        if Redis cannot serve this configuration (``wait_aof`` on a Redis
        older than 7.2, a namespace in an older schema).

        A ``PING`` is not enough: a full Redis (``maxmemory`` with
        ``noeviction``) answers it and refuses every claim, and under Cluster
        any live master answers it while the master of the shard that failed
        is down. So each shard is sent a write that changes nothing,
        ``SETRANGE <tag>:epoch 0 ""`` (an empty range: the marker is left as
        it is, and no key is made where there is none), all in one pipeline,
        each routed like the shard's scripts, to the master that owns the
        shard. Redis refuses it as it refuses any write: ``OOM`` when full,
        ``READONLY`` on a replica, ``CLUSTERDOWN``, or no connection at all.
        (A Redis ACL must allow ``SETRANGE`` on the Lens's keys.)
        """
        async with self._redis.pipeline(transaction=False) as pipe:
            for shard in range(self._keys.shards):
                pipe.setrange(self._keys.epoch(shard), 0, b"")
            await self._call(pipe.execute())
        await self._check_schema()

    async def claim(
        self,
        key: str,
        owner: str,
        lease: float,
        *,
        reoffer: bytes | None = None,
        attempt: int = 1,
    ) -> Claim:
        """Claim ``key`` for ``lease`` seconds, for delivery ``attempt``.

        Raises :class:`AlreadyDone` if the key was completed, and
        :class:`AlreadyClaimed` if another claim on it is live. With
        ``reoffer``, those bytes are kept in an in-flight record and written
        back into the space by a reaper should the claim expire (its holder
        died): the job is not lost. The owner, the attempt and the time of
        the claim are kept for :meth:`inspect`, and pushed to the key's
        :meth:`history`.
        """
        started = time.monotonic()
        args = _claim_args(key, owner, lease, reoffer, attempt=attempt, history_ms=self._history_ms)
        reply = await self._run("claim", key, *args)
        outcome = self._granted(key, owner, lease, started, reply)
        if isinstance(outcome, LensError):
            raise outcome
        return outcome

    async def claim_many(
        self,
        requests: Sequence[tuple[str, bytes | None]],
        owner: str,
        lease: float,
        attempts: Sequence[int] | None = None,
    ) -> list[Claim | AlreadyClaimed | AlreadyDone]:
        """Claim each ``(key, reoffer)`` as :meth:`claim` does, in one round
        trip, each for its attempt in ``attempts`` (default 1). Each outcome
        is the claim, or the error :meth:`claim` would have raised;
        :class:`LensUnavailable` is raised for the whole batch."""
        started = time.monotonic()
        history_ms = self._history_ms
        numbered = zip(requests, attempts_of(len(requests), attempts), strict=True)
        calls = [
            self._keyed(
                "claim",
                key,
                _claim_args(key, owner, lease, offer, attempt=n, history_ms=history_ms),
            )
            for (key, offer), n in numbered
        ]
        replies = await self._send(calls)
        return [
            self._granted(key, owner, lease, started, reply)
            for (key, _), reply in zip(requests, replies, strict=True)
        ]

    async def complete_many(self, claims: Sequence[HeldClaim]) -> list[ClaimLost | None]:
        """Complete each claim as :meth:`Claim.complete` does, in one round trip.
        Each outcome is ``None`` (completed) or the :class:`ClaimLost` it would
        have raised; :class:`LensUnavailable` is raised for the whole batch."""
        own = [self._own(claim) for claim in claims]
        outcomes: list[ClaimLost | None] = [claim._lost() for claim in own]
        open_ = [i for i, lost in enumerate(outcomes) if lost is None]
        args = (self._done_ms, self._history_ms)
        calls = [self._keyed("complete", own[i].key, (own[i].token, *args)) for i in open_]
        for i, reply in zip(open_, await self._send(calls), strict=True):
            outcomes[i] = own[i]._completed(reply)
        return outcomes

    async def extend_many(self, claims: Sequence[HeldClaim]) -> list[ClaimLost | None]:
        """Extend each claim by its current lease, as :meth:`Claim.extend` does,
        in one round trip (a worker's heartbeat for all its running jobs)."""
        own = [self._own(claim) for claim in claims]
        outcomes: list[ClaimLost | None] = [claim._lost() for claim in own]
        open_ = [i for i, lost in enumerate(outcomes) if lost is None]
        started = time.monotonic()
        calls = [self._keyed("extend", own[i].key, (own[i].token, _ms(own[i].lease)))
                 for i in open_]  # fmt: skip
        for i, reply in zip(open_, await self._send(calls), strict=True):
            outcomes[i] = own[i]._extended(reply, own[i].lease, started)
        return outcomes

    def _granted(
        self, key: str, owner: str, lease: float, started: float, reply: Any
    ) -> Claim | AlreadyClaimed | AlreadyDone:
        code, value = reply[0], reply[1]
        if code == _DONE:
            return AlreadyDone(key, int(value))
        if code == _HELD:
            # PTTL is -1 for a claim key without an expiry (never written so).
            remaining = int(reply[2]) / 1000 if int(reply[2]) >= 0 else None
            return AlreadyClaimed(key, value.decode() or None, remaining)
        token = int(value)
        self._highest_token = max(self._highest_token, token)
        return Claim(self, key=key, owner=owner, token=token, lease=lease, deadline=started + lease)

    def _own(self, claim: HeldClaim) -> Claim:
        if not isinstance(claim, Claim) or claim._lens is not self:
            raise TypeError(f"{claim!r} was not granted by this Lens")
        return claim

    async def done_token(self, key: str) -> int | None:
        """The token that completed ``key``, or ``None`` if it has no done marker."""
        value = await self._call(self._redis.get(self._keys.done(key)))
        return None if value is None else int(value)

    async def due(self, limit: int = 100) -> list[str]:
        """Up to ``limit`` claim keys whose in-flight records are due for
        re-offer, from every shard (one script per shard, one round trip)."""
        calls = [Call("due", shard, None, (limit,)) for shard in range(self._keys.shards)]
        replies = await self._send(calls)
        # Taken in turn from each shard, so one busy shard cannot starve the rest.
        members = (m for group in zip_longest(*replies) for m in group if m is not None)
        return [member.decode() for member in members][:limit]

    async def grab(self, key: str) -> Grab | None:
        """Grab ``key``'s in-flight record if it is abandoned (due, unclaimed,
        not done); ``None`` if another reaper or a new claim got there first."""
        grab_id = uuid.uuid4().hex
        reply = await self._run("grab", key, _ms(self._config.reaper_lease), grab_id)
        if reply[0] != 1:
            return None
        return Grab(key=key, grab_id=grab_id, payload=bytes(reply[1]))

    async def reaped(self, grab: Grab) -> bool:
        """Drop a grabbed record once its payload is back in the space. ``False``
        if the key was claimed again meanwhile (the record is the new claim's)."""
        return bool(await self._run("reaped", grab.key, grab.grab_id, self._history_ms))

    # -- what is known about a key (forum.coordinator.records) --------------------------------

    async def inspect(self, key: str) -> KeyState:
        """``key``'s live claim, done marker and job record, read at once."""
        return _key_state(key, await self._run("inspect", key))

    async def inspect_many(self, keys: Sequence[str]) -> list[KeyState]:
        """:meth:`inspect` of each of ``keys``, in order, in one round trip
        (a listing's page); each key read at once, the keys one after another."""
        if not keys:
            return []
        replies = await self._send([self._keyed("inspect", key, ()) for key in keys])
        return [_key_state(key, reply) for key, reply in zip(keys, replies, strict=True)]

    async def record(self, claim: HeldClaim, fields: Mapping[str, FieldValue], ttl: float) -> None:
        """Write ``fields`` into ``claim``'s key's job record, for ``ttl``
        seconds from now, only while ``claim`` is the key's live claim;
        :class:`ClaimLost` (nothing written) otherwise. Field ``token`` is
        set to the claim's; fields not given are kept, unless the record was
        written under an older token (an earlier attempt's): then it is
        replaced as a whole."""
        own = self._own(claim)
        own._check_open()
        packed = pack_fields(encode_fields(fields, fenced=True))
        if not await self._run("record", own.key, own.token, _ms(checked_ttl(ttl)), packed):
            own._ended = "expired, released or taken over"
            raise ClaimLost(own.key, own.token, f"{own._ended}: its record was not written")

    async def record_enqueued(self, key: str, fields: Mapping[str, FieldValue], ttl: float) -> bool:
        """Write ``key``'s first job record (a producer's, unfenced), for
        ``ttl`` seconds; ``False`` (nothing written) if it has one already."""
        if not key:
            raise ValueError("a claim key must not be empty")
        packed = pack_fields(encode_fields(fields, fenced=False))
        return bool(await self._run("record_new", key, _ms(checked_ttl(ttl)), packed))

    async def record_enqueued_many(self, records: Sequence[NewRecord]) -> list[bool]:
        """:meth:`record_enqueued` of each record, in order: one script per
        shard (its keys share the shard's hash tag), all in one round trip;
        ``False`` for a key that had a record (or came earlier in the batch).
        Bad input (as :meth:`record_enqueued` refuses) writes none of them."""
        shards: dict[int, list[int]] = {}
        packed = []
        for i, new in enumerate(records):
            if not new.key:
                raise ValueError("a claim key must not be empty")
            packed.append((_ms(checked_ttl(new.ttl)), encode_fields(new.fields, fenced=False)))
            shards.setdefault(self._keys.shard(new.key), []).append(i)
        if not records:
            return []
        calls = [
            Call("record_new_many", shard, None, (pack_records([packed[i] for i in batch]),),
                 keys=tuple(records[i].key for i in batch))
            for shard, batch in shards.items()
        ]  # fmt: skip
        written = [False] * len(records)
        for batch, replies in zip(shards.values(), await self._send(calls), strict=True):
            for i, reply in zip(batch, replies, strict=True):
                written[i] = bool(reply)
        return written

    async def forget_record(self, key: str) -> bool:
        """Drop ``key``'s job record (an operator's purge): ``True`` dropped,
        ``False`` there was none. Unfenced, so it refuses while a claim on
        the key is live (:class:`AlreadyClaimed`): the holder's record is
        its own to write, and a job someone runs is not forgotten."""
        if not key:
            raise ValueError("a claim key must not be empty")
        reply = int(await self._run("record_forget", key))
        if reply < 0:
            raise AlreadyClaimed(key, None)
        return bool(reply)

    async def history(self, key: str) -> list[HistoryEvent]:
        """``key``'s claim history, oldest first: the last
        ``keys.HISTORY_LENGTH`` events, kept ``history_ttl`` after the last (none when 0),
        and the live claim's "claimed" (forum.coordinator.records). One round trip;
        the claim is read before the list, so a claim that ends between the
        two reads is in the list (and counted once)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(self._keys.claim(key))
            pipe.hmget(self._keys.job(key), "token", "owner", "attempt", "since")
            pipe.lrange(self._keys.history(key), 0, -1)
            token, (held, owner, attempt, since), lines = await self._call(pipe.execute())
        live = None
        if token is not None and token == held:
            live = Holder(int(token), _text(owner or b""), int(attempt or 0),
                          int(since or 0) / 1000, 0.0)  # fmt: skip
        events = [parse_event(bytes(line)) for line in lines]
        return with_live_claim(events, live, keys.HISTORY_LENGTH)

    async def scan(self, kind: ScanKind, count: int = 100) -> AsyncIterator[str]:
        """Every claim key with a job record (``"task"``) or a live claim
        (``"claim"``), in no order, each once, from every shard and, under
        Cluster, every master: ``SCAN`` in steps of about ``count`` keys,
        never ``KEYS``, so Redis serves others meanwhile. A key written or
        dropped during the scan may be listed or not."""
        if kind not in ("task", "claim"):
            raise ValueError(f"scan lists 'task' or 'claim' keys, not {kind!r}")
        if count < 1:
            raise ValueError("count must be at least 1")
        found = self._redis.scan_iter(match=self._keys.scan_pattern(kind), count=count)
        seen: set[str] = set()
        while True:
            try:
                name = await self._call(anext(found))
            except StopAsyncIteration:
                return
            key = self._keys.claim_key_of(bytes(name).decode(errors="replace"), kind)
            if key is not None and key not in seen:
                seen.add(key)
                yield key

    async def cancel(self, key: str) -> CancelOutcome:
        """Make ``key`` done if nobody holds it (a done marker with a fresh
        token turns every copy of its job away as :class:`AlreadyDone`, and
        ``cancelled`` is pushed to its history); refused while a claim is
        held (``"running"``, with its owner); ``"done"`` if it was already."""
        if not key:
            raise ValueError("a claim key must not be empty")
        reply = await self._run("cancel", key, self._done_ms, self._history_ms)
        code = int(reply[0])
        if code == _CANCELLED:
            token = int(reply[1])
            self._highest_token = max(self._highest_token, token)
            return CancelOutcome("cancelled", token=token)
        if code == _CANCEL_REFUSED:
            owner = bytes(reply[1]).decode(errors="replace") or None
            remaining = int(reply[2]) / 1000 if int(reply[2]) >= 0 else None
            return CancelOutcome("running", owner=owner, remaining=remaining)
        return CancelOutcome("done", token=int(reply[1]))

    async def durability(self) -> list[str]:
        """One line per way the Redis under this Lens falls short of what
        the guarantees rest on (docs/coordination.md, "Redis settings"):
        ``appendonly`` not ``yes``, ``appendfsync`` not ``always`` or
        ``everysec``, ``maxmemory-policy`` not ``noeviction``; on every
        master under Cluster. Empty when all is well; one line saying so if
        Redis refuses ``CONFIG`` (a managed Redis may rename it)."""
        servers: list[tuple[str, Any]] = [(self._where, None)]
        if isinstance(self._redis, RedisCluster):
            servers = [(node.name, node) for node in self._redis.get_primaries()]
        warnings: list[str] = []
        for name, node in servers:
            options = {} if node is None else {"target_nodes": node}
            try:
                found = {}
                for setting in _DURABLE:
                    found.update(await self._call(self._redis.config_get(setting, **options)))
            except LensUnavailable:
                raise
            except LensError as exc:
                warnings.append(
                    f"Redis {name} refuses CONFIG GET ({exc}): cannot check that it keeps "
                    "the Lens's writes (appendonly yes, appendfsync always or everysec, "
                    "maxmemory-policy noeviction)"
                )
                continue
            warnings += _shortfalls(name, found)
        return warnings

    def _keyed(self, name: str, key: str, args: tuple[Any, ...]) -> Call:
        """A call of script ``name`` about claim ``key``, in the key's shard."""
        return Call(name, self._keys.shard(key), key, args)

    async def _run(self, name: str, key: str, *args: Any) -> Any:
        """Run script ``name`` about claim ``key``, with its shard's epoch: one
        ``EVALSHA`` (the path of every single claim and completion)."""
        shard = self._keys.shard(key)
        epoch = (await self._known_epochs())[shard]
        reply = await self._call(self._scripts.run(Call(name, shard, key, (*args, epoch))))
        if isinstance(reply, Exception):
            raise self._error(reply, shard, epoch)
        return reply

    async def _send(self, calls: Sequence[Call]) -> list[Any]:
        """Run ``calls``, each with its shard's epoch, in one pipeline; one
        script's error reply fails the batch, as it fails a single call."""
        epochs = await self._known_epochs()
        checked = [replace(c, args=(*c.args, epochs[c.shard])) for c in calls]
        replies = await self._call(self._scripts.run_many(checked))
        # Every error is looked at, so each shard's loss is noted; the first is raised.
        errors = [
            self._error(reply, call.shard, epochs[call.shard])
            for call, reply in zip(calls, replies, strict=True)
            if isinstance(reply, Exception)
        ]
        if errors:
            raise errors[0]
        return list(replies)

    async def _known_epochs(self) -> dict[int, str]:
        """The epoch marker to send with a script, per shard: the ones this
        Lens saw, else the ones in Redis now, created where Redis has none.

        Read for every shard at once, and once for all concurrent callers:
        they share the one read and its outcome (a caller queueing behind
        another's failed read would wait a timeout per caller while Redis is
        down). Shielded, so one caller's cancellation leaves the others' read.
        """
        if self._epochs is not None:
            return self._epochs
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._check_and_read_epochs())
            self._reading.add_done_callback(self._read_done)
        return await asyncio.shield(self._reading)

    async def _check_and_read_epochs(self) -> dict[int, str]:
        await self._check_schema()
        self._epochs = await self._read_epochs()
        return self._epochs

    def _read_done(self, reading: asyncio.Future[dict[int, str]]) -> None:
        if self._reading is reading:
            self._reading = None
        if not reading.cancelled():
            reading.exception()  # retrieved: every caller that waited got it

    async def _check_schema(self) -> None:
        """Refuse a namespace that an unsharded (older) Lens wrote: its
        in-flight records would never be re-offered (forum.coordinator.keys)."""
        if self._schema_checked:
            return
        if self._config.wait_aof:
            await self._check_waitaof()
        if await self._call(self._redis.exists(self._keys.legacy_epoch)):
            raise LensError(
                f"Redis {self._where} holds Lens namespace {self._keys.namespace!r} in the "
                f"unsharded schema of an older Forum ({self._keys.legacy_epoch} exists): "
                "drain its workers, then delete its keys; see docs/coordination.md, "
                "'Upgrading from the unsharded schema'"
            )
        self._schema_checked = True

    async def _check_waitaof(self) -> None:
        """Refuse ``wait_aof`` on a Redis older than 7.2, which has no ``WAITAOF``."""
        info = await self._call(self._redis.info("server"))
        # One server answers its INFO; a cluster client, a dict of every node's.
        servers = [info] if "redis_version" in info else list(info.values())
        for server in servers:
            version = str(server["redis_version"])
            if tuple(int(part) for part in version.split(".")[:2]) < (7, 2):
                raise LensError(
                    f"LensConfig.wait_aof needs Redis 7.2 or newer (WAITAOF); "
                    f"Redis {self._where} runs {version}"
                )

    async def _read_epochs(self) -> dict[int, str]:
        shards = self._keys.shards
        new = (uuid.uuid4().hex, shards)
        replies = await self._call(
            self._scripts.run_many([Call("epoch", shard, None, new) for shard in range(shards)])
        )
        epochs: dict[int, str] = {}
        started: list[str] = []
        for shard, reply in enumerate(replies):
            if isinstance(reply, Exception):
                raise _translate(reply) from reply
            created, marker = reply
            epoch = bytes(marker).decode()
            found = epoch.rsplit(" ", 1)[-1]
            if found != str(shards):
                raise LensError(
                    f"Lens namespace {self._keys.namespace!r} in Redis {self._where} is split "
                    f"into {found} shards, this Lens into {shards}: the count is fixed for a "
                    "namespace's life (LensConfig.shards)"
                )
            epochs[shard] = epoch
            if created:
                started.append(epoch)
        if started:
            log.warning(
                "Lens: no state in Redis %s (namespace %r) for %d of %d shards: started "
                "epoch %s. Normal for a new Redis; otherwise Redis lost the Lens's keys",
                self._where, self._keys.namespace, len(started), shards,
                " / ".join(repr(epoch) for epoch in sorted(set(started))),
            )  # fmt: skip
        return epochs

    async def _call(self, request: Any) -> Any:
        # redis-py sends under asyncio.wait_for, which on Python 3.11 can lose
        # a cancellation (forum.node.core.cancellation): every Lens call keeps it.
        try:
            return await keep_cancellation(request)
        except (redis_errors.RedisError, redis_errors.RedisClusterException, OSError) as exc:
            raise _translate(exc) from exc

    def _error(self, exc: Exception, shard: int, epoch: str) -> LensError:
        """The Lens's error for ``exc``, met by a call sent to ``shard`` with ``epoch``."""
        words = str(exc).split(" ", 2) if isinstance(exc, redis_errors.ResponseError) else []
        if words[:1] != [_STATE_REPLY]:
            return _translate(exc)
        found = words[2] if words[1:2] == ["changed"] and len(words) == 3 else None
        lost = LensStateLost(self._where, epoch, found)
        if self._epochs is not None and self._epochs.get(shard) == epoch:
            # The first call to meet this loss: log and count it, forget the
            # epochs (the next call reads every shard's marker again, so the
            # shards lost together count as one loss). Calls still in flight
            # with a lost epoch raise, but uncounted.
            self._epochs = None
            self._state_losses += 1
            log.error(
                "Lens: %s. Every claim, done marker and in-flight record in namespace %r "
                "from before is gone: claims granted before are not held, completed jobs "
                "may run again, jobs held only in flight are lost. Fencing tokens still "
                "increase while Redis's clock (TIME, in microseconds) is past %d, the "
                "highest this Lens granted. The next call starts a new epoch. See "
                "docs/coordination.md, 'A Redis that forgets'",
                lost, self._keys.namespace, self._highest_token,
            )  # fmt: skip
        return lost


def _key_state(key: str, reply: Any) -> KeyState:
    """inspect.lua's reply about ``key`` as a :class:`KeyState`."""
    token, pttl, job, done, record = reply
    holder = None
    if token is not None:
        held = _hash(job)
        holder = Holder(
            token=int(token),
            owner=held.get("owner", b"").decode(errors="replace"),
            # 0: a claim by a worker of an older version, which kept no attempt.
            attempt=int(held.get("attempt", b"0")),
            since=int(held.get("since", b"0")) / 1000,
            remaining=max(int(pttl), 0) / 1000,
        )
    return KeyState(key, holder, None if done is None else int(done), _hash(record))


def _translate(exc: Exception) -> LensError:
    """The Lens's error for a Redis client error or error reply: a
    :class:`LensUnavailable` with its reason when Redis cannot serve the Lens
    now (forum.coordinator.errors, UNAVAILABLE), else a :class:`LensError`."""
    reason = _unavailable_reason(exc)
    if reason is None and isinstance(exc, redis_errors.ResponseError):
        return LensError(f"Redis refused a Lens script: {exc}")
    if reason is None:
        return LensError(f"Redis failed a Lens call: {exc}")
    if isinstance(exc, ReplicasBehind):
        return LensUnavailable(f"Redis could not make the Lens's writes durable: {exc}", reason)
    if reason == "unreachable":
        return LensUnavailable(f"Redis unavailable: {exc}", reason)
    return LensUnavailable(f"Redis cannot serve the Lens now ({reason}): {_reply(exc)}", reason)


def _unavailable_reason(exc: Exception) -> UnavailableReason | None:
    """Why ``exc`` says Redis cannot serve the Lens now; ``None`` when it
    says something else (a script's own error, a bad argument)."""
    for kind, reason in _UNAVAILABLE_CLASSES:
        if isinstance(exc, kind):
            return reason
    if isinstance(exc, redis_errors.ResponseError):
        return _UNAVAILABLE_REPLIES.get(_reply(exc).split(" ", 1)[0])
    return None


def _reply(exc: Exception) -> str:
    """The error reply as Redis sent it, its first word included (redis-py
    keeps that word in ``status_code`` and strips it from the message of the
    replies it has a class for)."""
    text = str(exc)
    code = getattr(exc, "status_code", None)
    if code and not text.startswith(code):
        return f"{code} {text}"
    return text
