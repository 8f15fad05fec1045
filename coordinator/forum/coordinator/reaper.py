"""The reaper: writes jobs whose claims were abandoned back into the space.

A claim made with ``reoffer`` bytes leaves an in-flight record in the Lens,
due when the lease ends (``extend`` moves it, ``complete``/``release`` delete
it, ``hand_back`` reschedules it with new bytes). A record that falls due
with no live claim belongs to a holder that died, or was handed back for a
retry: the reaper writes its bytes into the space.

Safe on every worker at once: for each due record, exactly one reaper's
``grab`` succeeds (atomically, in Lua), and the grab is itself a short lease.

    t0  reaper R1 grabs job k (due again at t0 + reaper_lease)
    t1  reaper R2 tries to grab k: not due -> skips it
    t2  R1 writes k's bytes into the space, then ``reaped``: the record is gone

Were R1 to die between t0 and t2, the record falls due again and R2 writes it
back. Were R1 to die between writing and ``reaped``, the job is written twice:
both copies carry the same claim key, so the Lens lets only one of them run
(the other meets AlreadyClaimed or AlreadyDone).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from forum.coordinator.authority import ClaimAuthority
from forum.coordinator.errors import LensError
from forum.node.core.cancellation import wait_event
from forum.node.core.errors import ForumError
from forum.node.core.space import TupleSpace

log = logging.getLogger(__name__)


class Reaper:
    """Re-offers abandoned jobs from ``lens`` into ``space``, every ``interval`` seconds."""

    def __init__(
        self,
        space: TupleSpace,
        lens: ClaimAuthority,
        *,
        interval: float = 1.0,
        batch: int = 100,
        on_reoffer: Callable[[], None] | None = None,
    ) -> None:
        if interval <= 0 or batch < 1:
            raise ValueError("interval must be positive and batch at least 1")
        self._space = space
        self._lens = lens
        self._interval = interval
        self._batch = batch
        self._on_reoffer = on_reoffer

    async def run_once(self) -> int:
        """One pass over the due records; returns how many jobs it wrote back.

        Raises :class:`LensUnavailable`, or the space's error when a write
        failed (the grab then expires and the job is re-offered later).
        """
        written = 0
        for key in await self._lens.due(self._batch):
            written += await self.reoffer(key)
        return written

    async def reoffer(self, key: str) -> bool:
        """Write ``key``'s in-flight record back now if it is due and abandoned
        (a worker calls this right after handing a job back with no delay)."""
        grab = await self._lens.grab(key)
        if grab is None:
            return False
        await self._space.write(grab.payload)
        if self._on_reoffer is not None:
            self._on_reoffer()
        if not await self._lens.reaped(grab):
            log.debug("re-offered %s was claimed again before it was reaped", key)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Pass after pass until ``stop`` is set; outages are logged and waited out."""
        failing: str | None = None  # logged once per outage, not once per pass
        while not stop.is_set():
            written = 0
            try:
                written = await self.run_once()
            except LensError as exc:
                failing = _note(failing, "the Lens is unavailable", exc)
            except (ForumError, OSError) as exc:
                failing = _note(failing, "could not write a job back; it stays due", exc)
            else:
                if failing is not None:
                    log.info("reaper: working again")
                failing = None
            if written == self._batch:
                continue  # more may be due right now
            await wait_event(stop, self._interval)


def _note(failing: str | None, what: str, exc: Exception) -> str:
    if failing != what:
        log.warning("reaper: %s (%s); retrying", what, exc)
    return what
