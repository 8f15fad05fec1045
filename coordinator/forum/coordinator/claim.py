"""One granted claim as its holder keeps it (:class:`Claim`), and what the
claim asks of whoever granted it (:class:`ClaimIssuer`).

A :class:`Claim` holds what the holder knows: its key, owner and fencing
token, its lease and when the lease ends by the holder's own clock, and
whether it has ended here. Its operations (``verify``, ``extend``,
``complete``, ``release``, ``hand_back``) check what the holder can check
alone, then ask the issuer, which answers for the store and moves the
claim's state through the claim's public methods (:meth:`Claim.renew`,
:meth:`Claim.shorten`, :meth:`Claim.end`, :meth:`Claim.refused`), as
redis-py's ``Lock`` talks to its client. The issuers are
:class:`forum.coordinator.lens.Lens` (Redis) and
:class:`forum.coordinator.memory.MemoryAuthority` (this process, for tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from forum.coordinator import keys
from forum.coordinator.authority import Failed
from forum.coordinator.errors import ClaimLost

#: Why a claim ended that the store no longer shows held by it.
GONE = "expired, released or taken over"
#: Why a completion was refused.
GONE_BEFORE_COMPLETION = "expired, released or taken over before completion"
#: Why a claim ended whose key was cancelled while it held it (cancel.lua).
CANCELLED = "cancelled"
#: Why ``verify()`` refused while the claim still holds its key.
TOO_LITTLE_LEFT = "less than the safety margin of lease left"


class ClaimIssuer(Protocol):
    """What a :class:`Claim` asks of the authority that granted it. Each
    operation is given a claim this issuer granted, still open here."""

    #: The holder's clock, in seconds: a claim's lease ends by it.
    clock: Callable[[], float]

    @property
    def safety_margin(self) -> float:
        """``verify()`` refuses with less than ``min(safety_margin, lease *
        keys.MARGIN_FRACTION)`` seconds of lease left."""
        ...

    async def verify_claim(self, claim: Claim) -> None:
        """Raise :class:`ClaimLost` unless the store shows ``claim`` holding
        its key for at least its margin longer."""
        ...

    async def extend_claim(self, claim: Claim, lease: float) -> None:
        """Renew ``claim``'s lease for ``lease`` seconds from now."""
        ...

    async def complete_claim(self, claim: Claim) -> None:
        """Leave ``claim``'s key's done marker and end the claim."""
        ...

    async def release_claim(self, claim: Claim, failed: Failed | None) -> None:
        """Give ``claim``'s key back without completing it; after a failed
        attempt, recording when the next is due (or that none is)."""
        ...

    async def hand_back_claim(self, claim: Claim, payload: bytes, delay: float) -> None:
        """Give ``claim``'s key back and have ``payload`` re-offered after ``delay`` s."""
        ...


class Claim:
    """One granted claim. ``key``, ``owner`` and ``token`` never change; the
    lease deadline moves with ``extend``, and the claim ends (here, after
    the issuer confirmed) with ``complete``, ``release`` or ``hand_back``.

    Not a frozen dataclass because its lease deadline and end state change.
    """

    __slots__ = (
        "_attempt", "_deadline", "_ended", "_issuer", "_key", "_lapsed", "_lease", "_owner",
        "_token",
    )  # fmt: skip

    def __init__(
        self,
        issuer: ClaimIssuer,
        *,
        key: str,
        owner: str,
        token: int,
        lease: float,
        deadline: float,
        attempt: int = 1,
        lapsed: bool = False,
    ) -> None:
        self._issuer = issuer
        self._attempt = attempt
        self._lapsed = lapsed
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
    def attempt(self) -> int:
        """The attempt of its job the issuer counts this claim as: the largest
        of the one asked for, the one after the last failed attempt, and the
        one after a holder's whose lease ran out."""
        return self._attempt

    @property
    def lapsed(self) -> bool:
        """Whether the key's holder before this claim let its lease run out."""
        return self._lapsed

    @property
    def lease(self) -> float:
        """The lease, in seconds, that each ``extend()`` renews by default."""
        return self._lease

    @property
    def deadline(self) -> float:
        """When the lease ends, by the issuer's ``clock``."""
        return self._deadline

    def granted_by(self, issuer: object) -> bool:
        """Whether ``issuer`` granted this claim."""
        return self._issuer is issuer

    @property
    def ended(self) -> str | None:
        """How this claim ended here (``"completed"``, ``"released"``, ...),
        or ``None`` while it is open."""
        return self._ended

    def __repr__(self) -> str:
        state = self._ended or f"{self.remaining():.3f}s left"
        return f"<Claim {self._key!r} token={self._token} owner={self._owner!r} {state}>"

    def remaining(self) -> float:
        """Seconds of lease left, measured from before the request that granted
        or last extended it (so never more than the store thinks)."""
        return self._deadline - self._issuer.clock()

    @property
    def margin(self) -> float:
        """``verify()`` refuses with less than this many seconds of lease left."""
        return min(self._issuer.safety_margin, self._lease * keys.MARGIN_FRACTION)

    async def verify(self) -> None:
        """Raise :class:`ClaimLost` unless this claim holds its key for at
        least the safety margin longer. Call it right before irreversible work."""
        self.check_open()
        if self.remaining() < self.margin:
            raise ClaimLost(self._key, self._token, TOO_LITTLE_LEFT)
        await self._issuer.verify_claim(self)

    async def extend(self, lease: float | None = None) -> None:
        """Renew the lease for ``lease`` seconds (default: the current lease)
        from now; :class:`ClaimLost` if this claim no longer holds the key."""
        self.check_open()
        lease = self._lease if lease is None else lease
        if lease <= 0:
            raise ValueError("lease must be positive")
        await self._issuer.extend_claim(self, lease)

    async def complete(self) -> None:
        """Finish: leave a done marker; :class:`ClaimLost` for a stale holder."""
        self.check_open()
        await self._issuer.complete_claim(self)

    async def release(self, failed: Failed | None = None) -> None:
        """Give the key back without completing it. Nothing is re-offered: use
        :meth:`hand_back` when the job must run again. With ``failed``, this
        attempt failed: the issuer grants the next no earlier than its delay
        (and none once the job is buried)."""
        self.check_open()
        await self._issuer.release_claim(self, failed)

    async def hand_back(self, payload: bytes, delay: float = 0.0) -> None:
        """Give the key back and have a reaper write ``payload`` into the space
        after ``delay`` seconds, in one step: the job is never in neither place."""
        self.check_open()
        if delay < 0:
            raise ValueError("delay must not be negative")
        await self._issuer.hand_back_claim(self, payload, delay)

    # -- the issuer's side: what it learned from the store ---------------------------------

    def check_open(self) -> None:
        """Raise :class:`ClaimLost` if this claim has ended here."""
        if self._ended is not None:
            raise ClaimLost(self._key, self._token, self._ended)

    def lost(self) -> ClaimLost | None:
        """Why this claim has ended here, if it has."""
        return None if self._ended is None else ClaimLost(self._key, self._token, self._ended)

    def end(self, how: str) -> None:
        """Mark this claim ended ``how`` (``"completed"``, ``"released"``, ...)."""
        self._ended = how

    def refused(self, why: str = GONE) -> ClaimLost:
        """The store no longer shows this claim holding its key: mark it ended
        ``why``, and return the :class:`ClaimLost` that says so."""
        self._ended = why
        return ClaimLost(self._key, self._token, why)

    def renew(self, lease: float, deadline: float) -> None:
        """The store took an extension: ``lease`` is the lease now, ending at ``deadline``."""
        self._lease = lease
        self._deadline = deadline

    def shorten(self, deadline: float) -> None:
        """The store says the lease ends by ``deadline``: keep the earlier of the two."""
        self._deadline = min(self._deadline, deadline)
