"""The producer's side of a job's record: the ``enqueued`` record an
enqueue leaves in the Lens after its tuple is in the space.

It is what tells ``delayed`` and ``expired`` apart from "nothing", and what
names the task of a job a worker holds (tasks/status.py). It is best effort:
the job is safe in the space once the node took the write, so Redis being
down does not fail the enqueue; the outage is logged once, and again only
after a record went in since.

A job due now without a ``ttl`` is shown by its tuple (queued) and its
claim (running) whether or not the record is there yet, so its record is
written in the background: the enqueue returns once the node has the job,
without a second durable round trip in turn (producer throughput is one
Redis fsync better). At most :data:`BACKGROUND` such writes are in flight
(an enqueue past that waits for one to end), and closing waits for those
under way. A delayed or expiring job's record is written before its enqueue
returns: its status right after depends on it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from coordinator.errors import LensError
from tasks.authority import Field, TaskAuthority

log = logging.getLogger(__name__)

#: The most records written in the background at once.
BACKGROUND = 64


class EnqueuedRecords:
    """Writes enqueued records through ``lens`` (see the module docstring)."""

    def __init__(self, lens: TaskAuthority) -> None:
        self._lens = lens
        self._room = asyncio.Semaphore(BACKGROUND)
        self._pending: set[asyncio.Task[None]] = set()
        #: Whether Redis refused a record since one last went in.
        self._failing = False

    async def note(
        self, key: str, fields: Mapping[str, Field], ttl: float, *, background: bool
    ) -> None:
        """Write ``key``'s enqueued record, now or (``background``) soon."""
        if not background:
            await self._write(key, fields, ttl)
            return
        await self._room.acquire()
        task = asyncio.create_task(self._write(key, fields, ttl), name=f"record {key}")
        self._pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        self._room.release()

    async def _write(self, key: str, fields: Mapping[str, Field], ttl: float) -> None:
        try:
            await self._lens.record_enqueued(key, fields, ttl)
        except LensError as exc:
            if not self._failing:
                log.warning("enqueue: the job is in the space but Redis has no record of it "
                            "(%s); status shows it once a worker runs it", exc)  # fmt: skip
            self._failing = True
        else:
            self._failing = False

    async def aclose(self) -> None:
        """Wait for the records still being written (each bounded by the
        Lens's own timeout)."""
        if self._pending:
            await asyncio.wait(set(self._pending))
