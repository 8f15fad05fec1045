"""An in-memory :class:`coordinator.authority.ClaimAuthority`, for tests.

:class:`MemoryAuthority` keeps in one process what the Lens keeps in Redis
(claims, fencing tokens, done markers, in-flight records; coordinator.keys)
and answers as the Lens does, outcome for outcome:
``tests/coordinator/test_authority_contract.py`` runs the same tests against
both. It lets worker logic be tested in milliseconds, and it can fail on
purpose as Redis does:

* ``available = False``: every call raises :class:`LensUnavailable` (an
  outage) until it is set back;
* :meth:`MemoryAuthority.forget`: the state is gone (a ``FLUSHALL``, a restart
  without persistence); the next call raises :class:`LensStateLost`, counted
  once in ``state_losses``, and the one after works. Tokens still rise.

Time is ``clock()`` (``time.monotonic`` unless given), for leases and due
times alike: a test may pass a clock it moves by hand.

Not for production: nothing is shared between processes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coordinator import keys
from coordinator.authority import Grab, HeldClaim
from coordinator.errors import (
    AlreadyClaimed,
    AlreadyDone,
    ClaimLost,
    LensError,
    LensStateLost,
    LensUnavailable,
)

_GONE = "expired, released or taken over"


@dataclass(slots=True)
class _Record:
    """An in-flight record (``<tag>:job:<key>``), due for re-offer at ``due``."""

    token: int
    payload: bytes | None
    due: float
    grab: str | None = None
    handed: int | None = None


class MemoryClaim:
    """One claim granted by a :class:`MemoryAuthority` (a ``HeldClaim``)."""

    __slots__ = ("_authority", "_deadline", "_ended", "_key", "_lease", "_owner", "_token")

    def __init__(
        self, authority: MemoryAuthority, key: str, owner: str, token: int, lease: float
    ) -> None:
        self._authority = authority
        self._key = key
        self._owner = owner
        self._token = token
        self._lease = lease
        self._deadline = authority.clock() + lease
        self._ended: str | None = None

    @property
    def key(self) -> str:
        return self._key

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def token(self) -> int:
        return self._token

    @property
    def lease(self) -> float:
        return self._lease

    def __repr__(self) -> str:
        return f"<MemoryClaim {self._key!r} token={self._token} owner={self._owner!r}>"

    def remaining(self) -> float:
        return self._deadline - self._authority.clock()

    @property
    def margin(self) -> float:
        return min(keys.SAFETY_MARGIN, self._lease * keys.MARGIN_FRACTION)

    async def verify(self) -> None:
        self._check_open()
        if self.remaining() < self.margin:
            raise ClaimLost(self._key, self._token, "less than the safety margin of lease left")
        self._authority._enter()
        if not self._authority._holds(self):
            self._ended = _GONE
            raise ClaimLost(self._key, self._token, self._ended)

    async def extend(self, lease: float | None = None) -> None:
        self._check_open()
        lease = self._lease if lease is None else lease
        if lease <= 0:
            raise ValueError("lease must be positive")
        self._authority._enter()
        lost = self._authority._extend(self, lease)
        if lost is not None:
            raise lost

    async def complete(self) -> None:
        self._check_open()
        self._authority._enter()
        lost = self._authority._complete(self)
        if lost is not None:
            raise lost

    async def release(self) -> None:
        self._check_open()
        self._authority._enter()
        self._authority._end(self, "released")

    async def hand_back(self, payload: bytes, delay: float = 0.0) -> None:
        self._check_open()
        if delay < 0:
            raise ValueError("delay must not be negative")
        self._authority._enter()
        self._authority._end(self, "handed back")
        self._authority._records[self._key] = _Record(
            self._token, payload, self._authority.clock() + delay, handed=self._token
        )

    def _check_open(self) -> None:
        if self._ended is not None:
            raise ClaimLost(self._key, self._token, self._ended)


class MemoryAuthority:
    """Claims on keys, in this process's memory (see the module docstring)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        reaper_lease: float = keys.REAPER_LEASE,
    ) -> None:
        self.clock = clock
        self.reaper_lease = reaper_lease
        #: False: every call raises LensUnavailable, as while Redis is down.
        self.available = True
        self._fence = 0
        #: key -> (the live claim's token, its owner, when its lease ends).
        self._claims: dict[str, tuple[int, str, float]] = {}
        self._done: dict[str, int] = {}
        self._records: dict[str, _Record] = {}
        self._forgotten = False
        self._state_losses = 0

    @property
    def state_losses(self) -> int:
        return self._state_losses

    def forget(self) -> None:
        """Lose every claim, done marker and in-flight record, as a Redis
        that was flushed; the fence is kept, as the Lens's clock-based tokens
        stay above every earlier one."""
        self._claims.clear()
        self._done.clear()
        self._records.clear()
        self._forgotten = True

    async def ping(self) -> None:
        if not self.available:
            raise LensUnavailable("the memory authority is unavailable")

    async def claim(
        self, key: str, owner: str, lease: float, *, reoffer: bytes | None = None
    ) -> MemoryClaim:
        (outcome,) = await self.claim_many([(key, reoffer)], owner, lease)
        if isinstance(outcome, LensError):
            raise outcome
        return outcome

    async def claim_many(
        self, requests: Sequence[tuple[str, bytes | None]], owner: str, lease: float
    ) -> list[MemoryClaim | AlreadyClaimed | AlreadyDone]:
        for key, _ in requests:
            if not key:
                raise ValueError("a claim key must not be empty")
        if lease <= 0:
            raise ValueError("lease must be positive")
        self._enter()
        return [self._claim(key, owner, lease, reoffer) for key, reoffer in requests]

    async def extend_many(self, claims: Sequence[HeldClaim]) -> list[ClaimLost | None]:
        own = [self._own(claim) for claim in claims]
        self._enter()
        return [
            ClaimLost(c.key, c.token, c._ended) if c._ended else self._extend(c, c.lease)
            for c in own
        ]

    async def complete_many(self, claims: Sequence[HeldClaim]) -> list[ClaimLost | None]:
        own = [self._own(claim) for claim in claims]
        self._enter()
        return [ClaimLost(c.key, c.token, c._ended) if c._ended else self._complete(c) for c in own]

    async def done_token(self, key: str) -> int | None:
        self._enter()
        return self._done.get(key)

    async def due(self, limit: int = 100) -> list[str]:
        self._enter()
        now = self.clock()
        due = sorted((r.due, key) for key, r in self._records.items() if r.due <= now)
        return [key for _, key in due[:limit]]

    async def grab(self, key: str) -> Grab | None:
        self._enter()
        record = self._records.get(key)
        now = self.clock()
        if record is None or record.due > now:
            return None
        held = self._live(key)
        if held is not None:
            record.due = held[2]  # due when that claim's lease ends
            return None
        if key in self._done or record.payload is None:
            del self._records[key]
            return None
        record.grab = uuid.uuid4().hex
        record.due = now + self.reaper_lease
        return Grab(key=key, grab_id=record.grab, payload=record.payload)

    async def reaped(self, grab: Grab) -> bool:
        self._enter()
        record = self._records.get(grab.key)
        if record is None or record.grab != grab.grab_id or self._live(grab.key) is not None:
            return False
        del self._records[grab.key]
        return True

    # -- the state, as the Lua scripts change it -----------------------------------------

    def _enter(self) -> None:
        """What every call meets first: an outage, or a state loss (once)."""
        if not self.available:
            raise LensUnavailable("the memory authority is unavailable")
        if self._forgotten:
            self._forgotten = False
            self._state_losses += 1
            raise LensStateLost("memory", "before", None)

    def _live(self, key: str) -> tuple[int, str, float] | None:
        held = self._claims.get(key)
        if held is not None and held[2] <= self.clock():
            del self._claims[key]
            return None
        return held

    def _holds(self, claim: MemoryClaim) -> bool:
        held = self._live(claim.key)
        return held is not None and held[0] == claim.token

    def _claim(
        self, key: str, owner: str, lease: float, reoffer: bytes | None
    ) -> MemoryClaim | AlreadyClaimed | AlreadyDone:
        if key in self._done:
            return AlreadyDone(key, self._done[key])
        held = self._live(key)
        if held is not None:
            return AlreadyClaimed(key, held[1] or None, max(0.0, held[2] - self.clock()))
        self._fence += 1
        granted = MemoryClaim(self, key, owner, self._fence, lease)
        self._claims[key] = (granted.token, owner, granted._deadline)
        if reoffer is None:
            self._records.pop(key, None)
        else:
            self._records[key] = _Record(granted.token, reoffer, granted._deadline)
        return granted

    def _extend(self, claim: MemoryClaim, lease: float) -> ClaimLost | None:
        if not self._holds(claim):
            claim._ended = _GONE
            return ClaimLost(claim.key, claim.token, _GONE)
        claim._lease = lease
        claim._deadline = self.clock() + lease
        self._claims[claim.key] = (claim.token, claim.owner, claim._deadline)
        record = self._records.get(claim.key)
        if record is not None:
            record.due = claim._deadline
        return None

    def _complete(self, claim: MemoryClaim) -> ClaimLost | None:
        if not self._holds(claim):
            claim._ended = "expired, released or taken over before completion"
            return ClaimLost(claim.key, claim.token, claim._ended)
        del self._claims[claim.key]
        self._records.pop(claim.key, None)
        self._done[claim.key] = claim.token
        claim._ended = "completed"
        return None

    def _end(self, claim: MemoryClaim, how: str) -> None:
        """Release ``claim``'s key (its record goes too); ``ClaimLost`` if it
        does not hold it."""
        if not self._holds(claim):
            claim._ended = _GONE
            raise ClaimLost(claim.key, claim.token, _GONE)
        del self._claims[claim.key]
        self._records.pop(claim.key, None)
        claim._ended = how

    def _own(self, claim: HeldClaim) -> MemoryClaim:
        if not isinstance(claim, MemoryClaim) or claim._authority is not self:
            raise TypeError(f"{claim!r} was not granted by this authority")
        return claim
