"""What the Lens caught, counted cluster-wide where it happens (the tallies).

The Lens's scripts count, in each shard's ``<tag>:counts`` hash
(forum.coordinator.keys), the events a dashboard totals: a worker's own
counts (its presence record, forum.coordinator.presence) start at 0 with
each process and vanish with its record, so summing the live workers'
records undercounts as soon as one dies, which is when these matter most.

=================  ===============  ===========================================
field              counted by       when
=================  ===============  ===========================================
``double_takes``   lua/claim.lua    a copy of a job is refused: done, running
                                    or buried elsewhere (the worker's
                                    ``double_takes``)
``claims_lost``    lua/complete.lua a completion under a token that lost its
                                    claim is refused (a stale holder)
``reoffered``      lua/grab.lua,    a job of a lost worker (its claim's lease
                   lua/claim.lua    ran out) is offered again: a reaper first
                                    grabs its record to write it back, or,
                                    before any reaper, a claim takes over
                                    from it (its reservation ran out on the
                                    node); once per lost claim either way
=================  ===============  ===========================================

Each is one ``HINCRBY`` inside a script that runs anyway, on its refusal or
re-offer path only: a claim granted or a completion accepted writes nothing
more. The counts never expire and only grow (while Redis keeps its data: a
Redis that forgot its state starts them at 0 again, as the Lens's epoch
markers tell). Reading them is one ``HGETALL`` per shard, pipelined.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import exceptions as redis_errors

from forum.coordinator.errors import LensUnavailable
from forum.coordinator.keys import KeySchema
from forum.coordinator.lens import Lens
from forum.coordinator.presence import client_for
from forum.coordinator.redis_url import close
from forum.node.core.cancellation import keep_cancellation

#: The fields of a shard's counts, as :class:`Tallies` names them.
FIELDS = ("double_takes", "claims_lost", "reoffered")


@dataclass(frozen=True, slots=True)
class Tallies:
    """The Lens's counts summed over its shards (see the module docstring)."""

    double_takes: int = 0
    claims_lost: int = 0
    reoffered: int = 0


async def read_tallies(lens: Lens) -> Tallies:
    """``lens``'s counts now; :class:`LensUnavailable` when Redis does not answer."""
    config = lens.config
    schema = KeySchema(config.namespace, config.shards)
    redis = client_for(config)
    try:
        async with redis.pipeline(transaction=False) as pipe:
            for shard in range(schema.shards):
                pipe.hmget(schema.counts(shard), FIELDS)
            replies = await keep_cancellation(pipe.execute())
    except (redis_errors.RedisError, OSError) as exc:
        raise LensUnavailable(f"cannot read the Lens's counts: {exc}") from exc
    finally:
        await close(redis)
    sums = [sum(int(reply[i] or 0) for reply in replies) for i in range(len(FIELDS))]
    return Tallies(*sums)
