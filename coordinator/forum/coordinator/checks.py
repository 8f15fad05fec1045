"""The last history check of ``forum cluster demo``, kept in the Lens's Redis
so that a dashboard on any node can show it (docs/dashboard.md, Guarantees).

=================================  ======  ================================  =======
key                                type    holds                             expires
=================================  ======  ================================  =======
``{<ns>:0}:checks:demo``           hash    ``verdict`` (the checker's one    never;
                                           line), ``valid`` (1 or 0),        the next
                                           ``at`` (Unix s)                   run's
=================================  ======  ================================  =======

Shard 0's hash tag, as the workers' records (forum.coordinator.presence): it
belongs to no job. It is a report for people, not part of any guarantee.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from redis import exceptions as redis_errors

from forum.coordinator.errors import LensUnavailable
from forum.coordinator.keys import KeySchema
from forum.coordinator.presence import client_for
from forum.coordinator.redis_url import close
from forum.coordinator.settings import LensConfig
from forum.node.core.cancellation import keep_cancellation


def check_key(config: LensConfig) -> str:
    return f"{KeySchema(config.namespace, config.shards).tag(0)}:checks:demo"


@dataclass(frozen=True, slots=True)
class CheckVerdict:
    """One run's verdict: its line, whether the history held, when (Unix s)."""

    line: str
    valid: bool
    at: float


async def store_check(config: LensConfig, line: str, valid: bool) -> None:
    """Keep ``line`` as the last check's verdict (replacing the one before)."""
    redis = client_for(config)
    fields = {"verdict": line, "valid": "1" if valid else "0", "at": repr(time.time())}
    try:
        items = [x for pair in fields.items() for x in pair]
        await keep_cancellation(redis.hset(check_key(config), items=items))
    except (redis_errors.RedisError, OSError) as exc:
        raise LensUnavailable(f"cannot keep the check's verdict: {exc}") from exc
    finally:
        await close(redis)


async def last_check(config: LensConfig) -> CheckVerdict | None:
    """The last check kept, or ``None`` when none ran against this Redis."""
    redis = client_for(config)
    try:
        found = await keep_cancellation(redis.hgetall(check_key(config)))
    except (redis_errors.RedisError, OSError) as exc:
        raise LensUnavailable(f"cannot read the check's verdict: {exc}") from exc
    finally:
        await close(redis)
    if not found:
        return None
    text = {_text(k): _text(v) for k, v in found.items()}
    try:
        return CheckVerdict(text["verdict"], text.get("valid") == "1", float(text["at"]))
    except (KeyError, ValueError):
        return None


def _text(raw: bytes | str) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw
