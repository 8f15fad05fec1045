"""The Lens's Lua scripts, loaded from ``coordinator/lua`` and bound to a client.

Each ``lua/<name>.lua`` documents its ``KEYS``, ``ARGV`` and return value in
its header; :data:`KEY_ROLES` lists the same ``KEYS`` here, so the two are
read side by side. Every script about one claim key takes that key as
``ARGV[1]`` (it is the member of the in-flight zset). ``lua/prelude.lua``
(server time, effects replication, the state check) is prepended to each
script.

Every script but ``epoch`` first checks the Lens's state marker, at no extra
round trip: its last ``KEYS`` entry is ``<ns>:epoch`` and its last ``ARGV``
the epoch the calling Lens saw (the caller appends it); when they differ, the
script changes nothing and answers the error ``LENSSTATE gone`` or
``LENSSTATE changed <marker>`` (see ``lua/prelude.lua``).

Scripts run through redis-py's ``register_script``: ``EVALSHA``, then
``SCRIPT LOAD`` and a retry when the server answers ``NOSCRIPT`` (after a
restart or a ``SCRIPT FLUSH``). :meth:`Scripts.run_many` sends many calls in
one pipeline (one round trip, and one AOF fsync on the server for all of
them); calls that met ``NOSCRIPT`` are sent again after the load.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib.resources import files
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from coordinator.keys import KeySchema

#: Each script's KEYS, in the order of its header, as :class:`KeySchema` roles.
KEY_ROLES: dict[str, tuple[str, ...]] = {
    "claim": ("claim", "done", "fence", "job", "inflight", "epoch"),
    "complete": ("claim", "done", "job", "inflight", "epoch"),
    "due": ("inflight", "epoch"),
    "epoch": ("epoch",),
    "extend": ("claim", "inflight", "epoch"),
    "grab": ("claim", "done", "job", "inflight", "epoch"),
    "hand_back": ("claim", "job", "inflight", "epoch"),
    "reaped": ("claim", "job", "inflight", "epoch"),
    "release": ("claim", "job", "inflight", "epoch"),
    "verify": ("claim", "epoch"),
}


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script ``name``: the prelude, then the script."""
    if name not in KEY_ROLES:
        raise ValueError(f"no Lens script named {name!r}")
    lua = files("coordinator.lua")
    return lua.joinpath("prelude.lua").read_text() + "\n" + lua.joinpath(f"{name}.lua").read_text()


class Scripts:
    """Every Lens script, registered on one client, for one key schema."""

    def __init__(self, client: Redis, schema: KeySchema) -> None:
        # register_script sends nothing: a script is loaded when it first runs.
        self._bound = {name: client.register_script(source(name)) for name in KEY_ROLES}
        self._client = client
        self._schema = schema

    async def run(self, name: str, key: str | None, *args: Any) -> Any:
        """Run script ``name``, about claim ``key`` (``None`` for scripts about
        no one key), with the rest of its ``ARGV``."""
        script: AsyncScript = self._bound[name]
        script_keys, argv = self._arguments(name, key, args)
        return await script(keys=script_keys, args=argv)

    async def run_many(self, calls: Sequence[tuple[str, str, tuple[Any, ...]]]) -> list[Any]:
        """Run ``(name, key, args)`` calls in one pipeline; their replies in order.
        A reply may be an exception (a script's error reply); the caller decides."""
        replies: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for _ in range(2):  # the second round only re-sends calls that met NOSCRIPT
            # No MULTI: each script is atomic by itself, and the batch need not be.
            async with self._client.pipeline(transaction=False) as pipe:
                for i in todo:
                    name, key, args = calls[i]
                    script_keys, argv = self._arguments(name, key, args)
                    pipe.evalsha(self._bound[name].sha, len(script_keys), *script_keys, *argv)
                results = await pipe.execute(raise_on_error=False)
            for i, result in zip(todo, results, strict=True):
                replies[i] = result
            todo = [i for i in todo if isinstance(replies[i], NoScriptError)]
            for name in {calls[i][0] for i in todo}:
                await self._client.script_load(self._bound[name].script)
            if not todo:
                break
        return replies

    def _arguments(
        self, name: str, key: str | None, args: Sequence[Any]
    ) -> tuple[list[str], list[Any]]:
        if key is None:
            return [self._schema.resolve(role) for role in KEY_ROLES[name]], list(args)
        return [self._schema.resolve(role, key) for role in KEY_ROLES[name]], [key, *args]
