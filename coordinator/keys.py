"""The Lens's whole Redis key schema, and every TTL, in one place.

Every key lives under a namespace (``forum:lens`` by default) so several
Forum deployments can share one Redis database. ``<key>`` below is a claim
key: an entry id's text form (``origin:seq``) or a user's idempotency key.

=================================  ======  =====================================  ==============
key                                type    holds                                  expires
=================================  ======  =====================================  ==============
``<ns>:epoch``                     string  the state marker: ``<random id>        never
                                           <created, unix s>``, written once
                                           (``SET NX``)
``<ns>:fence``                     string  the last fencing token issued          never
``<ns>:claim:<key>``               string  the live claim's fencing token         lease (``PX``)
``<ns>:done:<key>``                string  the token that completed ``<key>``     ``done_ttl``
``<ns>:job:<key>``                 hash    the in-flight record: ``token``,       never; deleted by
                                           ``owner``, ``payload`` (bytes to       complete, release
                                           re-offer), ``grab``, ``handed``        or the reaper
``<ns>:inflight``                  zset    member ``<key>``, score = when its     never
                                           record is due for re-offer (Redis
                                           ``TIME``, milliseconds)
=================================  ======  =====================================  ==============

Why these lifetimes:

* The fence never expires and is never reset: a fencing token must be larger
  than every token issued before it, across all keys, connections and Redis
  restarts. So a token is not a plain ``INCR`` but ``max(last + 1, Redis
  TIME in microseconds)``: while Redis keeps the fence it is one more than the
  last, and when Redis forgets the fence (a restart without persistence, a
  ``FLUSHALL``, a promoted replica that lagged) the clock still lies above
  every token issued before, as long as fewer than a million claims a second
  ran the counter ahead of the clock and the clock was not set back past the
  last token (docs/coordination.md, "A Redis that forgets"). Tokens are
  about 1.8e15 now and stay below 2^53 (about 9.0e15) until the year 2255,
  so they are exact in a Lua number, a JSON number or any double.
* The epoch marker never expires: it is how a Lens tells that Redis forgot
  its keys. Each Lens remembers the marker it saw and every script checks it;
  a marker gone or changed raises ``LensStateLost`` once (coordinator.lens).
* A claim expires with its lease so that a dead holder's key frees itself.
* A done marker must outlive every re-delivery of the job: a duplicate that
  arrives after the marker expired would run again. Re-deliveries come from
  double takes across a partition (bounded by how long a partition lasts) and
  from re-offers (bounded by the lease). Seven days covers any partition an
  operator would leave unhealed; raise it if yours can last longer.
* An in-flight record has no TTL: it is the only copy of a claimed job, so it
  must stay until it is completed, released, or written back to the space.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Prefix of every Lens key.
DEFAULT_NAMESPACE = "forum:lens"

#: How long a done marker outlives its job's completion (seconds).
DONE_TTL = 7 * 24 * 3600.0

#: How long a reaper's grab of an in-flight record lasts (seconds): if the
#: reaper dies between grabbing a record and writing the job back, another
#: reaper grabs it again after this long. Longer than a write to the space
#: can take.
REAPER_LEASE = 30.0

#: ``verify()`` refuses when less than this much of the lease remains
#: (seconds), capped at ``MARGIN_FRACTION`` of the lease so short leases stay
#: usable. The margin is the time an irreversible step may take after its
#: ``verify()`` and still run under a live claim.
SAFETY_MARGIN = 1.0
MARGIN_FRACTION = 0.25


@dataclass(frozen=True, slots=True)
class KeySchema:
    """Builds every Redis key the Lens touches."""

    namespace: str = DEFAULT_NAMESPACE

    def __post_init__(self) -> None:
        if not self.namespace:
            raise ValueError("the Lens namespace must not be empty")

    @property
    def epoch(self) -> str:
        return f"{self.namespace}:epoch"

    @property
    def fence(self) -> str:
        return f"{self.namespace}:fence"

    @property
    def inflight(self) -> str:
        return f"{self.namespace}:inflight"

    def claim(self, key: str) -> str:
        return f"{self.namespace}:claim:{key}"

    def done(self, key: str) -> str:
        return f"{self.namespace}:done:{key}"

    def job(self, key: str) -> str:
        return f"{self.namespace}:job:{key}"

    def resolve(self, role: str, key: str | None = None) -> str:
        """The key playing ``role`` (a method or property name above) for claim ``key``."""
        match role, key:
            case "epoch", _:
                return self.epoch
            case "fence", _:
                return self.fence
            case "inflight", _:
                return self.inflight
            case "claim", str():
                return self.claim(key)
            case "done", str():
                return self.done(key)
            case "job", str():
                return self.job(key)
        raise ValueError(f"no Lens key {role!r} for claim key {key!r}")
