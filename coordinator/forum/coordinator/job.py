"""What a handler is given (:class:`Job`), what it is (:data:`Handler`), how
it says what comes after a failure (:class:`RetryAfter`, :class:`GiveUp`),
and how long a failed job waits before its next attempt (:class:`Backoff`:
the one policy of :mod:`forum.node.core.backoff`; after attempt ``n`` failed the next
waits ``min(cap, base * 2**(n-1))``, less up to ``jitter`` of it at random,
so retries of jobs that failed together spread out).

A handler that raises fails its attempt. What the worker does next depends
on what it raised:

* :class:`RetryAfter`: the next attempt is written back due after ``delay``
  seconds, whatever the worker's ``max_attempts`` (the handler, or the task
  layer above it, keeps its own count);
* :class:`GiveUp`: no more attempts; the job is buried as a dead letter now,
  keeping ``error`` (up to ``envelope.MAX_DEAD_ERROR`` bytes, the tail);
* anything else: the worker's backoff, and a dead letter after
  ``max_attempts``.

Both signals are ``Exception`` subclasses so that a handler's own ``except
Exception`` around them does what it would with any error, and so that a
worker of an older version, which knows neither, still counts the attempt
as failed."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from forum.coordinator.authority import HeldClaim
from forum.node.core.backoff import Backoff
from forum.node.core.entries import EntryId

# Backoff is a job's retry options (coordinator.Backoff), so it is exported here.
__all__ = ["Backoff", "GiveUp", "Handler", "Job", "KeyFunction", "RetryAfter"]


class RetryAfter(Exception):
    """The attempt failed; run the next one ``delay`` seconds from now, even
    past the worker's ``max_attempts``. ``error`` is what the retry carries
    (as the last attempt's error, cut to ``envelope.MAX_ERROR``)."""

    def __init__(self, delay: float, error: str) -> None:
        if not delay >= 0 or delay == float("inf"):
            raise ValueError(f"a retry's delay is a finite number of seconds >= 0, not {delay!r}")
        super().__init__(f"retry in {delay:g}s: {error}")
        self.delay = float(delay)
        self.error = error


class GiveUp(Exception):
    """The attempt failed and no more are to be made: bury the job as a dead
    letter now, with ``error`` (a traceback may go here: a dead letter keeps
    its last ``envelope.MAX_DEAD_ERROR`` bytes)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


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
