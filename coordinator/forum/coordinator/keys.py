"""The Lens's whole Redis key schema, and every TTL, in one place.

Every key lives under a namespace (``forum:lens`` by default) so several
Forum deployments can share one Redis database. ``<key>`` below is a claim
key: an entry id's text form (``origin:seq``) or a user's idempotency key.

The namespace is split into ``S`` **shards** (``LensConfig.shards``, default
16). A claim key's shard is ``crc32(<key> as UTF-8) mod S``, and every key of
shard ``s`` starts with the hash tag ``{<ns>:<s>}`` (``<tag>`` below). Redis
Cluster puts all keys with one hash tag in one slot, so every key a script
touches (the job's keys, its shard's fence, in-flight zset and epoch marker)
lives in one slot, on one master; a single Redis ignores the tags. ``S`` is
fixed for a namespace's life: it decides where every key lives, so each
epoch marker records it and a Lens with another ``S`` refuses the namespace.

=================================  ======  =====================================  ==============
key                                type    holds                                  expires
=================================  ======  =====================================  ==============
``<tag>:epoch``                    string  the shard's state marker: ``<random    never
                                           id> <created, unix s> <S>``, written
                                           once (``SET NX``)
``<tag>:fence``                    string  the last fencing token issued for a    never
                                           key in the shard
``<tag>:claim:<key>``              string  the live claim's fencing token         lease (``PX``)
``<tag>:done:<key>``               string  the token that completed ``<key>``     the retention
                                           (an integer: Redis keeps it in the     (``forget_after``
                                           key's object, no extra allocation)     + ``DONE_MARGIN``)
``<tag>:job:<key>``                hash    the in-flight record: ``token``,       never; deleted by
                                           ``owner``, ``attempt``, ``since``      complete, release,
                                           (Redis TIME ms) of the claim,          the reaper, or the
                                           ``payload`` (bytes to re-offer),       next claim/cancel
                                           ``grab``, ``handed``                   after a lapse, or
                                                                                  a cancel
``<tag>:inflight``                 zset    member ``<key>``, score = when its     never
                                           record is due for re-offer (Redis
                                           ``TIME``, milliseconds)
``<tag>:counts``                   hash    what the shard's scripts caught, for   never
                                           the dashboard (forum.coordinator
                                           .tallies): ``double_takes``,
                                           ``claims_lost``, ``reoffered``
``<tag>:task:<key>``               hash    the job record (forum.coordinator.records):  the writer's
                                           str fields -> bytes, ``token`` (the    ``ttl``, from its
                                           writer's), ``cancelled`` (the token    last write
                                           of a cancel)
``<tag>:history:<key>``            list    the last ``HISTORY_LENGTH`` events     ``history_ttl``
                                           of the key: ``<ms> <event> <token>     (an hour) from its
                                           <attempt> <owner>``, oldest first      last event; none
                                                                                  when 0
``<tag>:limit:running:<limit>``    zset    the jobs admitted under a limit of     a lease past its
                                           most running (forum.coordinator        last admission
                                           .limits): member a claim key, score    or extension
                                           its slot's expiry (Redis TIME ms)
``<tag>:limit:rate:<limit>``       string  a rate limit's next turn (Redis TIME   a second past it
                                           us)
``<tag>:attempts:<key>``           hash    the job's attempts once one failed:    the retention
                                           ``next`` (the next attempt's number),  from the last
                                           ``due`` (Redis TIME ms before which    failure; deleted
                                           it is not granted; ``-1``: buried, no  by complete
                                           more), ``revived`` (the dead letter
                                           it was requeued from, or empty)
=================================  ======  =====================================  ==============

Why these lifetimes, and why per shard:

* The fence never expires and is never reset: a fencing token must be larger
  than every token issued before it *for the same key*, across connections
  and Redis restarts. That is all fencing needs (a store compares the tokens
  of one key's holders), so one fence per shard is enough, and a key always
  maps to the same shard. A token is not a plain ``INCR`` but ``max(last +
  1, Redis TIME in microseconds)``: while Redis keeps the fence it is one
  more than the last, and when Redis forgets the fence (a restart without
  persistence, a ``FLUSHALL``, a promoted replica that lagged) the clock
  still lies above every token issued before, as long as fewer than a
  million claims a second ran the counter ahead of the clock and the clock
  was not set back past the last token (docs/coordination.md, "A Redis that
  forgets"). Tokens of different shards are not ordered with each other.
  Tokens are about 1.8e15 now and stay below 2^53 (about 9.0e15) until the
  year 2255, so they are exact in a Lua number, a JSON number or any double.
* The epoch markers never expire: they are how a Lens tells that Redis forgot
  its keys. One per shard, so that under Redis Cluster a master that lost
  its data is detected for the shards it held. Each Lens remembers the
  markers it saw and every script checks its shard's; a marker gone or
  changed raises ``LensStateLost`` once (forum.coordinator.lens).
* A claim expires with its lease so that a dead holder's key frees itself.
* A done marker must outlive every re-delivery of the job: a copy that
  arrives after the marker expired runs again. A copy can only come from a
  node that holds the job's Write and not its Take. A node in touch with the
  cluster receives the Take within its replication lag; one cut off or down
  receives it when it is back, and until then every other node keeps the
  Take for it (compaction waits for every member) for at most
  ``forget_after`` (the node setting, a day by default). A member away
  longer is forgotten; when it returns, its recheck kills its stale copies
  (docs/replication.md, "Dead ranges and rechecks"). Re-offers add a lease
  or two. So the marker lives ``forget_after + DONE_MARGIN`` by default
  (``LensConfig.retention``), not a fixed week, and a Lens refuses a
  ``done_ttl`` shorter than ``forget_after``. It is the only per-job key
  that stays: an integer token under the key, about 150 bytes of Redis
  memory (bench/lens_bytes_bench.py), the least that turns a copy away and
  still says which claim completed the job (``AlreadyDone.token``, a
  repeated ``complete``, a cancel's token in the task layer).
* An in-flight record has no TTL: it is the only copy of a claimed job, so it
  must stay until it is completed, released, or written back to the space.
* A job record lives as long as its writer says (the task layer's
  ``result_ttl``): it is what is known about the job, not the job, and every
  fenced write renews it. Cancelling gives one without a TTL the retention.
* A history lives ``history_ttl`` (an hour by default) after its last
  event, apart from the done marker: it tells people how a key ran (the
  dashboard, ``forum jobs``), while the marker is what turns a copy away,
  and at 357 bytes for a job claimed once it costs 2.4 times the
  marker. ``history_ttl = 0`` writes none. Either way the marker alone
  turns copies away, for its whole retention. It is capped at
  ``HISTORY_LENGTH`` events so a job retried forever cannot
  grow it without bound; the events are pushed by the scripts that end a
  claim (complete, release, hand_back; claim and cancel for a lapsed one),
  reaped and cancel, so reading it never disagrees with the state and
  writing it costs no round trip (lua/prelude.lua).

* An attempts record exists only for a job one of whose attempts failed
  (a job that succeeds first time costs nothing more). It lives as long
  as a done marker (``LensConfig.retention``) from the last failure, for
  the same reason: a copy of the job may arrive on another node until
  then, and must be counted as the attempt the record says (or turned away
  when the job was buried). Completing the job deletes it: the done marker
  turns copies away from then on.

A limit's keys are not in the shard of their own name but in the shard of
their ask's group (:meth:`KeySchema.limit`: the task's), so that every limit
of one job (the task's and its limit key's) is admitted by one script, all or
none (forum.coordinator.limits). A dead worker leaks no slot: its members
expire with its lease.

Two modules keep records beside the Lens's, under shard 0's hash tag, and
document their keys where they are written: worker presence
(``{<ns>:0}:workers:<owner>``, forum.coordinator.presence) and the cluster's
directory (``{<ns>:0}:dir:<queue>``, ``{<ns>:0}:dir-lease:<group>`` and
``{<ns>:0}:dir-keepers``: each replica group's backlog per queue, published
by the workers, forum.coordinator.directory).

The unsharded schema before this one kept ``<ns>:epoch``, ``<ns>:fence``,
``<ns>:inflight`` and ``<ns>:claim:<key>`` and so on, with no hash tag. This
Lens does not read those keys: it refuses a namespace whose old marker
``<ns>:epoch`` (:attr:`KeySchema.legacy_epoch`) is still there
(docs/coordination.md, "Upgrading from the unsharded schema").
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

#: Prefix of every Lens key.
DEFAULT_NAMESPACE = "forum:lens"

#: How many shards a new namespace is split into (see above). More shards
#: spread a namespace over more Cluster masters; each costs the reaper one
#: script per pass and a Lens one marker read at start.
DEFAULT_SHARDS = 16
MAX_SHARDS = 1024

#: How long a done marker outlives ``forget_after`` by default (seconds): the
#: time a member that came back within ``forget_after`` takes to receive the
#: Takes it missed, and the re-offers of a lease or two, with room to spare.
DONE_MARGIN = 3600.0

#: How long a key's history outlives its last event by default (seconds).
HISTORY_TTL = 3600.0

#: How many events a key's history keeps (the last ones); the same number is
#: ``HISTORY_LENGTH`` in ``lua/prelude.lua`` (a test checks they agree).
HISTORY_LENGTH = 50

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


#: The roles of the keys there is one of per shard, and one of per claim key
#: (:meth:`KeySchema.keys_for`; each is also a method of that name).
_PER_SHARD = frozenset({"epoch", "fence", "inflight", "counts"})
_PER_KEY = frozenset({"claim", "done", "job", "task", "history", "attempts"})
#: The role whose keys are placed by a group (:meth:`KeySchema.limit`), not by their own name.
_PER_GROUP = frozenset({"limit"})


@dataclass(frozen=True, slots=True)
class KeySchema:
    """Builds every Redis key the Lens touches."""

    namespace: str = DEFAULT_NAMESPACE
    #: How many shards the namespace is split into; fixed for its life.
    shards: int = DEFAULT_SHARDS

    def __post_init__(self) -> None:
        if not self.namespace:
            raise ValueError("the Lens namespace must not be empty")
        if "{" in self.namespace or "}" in self.namespace:
            # A brace would move the hash tag, and with it every key's slot.
            raise ValueError(f"the Lens namespace must not contain braces: {self.namespace!r}")
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ValueError(f"shards must be between 1 and {MAX_SHARDS}, not {self.shards}")

    def shard(self, key: str) -> int:
        """The shard claim ``key`` lives in: stable across processes and versions."""
        return zlib.crc32(key.encode()) % self.shards

    def tag(self, shard: int) -> str:
        """The hash tag every key of ``shard`` starts with: one Cluster slot."""
        return f"{{{self.namespace}:{shard}}}"

    def epoch(self, shard: int) -> str:
        return f"{self.tag(shard)}:epoch"

    def fence(self, shard: int) -> str:
        return f"{self.tag(shard)}:fence"

    def counts(self, shard: int) -> str:
        return f"{self.tag(shard)}:counts"

    def inflight(self, shard: int) -> str:
        return f"{self.tag(shard)}:inflight"

    def claim(self, key: str) -> str:
        return self.keys_for(("claim",), self.shard(key), key)[0]

    def done(self, key: str) -> str:
        return self.keys_for(("done",), self.shard(key), key)[0]

    def job(self, key: str) -> str:
        return self.keys_for(("job",), self.shard(key), key)[0]

    def task(self, key: str) -> str:
        return self.keys_for(("task",), self.shard(key), key)[0]

    def history(self, key: str) -> str:
        return self.keys_for(("history",), self.shard(key), key)[0]

    def attempts(self, key: str) -> str:
        return self.keys_for(("attempts",), self.shard(key), key)[0]

    def limit_shard(self, group: str) -> int:
        """The shard of the limits of ``group`` (forum.coordinator.limits)."""
        return self.shard(group)

    def limit(self, group: str, bound: str) -> str:
        """The key of a limit's ``bound`` (``running:<limit>`` or
        ``rate:<limit>``), in ``group``'s shard."""
        return self.keys_for(("limit",), self.limit_shard(group), bound)[0]

    def claim_key_of(self, redis_key: str, role: str) -> str | None:
        """The claim key in ``redis_key`` if it is this namespace's
        ``<tag>:<role>:<key>`` for a per-key ``role``, else ``None`` (what
        a SCAN over a pattern must still check: a glob cannot tell this
        namespace's tags from a longer namespace's)."""
        prefix, sep, rest = redis_key.partition(f"}}:{role}:")
        if not sep or not rest or not prefix.startswith(f"{{{self.namespace}:"):
            return None
        shard = prefix[len(self.namespace) + 2 :]
        if not shard.isdigit() or int(shard) >= self.shards or self.shard(rest) != int(shard):
            return None
        return rest

    def scan_pattern(self, role: str) -> str:
        """A SCAN ``MATCH`` glob over every ``<tag>:<role>:<key>`` of the
        namespace (with others to drop: :meth:`claim_key_of`)."""
        escaped = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.namespace)
        return f"{{{escaped}:*}}:{role}:*"

    @property
    def legacy_epoch(self) -> str:
        """The unsharded schema's epoch marker: its presence means old keys."""
        return f"{self.namespace}:epoch"

    def keys_for(self, roles: tuple[str, ...], shard: int, key: str | None = None) -> list[str]:
        """The keys playing ``roles`` (method names above) in ``shard``, in
        order, for claim ``key`` (which must live in ``shard``) where a role
        is per key: a script's ``KEYS``. Each is ``<tag>:<role>``, or
        ``<tag>:<role>:<key>`` for a per-key role, as the table above says."""
        if key is not None and self.shard(key) != shard and not _PER_GROUP.issuperset(roles):
            raise ValueError(f"claim key {key!r} is in shard {self.shard(key)}, not {shard}")
        tag = self.tag(shard)
        found = []
        for role in roles:
            if role in _PER_SHARD:
                found.append(f"{tag}:{role}")
            elif role in _PER_KEY | _PER_GROUP and key is not None:
                found.append(f"{tag}:{role}:{key}")
            else:
                raise ValueError(f"no Lens key {role!r} for claim key {key!r}")
        return found
