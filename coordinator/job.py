"""What a handler is given (:class:`Job`), what it is (:data:`Handler`), and
how long a failed job waits before its next attempt (:class:`Backoff`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from coordinator.authority import HeldClaim
from node import EntryId


@dataclass(frozen=True, slots=True)
class Job:
    """One claimed job, as a handler sees it.

    ``payload`` is the producer's bytes; ``entry_id`` the id of the tuple this
    delivery came from; ``key`` the claim key (the first delivery's entry id,
    or an idempotency key); ``attempt`` counts deliveries from 1; ``token`` is
    the claim's fencing token, to store beside any effect.
    """

    payload: bytes
    entry_id: EntryId
    key: str
    attempt: int
    claim: HeldClaim = field(repr=False)

    @property
    def token(self) -> int:
        return self.claim.token

    async def verify(self) -> None:
        """Raise ``ClaimLost`` unless this job's claim is still live; call it
        right before irreversible work."""
        await self.claim.verify()


#: ``async def handler(job: Job) -> None``; raising means the attempt failed.
Handler = Callable[[Job], Coroutine[Any, Any, None]]
#: ``key(payload) -> str``: an idempotency key taken from a job's payload.
KeyFunction = Callable[[bytes], str]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before attempt ``n + 1`` after attempt ``n`` failed:
    ``min(cap, base * 2**(n-1))``, minus up to ``jitter`` of it at random
    (so retries of jobs that failed together spread out)."""

    base: float = 1.0
    cap: float = 300.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.base < 0 or self.cap < self.base or not 0 <= self.jitter <= 1:
            raise ValueError("need 0 <= base <= cap and 0 <= jitter <= 1")

    def delay(self, attempt: int, rng: random.Random) -> float:
        full = min(self.cap, self.base * 2.0 ** min(attempt - 1, 64))
        return full * (1 - self.jitter * rng.random())
