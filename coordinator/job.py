"""What a handler is given (:class:`Job`), what it is (:data:`Handler`), and
how long a failed job waits before its next attempt (:class:`Backoff`: the
one policy of :mod:`node.backoff`; after attempt ``n`` failed the next waits
``min(cap, base * 2**(n-1))``, less up to ``jitter`` of it at random, so
retries of jobs that failed together spread out)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from coordinator.authority import HeldClaim
from node import EntryId
from node.backoff import Backoff

# Backoff is a job's retry options (coordinator.Backoff), so it is exported here.
__all__ = ["Backoff", "Handler", "Job", "KeyFunction"]


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
