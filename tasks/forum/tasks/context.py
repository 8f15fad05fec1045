"""What a task is given besides its arguments: :class:`Context`.

::

    @app.task()
    async def charge(ctx, order_id):
        await ctx.verify()                 # right before the irreversible step
        ctx.progress({"step": "charged"})  # fire and forget, latest wins
        store.write(order_id, fence=ctx.token)

``token`` is the claim's fencing token: a store that keeps the highest token
it saw per key, and refuses lower ones, never takes the effect of a stale
holder (docs/tasks.md, "Idempotent effects"). ``verify`` raises
``ClaimLost`` unless the claim is still live.

``progress(value)`` works from a coroutine and from a sync task's thread.
It writes the value into the job's record, fenced (a stale holder's is
refused), in the background: one write at a time, and while one is in
flight only the newest value waits for the next. Before the job's outcome is
written, the last value is flushed (or dropped, if the claim is gone).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from forum.coordinator import ClaimLost, HeldClaim, LensError
from forum.tasks.authority import TaskAuthority
from forum.tasks.serializer import Serializer

log = logging.getLogger(__name__)

_NOTHING = object()


class Context:
    """One attempt of one job, as its task sees it."""

    def __init__(
        self,
        *,
        job_id: str,
        key: str,
        task: str,
        attempt: int,
        claim: HeldClaim,
        lens: TaskAuthority,
        serializer: Serializer,
        record_ttl: float,
        state: dict[str, Any] | None = None,
    ) -> None:
        #: The text of the id of the tuple this delivery came from.
        self.job_id = job_id
        self.key = key
        self.task = task
        #: This delivery's attempt number, from 1.
        self.attempt = attempt
        #: The worker's shared state: what its ``on_startup`` hooks put in
        #: (a database pool, say), the same dict for every job it runs
        #: (:mod:`forum.tasks.hooks`); empty without them.
        self.state: dict[str, Any] = {} if state is None else state
        self._claim = claim
        self._lens = lens
        self._serializer = serializer
        self._record_ttl = record_ttl
        self._loop = asyncio.get_running_loop()
        self._pending: Any = _NOTHING
        self._writer: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<Context {self.task} {self.key!r} attempt {self.attempt} token {self.token}>"

    @property
    def token(self) -> int:
        """The claim's fencing token: store it beside the effect."""
        return self._claim.token

    async def verify(self) -> None:
        """Raise ``ClaimLost`` unless this job's claim is still live (with
        the Lens's safety margin of lease left)."""
        await self._claim.verify()

    def verify_sync(self, timeout: float = 10.0) -> None:
        """:meth:`verify`, from a sync task's thread (never from the loop's)."""
        if _on_loop(self._loop):
            raise RuntimeError("verify_sync() is for sync tasks; await ctx.verify() here")
        asyncio.run_coroutine_threadsafe(self.verify(), self._loop).result(timeout)

    def progress(self, value: Any) -> None:
        """Record ``value`` (anything the app's serializer encodes) as this
        job's progress, in the background; the newest wins."""
        data = self._serializer.dumps(value)
        if _on_loop(self._loop):
            self._offer(data)
        else:
            self._loop.call_soon_threadsafe(self._offer, data)

    def _offer(self, data: bytes) -> None:
        self._pending = data
        if self._writer is None or self._writer.done():
            self._writer = self._loop.create_task(self._write(), name=f"progress {self.key}")

    async def _write(self) -> None:
        while self._pending is not _NOTHING:
            data, self._pending = self._pending, _NOTHING
            try:
                await self._lens.record(self._claim, {"progress": data}, self._record_ttl)
            except ClaimLost:
                self._pending = _NOTHING
                return
            except LensError as exc:
                log.warning("%s: progress not recorded (%s)", self.key, exc)

    async def flush(self) -> None:
        """Wait for the progress writes still under way (the runner, before
        the outcome, so the outcome is written last)."""
        writer = self._writer
        if writer is not None:
            await asyncio.wait((writer,))

    async def aclose(self) -> None:
        """Stop the progress writer (the attempt is over, its claim gone)."""
        writer = self._writer
        if writer is not None and not writer.done():
            writer.cancel()
            await asyncio.wait((writer,))


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
