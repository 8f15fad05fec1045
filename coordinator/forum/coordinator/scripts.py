"""The Lens's Lua scripts, loaded from ``coordinator/lua`` and bound to a client.

Each ``lua/<name>.lua`` documents its ``KEYS``, ``ARGV`` and return value in
its header; :data:`KEY_ROLES` lists the same ``KEYS`` here, so the two are
read side by side. Every script about one claim key takes that key as
``ARGV[1]`` (it is the member of the in-flight zset). ``lua/prelude.lua``
(server time, effects replication, the state check) is prepended to each
script. Every script runs in one shard (forum.coordinator.keys): all its ``KEYS``
carry the shard's hash tag, so under Redis Cluster they share one slot and
the script is routed to that slot's master by its first key.

Every script but ``epoch`` first checks its shard's state marker, at no extra
round trip: its last ``KEYS`` entry is ``<tag>:epoch`` and its last ``ARGV``
the epoch the calling Lens saw for the shard (the caller appends it); when
they differ, the script changes nothing and answers the error ``LENSSTATE
gone`` or ``LENSSTATE changed <marker>`` (see ``lua/prelude.lua``).

:meth:`Scripts.run_many` sends many calls in one pipeline (one round trip
per server, and one AOF fsync on each for all of them; a cluster pipeline
sends each master its calls at once): ``EVALSHA``, then ``SCRIPT LOAD`` (on
every master, for a cluster) and the calls that met ``NOSCRIPT`` once more
(after a restart, a ``SCRIPT FLUSH``, or a master that never saw the script).
With ``wait`` it ends each server's part of the pipeline with ``WAIT``: the
scripts' writes reached that many replicas, or the batch fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError

from forum.coordinator.keys import KeySchema
from forum.coordinator.redis_url import RedisClient

#: The last KEYS of the scripts that grant or settle a claim: the job's record
#: (the job index), the shard's counts (forum.coordinator.tallies), its marker.
_SETTLING = ("task", "counts", "epoch")

#: Each script's KEYS, in the order of its header, as :class:`KeySchema` roles.
KEY_ROLES: dict[str, tuple[str, ...]] = {
    "admit": ("epoch",),
    "admitted": ("epoch",),
    "cancel": ("claim", "done", "fence", "job", "task", "history", "epoch"),
    "cancelled": ("claim", "done", "task", "epoch"),
    "claim": ("claim", "done", "fence", "job", "inflight", "history", "attempts", *_SETTLING),
    "complete": ("claim", "done", "job", "inflight", "history", "attempts", *_SETTLING),
    "due": ("inflight", "epoch"),
    "epoch": ("epoch",),
    "index_counts": ("epoch",),
    "index_page": ("epoch",),
    "extend": ("claim", "inflight", "epoch"),
    "grab": ("claim", "done", "job", "inflight", "counts", "epoch"),
    "hand_back": ("claim", "job", "inflight", "history", "task", "epoch"),
    "inspect": ("claim", "done", "job", "task", "epoch"),
    "reaped": ("claim", "job", "inflight", "history", "task", "epoch"),
    "requeued": ("task", "epoch"),
    "record": ("claim", "task", "epoch"),
    "record_new": ("task", "epoch"),
    "record_new_many": ("epoch",),
    "record_forget": ("claim", "task", "epoch"),
    "release": ("claim", "job", "inflight", "history", "attempts", "task", "epoch"),
    "verify": ("claim", "epoch"),
}

#: The scripts about many claim keys of one shard (:attr:`Call.keys`): their
#: ``KEYS[1..n]`` are this role's key of each, then the roles of KEY_ROLES.
BATCH_ROLES: dict[str, str] = {"record_new_many": "task", "admit": "limit", "admitted": "limit"}

#: The scripts that only read: a batch of these alone needs no ``WAIT``.
READ_ONLY = frozenset({"cancelled", "due", "index_counts", "inspect", "verify"})


def ms(seconds: float) -> int:
    """A duration as the scripts take it: whole milliseconds, never rounding a
    positive duration to 0, which ``PX`` refuses and ``PEXPIRE`` treats as
    "delete now"."""
    return max(1, round(seconds * 1000))


@dataclass(frozen=True, slots=True)
class Call:
    """One script call: script ``name`` in ``shard``, about claim ``key``
    (``None`` for scripts about no one key), with the rest of its ``ARGV``;
    a batch script (:data:`BATCH_ROLES`) is about the claim ``keys``, all of
    ``shard`` (so its ``KEYS`` share one hash tag: one Cluster slot)."""

    name: str
    shard: int
    key: str | None
    args: tuple[Any, ...]
    keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Wait:
    """How durable a batch's writes must be before it counts: ``WAIT replicas
    timeout`` (that many replicas received them), or with ``aof``, ``WAITAOF
    1 replicas timeout`` (fsynced to the master's AOF and to that many
    replicas' AOFs; Redis 7.2 or newer)."""

    replicas: int
    timeout_ms: int
    aof: bool = False

    @property
    def command(self) -> tuple[str | int, ...]:
        if self.aof:
            return ("WAITAOF", 1, self.replicas, self.timeout_ms)
        return ("WAIT", self.replicas, self.timeout_ms)

    def short(self, reply: Any) -> bool:
        """Whether a reply to :attr:`command` counts too few copies."""
        if self.aof:
            local, replicas = reply
            return int(local) < 1 or int(replicas) < self.replicas
        return int(reply) < self.replicas


class ReplicasBehind(RedisError):
    """A ``WAIT`` saw fewer replicas acknowledge the batch than it asked for."""


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script ``name``: the prelude, then the script."""
    if name not in KEY_ROLES:
        raise ValueError(f"no Lens script named {name!r}")
    lua = files("forum.coordinator.lua")
    return lua.joinpath("prelude.lua").read_text() + "\n" + lua.joinpath(f"{name}.lua").read_text()


class Scripts:
    """Every Lens script, registered on one client, for one key schema."""

    def __init__(self, client: RedisClient, schema: KeySchema, wait: Wait | None = None) -> None:
        # register_script sends nothing: it only computes each script's SHA.
        self._bound = {name: client.register_script(source(name)) for name in KEY_ROLES}
        self._client = client
        self._schema = schema
        self._wait = wait
        #: Single calls in flight, alone or in a pipeline of queued ones.
        self._sending = 0
        #: Single calls waiting for the next turn of the loop (see run()).
        self._queued: list[tuple[Call, asyncio.Future[Any]]] = []
        self._flushes: set[asyncio.Future[None]] = set()

    async def run(self, call: Call) -> Any:
        """Run one call; its reply, which may be an exception (a script's
        error reply) as in :meth:`run_many`.

        A call that finds nothing else in flight goes at once, as one plain
        ``EVALSHA`` (not a pipeline of one: redis-py's pipeline costs a task
        for its shielded release and more Python besides, as much again as
        the command); ``NOSCRIPT`` loads the script and sends it once more.
        Calls that arrive while others are in flight are coalesced: those of
        one turn of the loop go together in one pipeline (:meth:`run_many`:
        one round trip and one AOF fsync for all, and a fraction of the
        client CPU of a command each), as a worker's ``claim_many`` does.
        Each is still its own atomic script, with its own reply. A call whose
        caller is cancelled before its pipeline left is never sent.
        """
        if self._sending:
            return await self._queue(call)
        self._sending += 1
        try:
            if self._wait is not None and call.name not in READ_ONLY:
                # WAIT counts the writes of its connection: a pipeline.
                (reply,) = await self.run_many([call])
                return reply
            return await self._run_alone(call)
        finally:
            self._sending -= 1

    async def _run_alone(self, call: Call) -> Any:
        script = self._bound[call.name]
        arguments = self._arguments(call)
        try:
            return await self._client.execute_command("EVALSHA", script.sha, *arguments)
        except NoScriptError:
            await self._client.script_load(script.script)
        except ResponseError as exc:
            return exc
        try:
            return await self._client.execute_command("EVALSHA", script.sha, *arguments)
        except ResponseError as exc:
            return exc

    async def _queue(self, call: Call) -> Any:
        """Wait for ``call``'s reply from the next pipeline of queued calls."""
        loop = asyncio.get_running_loop()
        if not self._queued:
            loop.call_soon(self._flush)
        future: asyncio.Future[Any] = loop.create_future()
        self._queued.append((call, future))
        # A cancelled caller cancels its future: unsent, it is left out.
        return await future

    def _flush(self) -> None:
        """Send the queued calls whose callers still wait, in one pipeline."""
        batch = [(call, future) for call, future in self._queued if not future.done()]
        self._queued = []
        if batch:
            task = asyncio.ensure_future(self._send(batch))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _send(self, batch: list[tuple[Call, asyncio.Future[Any]]]) -> None:
        self._sending += 1
        try:
            replies = await self.run_many([call for call, _ in batch])
        except Exception as exc:
            self._fail(batch, exc)
            return
        except asyncio.CancelledError:
            self._fail(batch, RedisConnectionError("the Lens was closed with this call in flight"))
            raise
        finally:
            self._sending -= 1
        for (_, future), reply in zip(batch, replies, strict=True):
            if not future.done():
                future.set_result(reply)

    @staticmethod
    def _fail(batch: list[tuple[Call, asyncio.Future[Any]]], exc: Exception) -> None:
        for _, future in batch:
            if not future.done():
                future.set_exception(exc)

    async def aclose(self) -> None:
        """End the pipelines of queued calls still in flight (their callers
        get a connection error)."""
        for task in list(self._flushes):
            task.cancel()
        await asyncio.gather(*self._flushes, return_exceptions=True)

    async def run_many(self, calls: Sequence[Call]) -> list[Any]:
        """Run ``calls`` in one pipeline; their replies in order. A reply may
        be an exception (a script's error reply); the caller decides. Raises
        :class:`ReplicasBehind` when a ``WAIT`` came up short."""
        replies: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for _ in range(2):  # the second round only re-sends calls that met NOSCRIPT
            # No MULTI: each script is atomic by itself, and the batch need not be.
            async with self._client.pipeline(transaction=False) as pipe:
                for i in todo:
                    sha = self._bound[calls[i].name].sha
                    # Not pipe.evalsha(): a cluster pipeline refuses that method
                    # (it cannot load a script for us), yet routes the command
                    # by its first key; NOSCRIPT is handled here.
                    pipe.execute_command("EVALSHA", sha, *self._arguments(calls[i]))
                waits = self._add_waits(pipe, [calls[i] for i in todo])
                results = await pipe.execute(raise_on_error=False)
            for i, result in zip(todo, results, strict=False):
                replies[i] = result
            self._check_waits(results[len(todo) : len(todo) + waits])
            todo = [i for i in todo if isinstance(replies[i], NoScriptError)]
            for name in {calls[i].name for i in todo}:
                await self._client.script_load(self._bound[name].script)
            if not todo:
                break
        return replies

    def _add_waits(self, pipe: Any, calls: Sequence[Call]) -> int:
        """End each server's part of ``pipe`` with a ``WAIT``; how many were added.

        ``WAIT`` counts the writes of the connection it is sent on, so it
        goes into the same pipeline: one connection per server. A cluster
        pipeline sends each master its commands on one connection, so there
        it goes to every master that one of ``calls`` is routed to.
        """
        if self._wait is None or all(call.name in READ_ONLY for call in calls):
            return 0
        command = self._wait.command
        if not isinstance(self._client, RedisCluster):
            pipe.execute_command(*command)
            return 1
        nodes = {}
        for call in calls:
            node = self._client.get_node_from_key(self._schema.epoch(call.shard))
            if node is not None:
                nodes[node.name] = node
        for node in nodes.values():
            pipe.execute_command(*command, target_nodes=node)
        return len(nodes)

    def _check_waits(self, acks: Sequence[Any]) -> None:
        """Raise unless every ``WAIT`` reply in ``acks`` counts enough replicas."""
        wait = self._wait
        for acked in acks:
            if isinstance(acked, Exception):
                raise acked
            if wait is not None and wait.short(acked):
                command = " ".join(map(str, wait.command))
                raise ReplicasBehind(
                    f"{command} answered {acked}: too few copies of the Lens's writes in time"
                )

    def _arguments(self, call: Call) -> list[Any]:
        """``EVALSHA``'s arguments after the SHA: the number of keys, the keys, ARGV."""
        roles = KEY_ROLES[call.name]
        script_keys = self._schema.keys_for(roles, call.shard, call.key)
        if call.name in BATCH_ROLES:
            role = (BATCH_ROLES[call.name],)
            each = [self._schema.keys_for(role, call.shard, key)[0] for key in call.keys]
            script_keys = [*each, *script_keys]
        if call.key is None:
            return [len(script_keys), *script_keys, *call.args]
        return [len(roles), *script_keys, call.key, *call.args]
