"""Whether the Lens takes a worker's claims now, how long the worker waits
when it does not, and what the operator is told.

A worker whose claim (or heartbeat, or release) finds Redis unable to serve
the Lens fails closed: nothing runs without a claim, and the jobs it had
reserved are released, once. Then it backs off: it waits, asks the Lens
whether every shard takes a write now (:meth:`forum.coordinator.lens.Lens.ping`),
and only when the answer is yes reserves and claims again::

    t0       claim_many fails: OOM    -> unavailable ("full"): one warning;
                                         the batch's reservations released
    t0 + w1  ping fails (OOM)         -> wait w2
    ...                                  (waits doubling, jittered, capped)
    tn       ping passes              -> one reserve and claim are tried
    tn       the claims are granted   -> available: one line, with how long
                                         the outage lasted
             (or they fail again      -> unavailable still: the wait goes
                                         on growing from where it was)

The wait is reset by a granted claim, never by a passing check alone: a
Redis at the edge of full that answers the check and refuses the claims
costs one batch per wait, not a loop of reserves and releases.

What is logged: one warning when the Lens becomes unavailable, or the reason
changes (full, read-only, unreachable, ...: forum.coordinator.errors,
UNAVAILABLE); one line when it is available again; and, while it lasts, a
reminder every :data:`REMINDER` seconds with the jobs put back meanwhile.
Nothing else per failure, however many calls meet the outage.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from forum.coordinator.errors import LensError, LensUnavailable, UnavailableReason
from forum.node.core.backoff import Backoff
from forum.node.core.cancellation import wait_event

#: The worker's own logger: these lines are the worker's, and operators filter on its name.
log = logging.getLogger("forum.coordinator.worker")

#: The waits between checks while the Lens is unavailable: 0.05 s doubling up
#: to 2 s, less up to half at random, so workers that met one outage together
#: do not check (and reserve) in step.
OUTAGE_BACKOFF = Backoff(base=0.05, cap=2.0, jitter=0.5)
#: How often a reminder is logged while the Lens stays unavailable.
REMINDER = 60.0


@dataclass(frozen=True, slots=True)
class LensState:
    """The worker's view of the Lens now: ``reason`` is ``None`` while it
    takes claims, else why not (a word of forum.coordinator.errors.UNAVAILABLE)."""

    reason: UnavailableReason | None = None
    #: Seconds since the Lens became unavailable (0 while available).
    down_for: float = 0.0

    @property
    def available(self) -> bool:
        return self.reason is None


def reason_of(exc: LensError) -> UnavailableReason:
    """Why ``exc`` makes the Lens unavailable: a :class:`LensUnavailable`
    says; any other error (a script refused, a namespace this Lens cannot
    serve) is Redis refusing the Lens."""
    return exc.reason if isinstance(exc, LensUnavailable) else "refused"


class Availability:
    """The Lens's availability as one worker (``owner``) meets it.

    ``clock`` is ``time.monotonic`` but in tests; ``rng`` draws the jitter.
    """

    def __init__(
        self,
        owner: str,
        rng: random.Random,
        *,
        backoff: Backoff = OUTAGE_BACKOFF,
        reminder: float = REMINDER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._owner = owner
        self._rng = rng
        self._backoff = backoff
        self._reminder = reminder
        self._clock = clock
        self._reason: UnavailableReason | None = None
        #: Failures since the Lens last granted a claim: the back-off's step.
        self._failures = 0
        #: When the outage began, and when it was last logged.
        self._since = 0.0
        self._logged = 0.0
        #: Whether a check passed since the last failure: one try may go.
        self._checked = False
        #: Jobs put back since the outage began, for the reminder and the end.
        self._put_back = 0

    def state(self) -> LensState:
        """Available once a check passed (the outage, for the log, ends only
        with a granted claim, or a reserve that found nothing to claim)."""
        if self._reason is None or self._checked:
            return LensState()
        return LensState(self._reason, self._clock() - self._since)

    def may_try(self) -> bool:
        """Whether the worker may reserve and claim now: the Lens is
        available, or a check passed since the last failure."""
        return self._reason is None or self._checked

    def failed(self, exc: LensError, put_back: int = 0) -> None:
        """A call met ``exc``; ``put_back`` jobs were released because of it."""
        reason = reason_of(exc)
        now = self._clock()
        self._failures += 1
        self._checked = False
        self._put_back += put_back
        if self._reason is None:
            self._since = now
            self._put_back = put_back
        if reason != self._reason:
            self._reason = reason
            self._logged = now
            log.warning(
                "worker %s: the Lens is unavailable (%s): %s. Claiming nothing%s; "
                "checking again with back-off (at most every %.0fs)",
                self._owner, reason, exc,
                f", {put_back} reserved jobs released" if put_back else "",
                self._backoff.cap,
            )  # fmt: skip
        elif now - self._logged >= self._reminder:
            self._logged = now
            log.warning(
                "worker %s: the Lens is still unavailable (%s) after %.0fs; %d jobs "
                "released meanwhile; last error: %s",
                self._owner, reason, now - self._since, self._put_back, exc,
            )  # fmt: skip

    def checked(self) -> None:
        """A check passed: let one reserve and claim try (:meth:`may_try`)."""
        self._checked = True

    def idle(self) -> None:
        """A reserve after a passing check found nothing to claim: the Lens
        is taken as available (nothing will prove it sooner)."""
        if self._checked:
            self.granted()

    def granted(self) -> None:
        """The Lens granted claims: available again."""
        if self._reason is not None:
            log.info(
                "worker %s: the Lens is available again after %.1fs (%s); %d jobs were "
                "released meanwhile, none lost",
                self._owner, self._clock() - self._since, self._reason, self._put_back,
            )  # fmt: skip
        self._reason = None
        self._failures = 0
        self._checked = False
        self._put_back = 0

    def next_wait(self) -> float:
        """Seconds to wait before the next check (grows with each failure)."""
        return self._backoff.delay(max(self._failures, 1), self._rng)

    async def wait_until_checked(
        self, ping: Callable[[], Awaitable[None]], stopping: asyncio.Event
    ) -> None:
        """Back off while the Lens is unavailable: wait, then check that every
        shard takes a write (``ping``, :meth:`forum.coordinator.lens.Lens.ping`:
        under Cluster, each shard's own master), until one check passes or
        ``stopping`` is set. A passing check lets one reserve and claim try;
        only granted claims end the outage."""
        while not self.may_try() and not stopping.is_set():
            await wait_event(stopping, self.next_wait())
            if stopping.is_set():
                return
            try:
                await ping()
            except LensError as exc:
                self.failed(exc)
            else:
                self.checked()
