"""A worker's reservations on its node (:class:`Reservations`): reserving
for free slots and ahead of them, acking, releasing, renewing, and parking
until a time. Every call is best effort where the node's leases make it
safe: a reservation not acked, released or renewed runs out on the node and
its tuple comes back, where the Lens turns the copy away or parks it
(the worker's module docstring, forum.coordinator.worker).

While the space has more than the free slots, the next batch is reserved
ahead, while this one is claimed and run, so a slot that frees is filled
with one Lens round trip instead of a node's and the Lens's in a row. What
is reserved ahead waits at most the worker's ``_AHEAD_HOLD`` (0.2 s) for a
slot, then is released for other workers; a stop releases it at once.

Completed jobs' acks ride with the next reserve ahead (``ack_reserve``, one
request for the acks and the next batch, where the space has it), or, when
none is sent within ``_ACK_DELAY`` (50 ms), go in an ``ack_many`` of their own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from forum.coordinator.holding import Acks, Parked
from forum.coordinator.lanes import Lanes
from forum.coordinator.spaces import WorkSpace, ack_then_reserve
from forum.node.core.entries import EntryId, Reserved
from forum.node.core.errors import ForumError

#: The worker's logger: what befalls its reservations is the worker's to report.
log = logging.getLogger("forum.coordinator.worker")

#: The node's longest lease. A parked reservation is held this long at most,
#: less the time its release is given to land (_PARK_SLACK); a retry due
#: later is parked again when it comes back.
_LONGEST_LEASE = 3600.0
_PARK_SLACK = 60.0
#: The longest a completed job's ack waits for a reserve ahead to carry it
#: (see Reservations.ack_later) before it is sent on its own.
_ACK_DELAY = 0.05

_T = TypeVar("_T")


class Reservations:
    """The reservations of one worker, of tuples matching its ``lanes``
    (one pattern, or several by weight: :mod:`forum.coordinator.lanes`) in
    ``space``, each for ``lease`` seconds. ``stopping`` is the worker's stop:
    once set, no reservation is handed to a slot."""

    def __init__(
        self,
        space: WorkSpace,
        lanes: Lanes,
        *,
        lease: float,
        concurrency: int,
        take_wait: float,
        stopping: asyncio.Event,
    ) -> None:
        self._space = space
        self._lanes = lanes
        self._lease = lease
        self._concurrency = concurrency
        self._take_wait = take_wait
        self._stopping = stopping
        #: Completed jobs' reservations, acked with the next reserve ahead.
        self._acks = Acks(min(_ACK_DELAY, lease / 10))
        self._parked = Parked()
        #: The retries parked until their backoff is over, with the start of
        #: their payloads (the presence record names them: "retrying").
        self.retrying: dict[EntryId, bytes] = {}
        #: Reservations made ahead of free slots, and the reserve under way.
        self._ahead: list[Reserved] = []
        self._filling: asyncio.Task[list[Reserved]] | None = None

    # -- reserving ----------------------------------------------------------------------

    async def reserve(self, most: int, tasks: asyncio.TaskGroup) -> list[Reserved]:
        """Up to ``most`` reservations without waiting, or one after a wait.

        Those reserved ahead come first (see :meth:`_reserve_ahead`). A
        stopping worker starts no job: its blocking wait is abandoned the
        moment the worker stops, and reservations that arrive anyway (the
        answer crossed the stop) are released, live again at once rather
        than after a lease::

            t0  the reserve waits on the node (up to take_wait)
            t1  SIGTERM: stop() -> the wait is cancelled; the node, seeing its
                client gone, hands nothing over (or puts back what it had)
            t2  a job is written: it stays in the space for the other workers
        """
        items = await self._take_ahead(most, wait=False)
        try:
            if len(items) < most:
                items += await self._reserve_now(most - len(items))
        except BaseException:
            self._ahead[:0] = items
            raise
        found_all = len(items) == most
        if not items:
            item = await self._unless_stopped(
                lambda: self._space.reserve(
                    self._lanes.waiting(), self._lease, timeout=self._take_wait
                )
            )
            items = [] if item is None else [item]
        if self._stopping.is_set() and items:
            await self.release([item.id for item in items])
            return []
        if found_all:
            self._reserve_ahead(len(items), tasks)
        return items

    async def _reserve_now(self, most: int, acks: Sequence[EntryId] = ()) -> list[Reserved]:
        """Up to ``most`` reservations without waiting, ``acks`` acked with
        the first request: one request on a single lane; else lane after
        lane in an order drawn by weight until ``most`` are found
        (:meth:`forum.coordinator.lanes.Lanes.order`)."""
        single = self._lanes.single
        if single is not None:
            return await self._space.reserve_many(single, self._lease, most)
        items: list[Reserved] = []
        for pattern in self._lanes.order():
            try:
                if acks:
                    found = await ack_then_reserve(self._space, acks, pattern, self._lease, most)
                    acks = ()
                else:
                    found = await self._space.reserve_many(pattern, self._lease, most - len(items))
                items += found
            except BaseException:
                if items:  # reserved before the failure: live again at once, not after a lease
                    await asyncio.shield(self.release([item.id for item in items]))
                raise
            if len(items) >= most:
                break
        return items

    def holding_ahead(self) -> bool:
        """Whether reservations made ahead are held, or a reserve ahead is under way."""
        return bool(self._ahead) or self._filling is not None

    def _reserve_ahead(self, most: int, tasks: asyncio.TaskGroup) -> None:
        """Reserve up to ``most`` more (no more than ``concurrency`` ahead in
        all) while this batch is claimed and run, so the next batch's claim
        need not wait for the node's round trip. Only while the space had
        more than was asked for; the worker holds them a short while for a
        slot (forum.coordinator.worker, ``_AHEAD_HOLD``), then drops them."""
        most = min(most, self._concurrency - len(self._ahead))
        if self._filling is None and most > 0:
            fill = self._fill_ahead(self._acks.take(), most)
            self._filling = tasks.create_task(fill, name="reserve ahead")

    async def _fill_ahead(self, acks: list[EntryId], most: int) -> list[Reserved]:
        """The reserve ahead (with the acks it carries). It fails alone: its
        task is in the worker's task group, where an error would stop the
        worker (a node killed mid-request, say)."""
        try:
            single = self._lanes.single
            if single is None:  # several lanes: the acks ride with the first one's request
                return await self._reserve_now(most, acks)
            return await ack_then_reserve(self._space, acks, single, self._lease, most)
        except (ForumError, OSError) as exc:
            # Whatever the node reserved, its answer lost, comes back after
            # its lease; a job whose ack it carried, too, and is turned away.
            log.warning("reserve ahead failed (%s)", exc)
            return []

    async def _take_ahead(self, most: int, *, wait: bool = True) -> list[Reserved]:
        """Up to ``most`` of the reservations made ahead, with those of the
        reserve under way if it is done (or, with ``wait``, once it is). Not
        waiting keeps a slow ahead (its acks' fsync, say) off the path of a
        free slot: the slot takes a reserve of its own, and what the reserve
        ahead brings waits for the next."""
        filling = self._filling
        if filling is not None and (wait or filling.done()):
            self._filling = None
            self._ahead += await filling
        taken, self._ahead = self._ahead[:most], self._ahead[most:]
        return taken

    async def drop_ahead(self) -> None:
        """Release every reservation made ahead: live again for any worker."""
        ahead = await self._take_ahead(self._concurrency)
        if ahead:
            await self.release([item.id for item in ahead])

    async def _unless_stopped(self, wait: Callable[[], Awaitable[_T | None]]) -> _T | None:
        """What ``wait()`` (one blocking reserve) answers, or ``None`` once the
        worker stops. ``wait`` is called only if the worker has not stopped
        yet (a stop that landed during the reserve before it): a coroutine
        made and never awaited would be a warning, and an error in the tests."""
        if self._stopping.is_set():
            return None
        waiting = asyncio.ensure_future(wait())
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait((waiting, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            waiting.cancel()  # no-op if it is done
            # Cancelled, or done in a race with the cancel: either way, settled.
            await asyncio.wait((waiting, stopping))
        return None if waiting.cancelled() else waiting.result()

    # -- settling -----------------------------------------------------------------------

    async def ack(self, ids: Sequence[EntryId]) -> None:
        """Take reserved tuples for good. Best effort: one not acked runs out
        on the node and comes back, and the Lens turns the copy away (its
        claim key is done, or held)."""
        if not ids:
            return
        try:
            await self._space.ack_many(ids)
        except (ForumError, OSError) as exc:
            log.warning("could not ack %d reservations (%s): they will come back "
                        "and be turned away", len(ids), exc)  # fmt: skip

    async def ack_later(self, ids: list[EntryId]) -> None:
        """Ack completed jobs' reservations with the next reserve ahead, in the
        same request (:meth:`_reserve_ahead`); :meth:`send_overdue_acks` acks
        those that no reserve carried within ``_ACK_DELAY``. The claims are
        completed already: this only ends the node's copies."""
        self._acks.add(ids)

    async def send_overdue_acks(self) -> None:
        """Ack what waited ``_ACK_DELAY`` for a reserve ahead, until
        :meth:`close_acks` and the last are sent."""
        while ids := await self._acks.overdue():
            await self.ack(ids)

    def close_acks(self) -> None:
        """Send every ack left now; :meth:`send_overdue_acks` returns after."""
        self._acks.close()

    async def release(self, ids: Sequence[EntryId]) -> None:
        """Give reserved tuples back now, live again in their places. Best
        effort: one not released runs out on the node and comes back."""
        results = await asyncio.gather(
            *(self._space.release(i) for i in ids), return_exceptions=True
        )
        for entry_id, result in zip(ids, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("could not release %s (%s): it comes back when its lease "
                            "runs out", entry_id, result)  # fmt: skip

    async def extend(self, ids: list[EntryId], lease: float, within: float) -> None:
        """Renew reservations to ``lease`` seconds from now, in one call that
        may take up to ``within`` seconds (the next beat tries again). Best
        effort: a reservation that ran out (or a node that restarted) puts the
        tuple back; its copy meets the live claim and is parked, or, once
        this job is completed, is turned away as done."""
        if not ids:
            return
        try:
            async with asyncio.timeout(within):
                extended = await self._space.extend_many(ids, lease)
        except (ForumError, OSError, TimeoutError) as exc:
            log.warning("could not extend %d reservations (%s)", len(ids), exc)
            return
        gone = [str(i) for i, ok in zip(ids, extended, strict=True) if not ok]
        if gone:
            log.warning("reservations no longer held on the node: %s", ", ".join(gone))

    # -- parking ------------------------------------------------------------------------

    async def park(self, holds: list[tuple[EntryId, float]]) -> None:
        """Keep each reservation for its hold (in seconds), then release it
        (:class:`Parked`). Its lease is extended to last past the hold, so the
        release comes first; should the extension fail, the reservation may
        run out before (and come back sooner: parked again)."""
        if not holds:
            return
        holds = [(entry_id, min(hold, _LONGEST_LEASE - _PARK_SLACK)) for entry_id, hold in holds]
        lease = max(hold for _, hold in holds) + min(self._lease, _PARK_SLACK)
        await self.extend([entry_id for entry_id, _ in holds], lease, self._lease / 3)
        for entry_id, hold in holds:
            self._parked.add(entry_id, hold)

    def wake(self, ids: Sequence[EntryId]) -> None:
        """Release those of ``ids`` still parked now rather than at their
        time (:meth:`Parked.wake`): :meth:`release_when_due` sends them."""
        self._parked.wake(ids)

    async def release_when_due(self) -> None:
        """Release parked reservations as they fall due or are woken, and
        every one left after :meth:`stop_parking`."""
        while due := await self._parked.due():
            await self.release(due)
            for entry_id in due:
                self.retrying.pop(entry_id, None)

    def stop_parking(self) -> None:
        """Nothing parks any more: release every parked reservation now."""
        self._parked.close()
