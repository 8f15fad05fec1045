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

import time
import uuid
from collections.abc import Sequence
from itertools import zip_longest
from typing import Any

from forum.coordinator.authority import Failed, Grab, HeldClaim
from forum.coordinator.claim import CANCELLED, GONE_BEFORE_COMPLETION, TOO_LITTLE_LEFT, Claim
from forum.coordinator.errors import AlreadyClaimed, AlreadyDone, AttemptsSpent, ClaimLost, NotDue
from forum.coordinator.jobindex import LensJobIndex
from forum.coordinator.lens_limits import LensLimits
from forum.coordinator.lens_records import LensRecords
from forum.coordinator.records import attempts_of
from forum.coordinator.scripts import Call, ms
from forum.coordinator.settings import LensConfig

__all__ = ["Claim", "Lens", "LensConfig"]

_CLAIMED, _DONE, _HELD, _NOT_DUE, _SPENT = 1, 2, 3, 4, 5
_NOW, _REPEAT = 1, 2


#: A claim's outcome: granted, or why not.
ClaimOutcome = Claim | AlreadyClaimed | AlreadyDone | NotDue | AttemptsSpent


def _claim_args(
    key: str,
    owner: str,
    lease: float,
    reoffer: bytes | None,
    *,
    attempt: int,
    history_ms: int,
    revived: str | None,
) -> tuple[Any, ...]:
    """claim.lua's ARGV after the key (see its header)."""
    if not key:
        raise ValueError("a claim key must not be empty")
    if lease <= 0:
        raise ValueError("lease must be positive")
    attempts_of(1, [attempt])
    flag = b"0" if reoffer is None else b"1"
    return (ms(lease), owner, flag, reoffer or b"", attempt, history_ms, revived or "")


class Lens(LensRecords, LensLimits, LensJobIndex):
    """Claims on keys, in Redis. An async context manager; ``aclose()`` ends it.

    It grants :class:`Claim` objects and answers for them
    (forum.coordinator.claim, :class:`ClaimIssuer`); what it knows about a
    key is :class:`LensRecords`'s, the limits it keeps :class:`LensLimits`',
    its Redis :class:`LensConnection`'s, the job index it reads
    :class:`LensJobIndex`'s (forum.coordinator.jobindex)."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Lens:
        """``Lens.from_url("redis://host:6379/0", timeout=...)``: options are
        :class:`LensConfig` fields."""
        return cls(LensConfig(url=url, **options))

    @property
    def safety_margin(self) -> float:
        """``LensConfig.safety_margin``: a claim's :attr:`Claim.margin` is at most this."""
        return self._config.safety_margin

    async def claim(
        self,
        key: str,
        owner: str,
        lease: float,
        *,
        reoffer: bytes | None = None,
        attempt: int = 1,
        revived: str | None = None,
    ) -> Claim:
        """Claim ``key`` for ``lease`` seconds, for a delivery that says it is
        ``attempt`` (requeued from dead letter ``revived``, if it was); the
        claim's :attr:`Claim.attempt` is the attempt the Lens counts it as
        (claim.lua).

        Raises :class:`AlreadyDone` if the key was completed,
        :class:`AlreadyClaimed` if another claim on it is live,
        :class:`NotDue` if an attempt failed and the next is not due yet,
        and :class:`AttemptsSpent` if the job was buried. With
        ``reoffer``, those bytes are kept in an in-flight record and written
        back into the space by a reaper should the claim expire (its holder
        died): the job is not lost. The owner, the attempt and the time of
        the claim are kept for :meth:`inspect`, and pushed to the key's
        :meth:`history`.
        """
        started = time.monotonic()
        args = _claim_args(
            key, owner, lease, reoffer, attempt=attempt, history_ms=self._history_ms,
            revived=revived,
        )  # fmt: skip
        reply = await self._run("claim", key, *args)
        outcome = self._granted(key, owner, lease, started, reply)
        if isinstance(outcome, Claim):
            return outcome
        raise outcome

    async def claim_many(
        self,
        requests: Sequence[tuple[str, bytes | None]],
        owner: str,
        lease: float,
        attempts: Sequence[int] | None = None,
        revived: Sequence[str | None] | None = None,
    ) -> list[ClaimOutcome]:
        """Claim each ``(key, reoffer)`` as :meth:`claim` does, in one round
        trip, each for its attempt in ``attempts`` (default 1) and its dead
        letter in ``revived`` (default none). Each outcome is the claim, or
        the error :meth:`claim` would have raised; :class:`LensUnavailable`
        is raised for the whole batch."""
        started = time.monotonic()
        history_ms = self._history_ms
        lives = [None] * len(requests) if revived is None else revived
        numbered = zip(requests, attempts_of(len(requests), attempts), lives, strict=True)
        calls = [
            self._keyed(
                "claim",
                key,
                _claim_args(
                    key, owner, lease, offer, attempt=n, history_ms=history_ms, revived=life
                ),
            )
            for (key, offer), n, life in numbered
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
        outcomes: list[ClaimLost | None] = [claim.lost() for claim in own]
        open_ = [i for i, lost in enumerate(outcomes) if lost is None]
        args = (self._done_ms, self._history_ms)
        calls = [self._keyed("complete", own[i].key, (own[i].token, *args)) for i in open_]
        for i, reply in zip(open_, await self._send(calls), strict=True):
            outcomes[i] = self._completed(own[i], reply)
        return outcomes

    async def extend_many(self, claims: Sequence[HeldClaim]) -> list[ClaimLost | None]:
        """Extend each claim by its current lease, as :meth:`Claim.extend` does,
        in one round trip (a worker's heartbeat for all its running jobs)."""
        own = [self._own(claim) for claim in claims]
        outcomes: list[ClaimLost | None] = [claim.lost() for claim in own]
        open_ = [i for i, lost in enumerate(outcomes) if lost is None]
        started = time.monotonic()
        calls = [self._keyed("extend", own[i].key, (own[i].token, ms(own[i].lease)))
                 for i in open_]  # fmt: skip
        for i, reply in zip(open_, await self._send(calls), strict=True):
            outcomes[i] = self._extended(own[i], reply, own[i].lease, started)
        return outcomes

    async def cancelled_many(self, claims: Sequence[HeldClaim]) -> list[bool]:
        """Whether each claim's key was cancelled under it (its done marker a
        cancel's: cancelled.lua), in one round trip: the worker's watch. A claim found
        so is ended here (its operations raise ``ClaimLost``, "cancelled"),
        also one a refused call (a progress record, say) ended first."""
        own = [self._own(claim) for claim in claims]
        open_ = [claim for claim in own if claim.ended != CANCELLED]
        if not open_:
            return [False] * len(own)
        replies = await self._send([self._keyed("cancelled", c.key, (c.token,)) for c in open_])
        for claim, reply in zip(open_, replies, strict=True):
            if reply == 1:
                claim.refused(CANCELLED)
        return [claim.ended == CANCELLED for claim in own]

    def _granted(
        self, key: str, owner: str, lease: float, started: float, reply: Any
    ) -> ClaimOutcome:
        code, value = reply[0], reply[1]
        if code == _DONE:
            return AlreadyDone(key, int(value))
        if code == _NOT_DUE:
            return NotDue(key, int(value) / 1000, int(reply[2]))
        if code == _SPENT:
            return AttemptsSpent(key, int(value))
        if code == _HELD:
            # PTTL is -1 for a claim key without an expiry (never written so).
            remaining = int(reply[2]) / 1000 if int(reply[2]) >= 0 else None
            return AlreadyClaimed(key, value.decode() or None, remaining)
        token = int(value)
        self._highest_token = max(self._highest_token, token)
        return Claim(
            self, key=key, owner=owner, token=token, lease=lease, deadline=started + lease,
            attempt=int(reply[2]), lapsed=reply[3] == 1,
        )  # fmt: skip

    # -- a Claim's operations (forum.coordinator.claim, ClaimIssuer) ---------------------

    async def verify_claim(self, claim: Claim) -> None:
        """:meth:`Claim.verify`'s question to Redis: is ``claim`` live, for how long?"""
        started = time.monotonic()
        pttl = int(await self._run("verify", claim.key, claim.token))
        if pttl < 0:
            raise claim.refused()
        # Redis's count of what is left, from before we asked, may be the tighter.
        claim.shorten(started + pttl / 1000)
        if claim.remaining() < claim.margin:
            raise ClaimLost(claim.key, claim.token, TOO_LITTLE_LEFT)

    async def extend_claim(self, claim: Claim, lease: float) -> None:
        """Renew ``claim``'s lease in Redis (:meth:`Claim.extend`)."""
        started = time.monotonic()
        reply = await self._run("extend", claim.key, claim.token, ms(lease))
        lost = self._extended(claim, reply, lease, started)
        if lost is not None:
            raise lost

    async def complete_claim(self, claim: Claim) -> None:
        """Leave ``claim``'s done marker in Redis (:meth:`Claim.complete`)."""
        token = claim.token
        reply = await self._run("complete", claim.key, token, self._done_ms, self._history_ms)
        lost = self._completed(claim, reply)
        if lost is not None:
            raise lost

    async def release_claim(self, claim: Claim, failed: Failed | None) -> None:
        """Give ``claim``'s key back in Redis (:meth:`Claim.release`); after a
        failed attempt, the job's attempts record says what comes next."""
        after: tuple[Any, ...] = (0, 0, "")
        if failed is not None:
            due = -1 if failed.delay is None else max(0, round(failed.delay * 1000))
            after = (claim.attempt + 1, due, failed.revived or "")
        args = (claim.token, self._history_ms, self._done_ms, *after)
        if not await self._run("release", claim.key, *args):
            raise claim.refused()
        claim.end("released")

    async def hand_back_claim(self, claim: Claim, payload: bytes, delay: float) -> None:
        """Give ``claim``'s key back with ``payload`` to re-offer after ``delay``
        seconds, in one script (:meth:`Claim.hand_back`)."""
        delay_ms = max(0, round(delay * 1000))
        result = await self._run(
            "hand_back", claim.key, claim.token, delay_ms, payload, self._history_ms
        )
        if result not in (_NOW, _REPEAT):
            raise claim.refused()
        claim.end("handed back")

    def _extended(self, claim: Claim, reply: Any, lease: float, started: float) -> ClaimLost | None:
        """Apply extend.lua's reply to ``claim``; the error if it was refused."""
        if claim.ended is not None:
            # Completed or handed back while the extension was in flight.
            return claim.lost()
        if not reply:
            return claim.refused()
        claim.renew(lease, started + lease)
        return None

    def _completed(self, claim: Claim, reply: Any) -> ClaimLost | None:
        """Apply complete.lua's reply to ``claim``; the error if it was refused."""
        if reply not in (_NOW, _REPEAT):
            return claim.refused(GONE_BEFORE_COMPLETION)
        claim.end("completed")
        return None

    # -- the reaper's side ---------------------------------------------------------------

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
        reply = await self._run("grab", key, ms(self._config.reaper_lease), grab_id)
        if reply[0] != 1:
            return None
        return Grab(key=key, grab_id=grab_id, payload=bytes(reply[1]))

    async def reaped(self, grab: Grab) -> bool:
        """Drop a grabbed record once its payload is back in the space. ``False``
        if the key was claimed again meanwhile (the record is the new claim's)."""
        return bool(await self._run("reaped", grab.key, grab.grab_id, self._history_ms))
