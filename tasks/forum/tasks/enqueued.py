"""The producer's side of a job's record: the ``enqueued`` record an
enqueue leaves in the Lens after its tuple is in the space.

It is what tells ``delayed`` and ``expired`` apart from "nothing", and what
names the task of a job a worker holds (tasks/forum/tasks/status.py). It is best effort:
the job is safe in the space once the node took the write, so Redis being
down does not fail the enqueue; the outage is logged once, and again only
after a record went in since.

A job due now without a ``ttl`` is shown by its tuple (queued) and its
claim (running) whether or not the record is there yet, so its record is
written in the background: the enqueue returns once the node has the job,
without a second durable round trip in turn. The background records queue
up, and one task writes whatever queued while the previous batch was in
flight, in one call (``record_enqueued_many``: one script per shard, one
round trip and one AOF fsync for the batch), as the worker's completions go
(coordinator/forum/coordinator/completions.py), and waits up to :data:`LINGER` for more
before a call that is not full, so a producer awaiting one enqueue at a time
still writes a batch per call: a record costs a share of a call, not a call
(bench/enqueued_bench.py). The record of a job due now so lags its enqueue
by up to :data:`LINGER`; its status does not. At most :data:`BACKGROUND`
records wait at once (an enqueue past that waits for room), and closing
waits for those queued. A delayed or
expiring job's record is written before its enqueue returns: its status
right after depends on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Mapping, Sequence

from forum.coordinator.errors import LensError
from forum.coordinator.records import NewRecord
from forum.tasks.authority import Field, TaskAuthority

log = logging.getLogger(__name__)

#: The most records waiting to be written in the background at once.
BACKGROUND = 1024
#: The most records one call writes.
BATCH = 256
#: How long the writer waits for more records before a call that is not
#: full (seconds): a producer awaiting one enqueue at a time queues about one
#: record per node round trip, and a call per record would cost as much
#: client CPU as the write itself. Never waited at close.
LINGER = 0.01


class EnqueuedRecords:
    """Writes enqueued records through ``lens`` (see the module docstring)."""

    def __init__(self, lens: TaskAuthority) -> None:
        self._lens = lens
        self._room = asyncio.Semaphore(BACKGROUND)
        self._queue: deque[NewRecord] = deque()
        #: The task writing the queue out, while there is one.
        self._writer: asyncio.Task[None] | None = None
        #: Set when a batch is queued in full, or at close: no more lingering.
        self._full = asyncio.Event()
        self._closing = False
        #: Whether Redis refused a record since one last went in.
        self._failing = False

    async def note(
        self, key: str, fields: Mapping[str, Field], ttl: float, *, background: bool
    ) -> None:
        """Write ``key``'s enqueued record, now or (``background``) soon."""
        record = NewRecord(key, fields, ttl)
        if not background:
            await self._write([record])
            return
        await self._room.acquire()
        self._queue.append(record)
        if len(self._queue) >= BATCH:
            self._full.set()
        if self._writer is None:
            self._writer = asyncio.create_task(self._drain(), name="enqueued records")

    async def note_many(self, records: Sequence[NewRecord]) -> None:
        """Write ``records`` now, in one call (an ``enqueue_many``'s)."""
        await self._write(list(records))

    async def _drain(self) -> None:
        """Write the queue out, a batch at a time, until it is empty."""
        try:
            while self._queue:
                await self._linger()
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), BATCH))]
                try:
                    await self._write(batch)
                finally:
                    for _ in batch:
                        self._room.release()
        finally:
            # No await since the queue was seen empty: a note() after this
            # starts a new writer, and none is left unwritten.
            self._writer = None

    async def _linger(self) -> None:
        """Wait up to :data:`LINGER` for a full batch, unless closing."""
        if self._closing or len(self._queue) >= BATCH:
            return
        self._full.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LINGER):
                await self._full.wait()

    async def _write(self, records: list[NewRecord]) -> None:
        try:
            await self._lens.record_enqueued_many(records)
        except LensError as exc:
            if not self._failing:
                log.warning("enqueue: the job is in the space but Redis has no record of it "
                            "(%s); status shows it once a worker runs it", exc)  # fmt: skip
            self._failing = True
        else:
            self._failing = False

    async def aclose(self) -> None:
        """Wait for the records still queued (each call bounded by the Lens's
        own timeout)."""
        self._closing = True
        self._full.set()
        writer = self._writer
        if writer is not None:
            await writer
