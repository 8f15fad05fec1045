"""The Lens's connection to Redis (:class:`LensConnection`): the client and
its settings, the scripts, the epoch markers every script checks (the module
docstring of forum.coordinator.lens tells what they catch), and the Lens's
errors for what Redis answers. :class:`forum.coordinator.lens_records.LensRecords`
and :class:`forum.coordinator.lens.Lens` build on it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from forum.coordinator import keys
from forum.coordinator.authority import HeldClaim
from forum.coordinator.claim import Claim
from forum.coordinator.durability import DURABLE, shortfalls
from forum.coordinator.errors import LensError, LensStateLost, LensUnavailable
from forum.coordinator.failures import translate
from forum.coordinator.redis_url import RedisTarget, close, redacted
from forum.coordinator.scripts import Call, Scripts, Wait, ms
from forum.coordinator.settings import LensConfig
from forum.node.core.cancellation import keep_cancellation
from forum.node.core.resource import AsyncResource

#: The Lens's logger, whichever of its modules logs.
log = logging.getLogger("forum.coordinator.lens")

#: The first word of the error reply of a script that found the epoch marker
#: gone or changed (``epoch_lost()`` in ``lua/prelude.lua``).
_STATE_REPLY = "LENSSTATE"


class LensConnection(AsyncResource):
    """A Lens's Redis, scripts and epoch markers. An async context manager;
    ``aclose()`` ends it."""

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
            wait = Wait(config.wait_replicas, ms(config.wait_timeout), config.wait_aof)
        self._scripts = Scripts(self._redis, self._keys, wait)
        #: A done marker's TTL, and a history's (0: no history), as the scripts take them.
        self._done_ms = ms(config.retention)
        self._history_ms = ms(config.history_ttl) if config.history_ttl else 0
        #: The holder's clock (a :class:`Claim`'s lease ends by it).
        self.clock: Callable[[], float] = time.monotonic

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
                for setting in DURABLE:
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
            warnings += shortfalls(name, found)
        return warnings

    def _own(self, claim: HeldClaim) -> Claim:
        if not isinstance(claim, Claim) or not claim.granted_by(self):
            raise TypeError(f"{claim!r} was not granted by this Lens")
        return claim

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
                raise translate(reply) from reply
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
            # Every shard new, on a Lens that lost nothing: a first start on
            # this Redis, which is normal (INFO). Some shards kept and others
            # not, or a Lens that has met a loss: Redis forgot (a WARNING; the
            # loss itself was logged as an ERROR by the call that met it).
            first = len(started) == shards and not self._state_losses
            log.log(
                logging.INFO if first else logging.WARNING,
                "Lens: no state in Redis %s (namespace %r) for %d of %d shards: started "
                "epoch %s. %s",
                self._where, self._keys.namespace, len(started), shards,
                " / ".join(repr(epoch) for epoch in sorted(set(started))),
                "A first start on this Redis (or one that lost every key of the Lens)"
                if first else "Redis lost the Lens's keys",
            )  # fmt: skip
        return epochs

    async def _call(self, request: Any) -> Any:
        # redis-py sends under asyncio.wait_for, which on Python 3.11 can lose
        # a cancellation (forum.node.core.cancellation): every Lens call keeps it.
        try:
            return await keep_cancellation(request)
        except (redis_errors.RedisError, redis_errors.RedisClusterException, OSError) as exc:
            raise translate(exc) from exc

    def _error(self, exc: Exception, shard: int, epoch: str) -> LensError:
        """The Lens's error for ``exc``, met by a call sent to ``shard`` with ``epoch``."""
        words = str(exc).split(" ", 2) if isinstance(exc, redis_errors.ResponseError) else []
        if words[:1] != [_STATE_REPLY]:
            return translate(exc)
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
