"""The seam between the worker runtime and whatever grants claims.

:class:`ClaimAuthority` is what a :class:`coordinator.Worker`, a
:class:`coordinator.Reaper` and the task layer above them need:
:class:`coordinator.Lens` (Redis) is the implementation,
:class:`forum.coordinator.memory.MemoryAuthority` the in-memory one for tests. A
:class:`HeldClaim` is one granted claim. What the Lens tells about a key
(job records, history, cancel) is in :mod:`forum.coordinator.records`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from forum.coordinator.errors import ClaimLost, LensError
from forum.coordinator.records import CancelOutcome, FieldValue, HistoryEvent, KeyState, ScanKind


@dataclass(frozen=True, slots=True)
class Grab:
    """An abandoned in-flight record a reaper holds for a while: write
    ``payload`` back into the space, then report it with ``reaped``."""

    key: str
    grab_id: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class Failed:
    """What a failed attempt tells the authority as its claim is released,
    so that every copy of the job, on any node, is counted in one sequence
    (docs/coordination.md, "How many times can my task run?"): the next
    attempt is due ``delay`` seconds from now, or with ``delay`` ``None``
    there is none (the job is buried). ``revived`` is the dead letter the
    job was requeued from (its trailer's, forum.coordinator.envelope)."""

    delay: float | None
    revived: str | None = None

    def __post_init__(self) -> None:
        if self.delay is not None and not 0 <= self.delay < float("inf"):
            raise ValueError(
                f"a retry's delay is a finite number of seconds >= 0, not {self.delay!r}"
            )


class HeldClaim(Protocol):
    """A granted claim on ``key``, fenced by ``token``, counted as attempt
    ``attempt`` of its job (``lapsed``: the holder before it let its lease
    run out)."""

    @property
    def key(self) -> str: ...

    @property
    def attempt(self) -> int: ...

    @property
    def lapsed(self) -> bool: ...

    @property
    def owner(self) -> str: ...

    @property
    def token(self) -> int: ...

    @property
    def lease(self) -> float:
        """The lease, in seconds, that each ``extend()`` renews by default."""
        ...

    def remaining(self) -> float:
        """Seconds of lease left by the holder's own (conservative) clock."""
        ...

    async def verify(self) -> None: ...

    async def extend(self, lease: float | None = None) -> None: ...

    async def complete(self) -> None: ...

    async def release(self, failed: Failed | None = None) -> None: ...

    async def hand_back(self, payload: bytes, delay: float = 0.0) -> None: ...


class ClaimAuthority(Protocol):
    """Grants claims, and keeps abandoned claims' jobs for re-offer."""

    @property
    def state_losses(self) -> int:
        """How many times the authority found it had lost its state (every
        claim, done marker and in-flight record from before gone), each loss
        counted once. A worker compares it with what it saw last to tell
        that the claims it holds are gone (``LensStateLost``)."""
        ...

    async def ping(self) -> None: ...

    async def claim(
        self,
        key: str,
        owner: str,
        lease: float,
        *,
        reoffer: bytes | None = None,
        attempt: int = 1,
        revived: str | None = None,
    ) -> HeldClaim: ...

    async def claim_many(
        self,
        requests: Sequence[tuple[str, bytes | None]],
        owner: str,
        lease: float,
        attempts: Sequence[int] | None = None,
        revived: Sequence[str | None] | None = None,
    ) -> Sequence[HeldClaim | LensError]:
        """``claim`` for each ``(key, reoffer)``, each for its attempt (default
        1) and dead letter (default none), at once; conflicts come back as
        errors in the list, an unreachable authority is raised."""
        ...

    async def extend_many(self, claims: Sequence[HeldClaim]) -> Sequence[ClaimLost | None]:
        """``extend()`` for each claim, at once (a heartbeat)."""
        ...

    async def complete_many(self, claims: Sequence[HeldClaim]) -> Sequence[ClaimLost | None]:
        """``complete()`` for each claim, at once; ``ClaimLost`` in the list for
        a stale one, an unreachable authority is raised."""
        ...

    async def due(self, limit: int) -> list[str]: ...

    async def grab(self, key: str) -> Grab | None: ...

    async def reaped(self, grab: Grab) -> bool: ...

    async def inspect(self, key: str) -> KeyState:
        """The key's live claim, done marker and job record, read at once."""
        ...

    async def record(self, claim: HeldClaim, fields: Mapping[str, FieldValue], ttl: float) -> None:
        """Write into the key's job record while ``claim`` holds the key;
        ``ClaimLost`` (nothing written) otherwise."""
        ...

    async def record_enqueued(self, key: str, fields: Mapping[str, FieldValue], ttl: float) -> bool:
        """Write the key's first job record; ``False`` if it has one."""
        ...

    async def history(self, key: str) -> list[HistoryEvent]: ...

    def scan(self, kind: ScanKind, count: int = 100) -> AsyncIterator[str]:
        """Every claim key with a job record (``"task"``) or a live claim."""
        ...

    async def cancel(self, key: str) -> CancelOutcome:
        """Make the key done, retiring its holder's claim if one holds it."""
        ...

    async def cancelled_many(self, claims: Sequence[HeldClaim]) -> Sequence[bool]:
        """Whether each claim's key was cancelled under it (the worker's watch,
        forum.coordinator.keeping); a claim found so is ended (``ClaimLost``)."""
        ...

    async def durability(self) -> list[str]:
        """Warnings about the store the guarantees rest on; empty when fine."""
        ...
