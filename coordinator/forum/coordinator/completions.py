"""Completing claims in batches, off the worker's critical path.

When a handler returns, its slot is free for the next job at once; the claim
joins a queue, and one task completes everything queued in one Redis round
trip (``Lens.complete_many``: one pipeline, one AOF fsync). Under load the
batch grows by itself: whatever finished while the previous batch was in
flight goes in the next.

While Redis is unreachable, a batch is retried with backoff for as long as
each claim's lease lasts; a claim whose lease ran out is given up: its
in-flight record re-offers the job, and the handler's effect must be safe to
repeat (see docs/coordination.md).

A claim may be submitted with the reservation that still holds its job on the
node (the worker's durable path): once the claim is settled, completed or
given up, ``ack`` takes those tuples for good, in one call. The handler
returned, so the job is done whatever the Lens answered; until the ack, the
node keeps a copy, and one that comes back is turned away by the done marker.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from forum.coordinator.authority import ClaimAuthority, HeldClaim
from forum.coordinator.errors import LensError
from forum.node.core.backoff import Backoff
from forum.node.core.entries import EntryId

log = logging.getLogger(__name__)

#: Between tries of a batch while Redis is unreachable: 0.05 s doubling to 1 s.
_RETRY = Backoff(base=0.05, cap=1.0, jitter=0.0)


class Completions:
    """A queue of claims to complete, and the loop that completes them.

    ``count`` is told ``"done"`` or ``"claims_lost"`` once per claim. At most
    ``limit`` claims wait at once: :meth:`submit` blocks past that, which
    holds back the worker when Redis is slow.
    """

    def __init__(
        self,
        lens: ClaimAuthority,
        count: Callable[[str], None],
        limit: int,
        ack: Callable[[list[EntryId]], Awaitable[None]] | None = None,
    ) -> None:
        self._lens = lens
        self._count = count
        self._ack = ack
        self._queue: deque[tuple[HeldClaim, EntryId | None]] = deque()
        self._room = asyncio.Semaphore(limit)
        self._wake = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return len(self._queue)

    async def submit(self, claim: HeldClaim, reservation: EntryId | None = None) -> None:
        await self._room.acquire()
        self._queue.append((claim, reservation))
        self._wake.set()

    def close(self) -> None:
        """:meth:`run` returns once what is queued is settled."""
        self._closed = True
        self._wake.set()

    async def run(self) -> None:
        while True:
            if not self._queue:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = list(self._queue)
            self._queue.clear()
            try:
                await self._complete([claim for claim, _ in batch])
                reserved = [entry_id for _, entry_id in batch if entry_id is not None]
                if reserved and self._ack is not None:
                    await self._ack(reserved)
            finally:
                for _ in batch:
                    self._room.release()

    async def _complete(self, batch: list[HeldClaim]) -> None:
        delays = _RETRY.delays()
        while batch:
            try:
                outcomes = await self._lens.complete_many(batch)
            except LensError as exc:  # unreachable (or refusing): retry while leases last
                expired = [claim for claim in batch if claim.remaining() <= 0]
                for claim in expired:
                    log.warning("%s: not completed: Redis unreachable (%s)", claim.key, exc)
                batch = [claim for claim in batch if claim.remaining() > 0]
                if batch:
                    await asyncio.sleep(min(next(delays), *(c.remaining() for c in batch)))
                continue
            for claim, lost in zip(batch, outcomes, strict=True):
                if lost is None:
                    self._count("done")
                else:
                    self._count("claims_lost")
                    log.warning("%s: %s", claim.key, lost)
            return
