"""Limits on jobs, held in the Lens for every worker at once: at most N
running (concurrency) and at most R started a second (rate), per task or per
limit key (a customer, a tenant).

A job is **admitted** before it is claimed, and only then: a job over a
limit is not claimed, so it is not counted as an attempt; the worker parks
its reservation for the wait the Lens named (forum.coordinator.admitting)
and offers it again after. The pieces:

* :class:`Limit`: one named limit, ``running`` and/or ``rate``.
* :class:`Ask`: what one job needs admitted: every one of its limits, all or
  none. They live in the Lens shard of the ask's ``group`` (the task), so one
  script admits all of a job's limits atomically (``lua/admit.lua``): no
  job holds a slot of one limit while refused by another.
* :class:`Limiter`: the authority's side (:class:`forum.coordinator.Lens`,
  :class:`forum.coordinator.memory.MemoryAuthority`).
* :class:`Admission`: the worker's seam; :class:`Admitter` is the one the
  task layer builds (forum.tasks.limits), from a function that tells the
  :class:`Ask` of a job's payload.

What holds exactly, and why a dead worker never leaks a slot:

* ``running``: a sorted set of the admitted jobs' claim keys, each scored by
  its expiry (Redis ``TIME`` + the worker's lease). Admission first drops the
  expired members, then admits while fewer than ``running`` remain. The
  worker extends its jobs' admissions with its heartbeat and releases them
  when the job ends; a worker that dies stops extending, and its members
  expire with the lease. A heartbeat that cannot extend an admission cancels
  the handler, as a lost claim does, so at most ``running`` handlers run at
  every instant (give or take the clocks' drift within one lease).
* ``rate``: GCRA with a burst of 1 (one "theoretical arrival time", the
  next turn, per limit, a string): a job is admitted from half an interval
  (``1/(2 rate)`` s) before the turn, and moves the turn on by ``1/rate``
  s. The half interval lets a job that asks a little late (the trip from
  its parking back to the Lens) still take its turn, so the rate is kept
  rather than lost to lateness: over any window of ``t`` seconds at most
  ``t x rate + 1`` are admitted, and no two closer than half an interval.
  A job admitted whose claim is refused (a copy of a job done or held
  elsewhere) has spent its turn: the rate errs on the slow side.

Fairness is best effort: within one batch a worker asks the Lens to admit,
jobs take turns by their limit key (:meth:`Admitter._taking_turns`); across
workers, parked jobs go back to the space in its order.

The wait a refusal answers is exact for a rate (to the next turn, less the
half interval) and, for a concurrency limit, the time to the first member's
expiry capped at :data:`POLL` (with jitter). A job refused by a concurrency
limit is also woken sooner: its :class:`Wait` names the limits (``on``),
and when this worker ends an admission that held a slot of one of them
(:meth:`Admitter.release` tells which), it releases the job at once to be
offered again (forum.coordinator.admitting). A slot freed by another
worker is found within a poll. Waking only asks again sooner: the Lens
still admits, so at most ``running`` hold at every instant.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

#: The longest a job refused by a concurrency limit waits before asking
#: again (a release frees a slot before the members' expiry tells).
POLL = 0.25


@dataclass(frozen=True, slots=True)
class Limit:
    """At most ``running`` jobs admitted under ``name`` at once, and at most
    ``rate`` admitted a second; ``None`` for no such bound."""

    name: str
    running: int | None = None
    rate: float | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a limit's name must not be empty")
        if self.running is not None and (
            isinstance(self.running, bool) or not isinstance(self.running, int) or self.running < 1
        ):
            raise ValueError(f"running must be a whole number from 1, not {self.running!r}")
        if self.rate is not None and not (
            isinstance(self.rate, int | float) and math.isfinite(self.rate) and self.rate > 0
        ):
            raise ValueError(f"a rate must be a positive number a second, not {self.rate!r}")
        if self.running is None and self.rate is None:
            raise ValueError(f"limit {self.name!r} bounds nothing: give running or rate")


@dataclass(frozen=True, slots=True)
class Ask:
    """What the job with claim key ``member`` needs admitted: every one of
    ``limits``, kept in the Lens shard of ``group``."""

    member: str
    group: str
    limits: tuple[Limit, ...]

    def __post_init__(self) -> None:
        if not self.member or not self.group or not self.limits:
            raise ValueError("an ask needs a member, a group and at least one limit")

    @property
    def holds(self) -> bool:
        """Whether an admission holds a slot to extend and release (a
        concurrency limit does; a rate's turn is spent once taken)."""
        return any(limit.running is not None for limit in self.limits)

    @property
    def slots(self) -> tuple[str, ...]:
        """The names of its concurrency limits (each holds a slot of them)."""
        return tuple(limit.name for limit in self.limits if limit.running is not None)


@dataclass(frozen=True, slots=True)
class Wait:
    """One job's answer from :meth:`Admission.admit`: admitted when
    ``seconds`` is 0, else to be parked that long, or until a slot of one of
    the concurrency limits ``on`` frees on this worker, if sooner."""

    seconds: float = 0.0
    on: tuple[str, ...] = ()


#: The answer for a job admitted, or under no limit.
ADMITTED = Wait()


@runtime_checkable
class Limiter(Protocol):
    """The authority that keeps limits (the Lens, the memory authority)."""

    async def admit_many(self, asks: Sequence[Ask], lease: float) -> list[tuple[float, bool]]:
        """Admit each ask, all its limits or none, its slots held ``lease``
        seconds: per ask ``(0.0, False)`` admitted, else ``(wait, exact)``:
        seconds until worth asking again, ``exact`` when only a rate said so
        (else the wait is to the earliest expiry of a full limit's slots)."""
        ...

    async def extend_admitted(self, asks: Sequence[Ask], lease: float) -> list[bool]:
        """Renew each admitted ask's slots to ``lease`` seconds from now;
        ``False`` for one no longer admitted (its slot expired)."""
        ...

    async def release_admitted(self, asks: Sequence[Ask]) -> None:
        """Free each ask's slots now (a rate's turn stays spent)."""
        ...


class Admission(Protocol):
    """The worker's seam: whether jobs may be claimed now, and their
    admissions kept while they run (forum.coordinator.worker)."""

    async def admit(self, jobs: Sequence[tuple[str, bytes]], lease: float) -> list[Wait]:
        """For each ``(claim key, payload)``: :data:`ADMITTED` (or under no
        limit), else how long to park it before it is offered again."""
        ...

    async def extend(self, keys: Sequence[str], lease: float) -> list[bool]:
        """Renew the admissions of the running jobs ``keys``; ``False`` for
        one lost (its handler must stop)."""
        ...

    async def release(self, keys: Sequence[str]) -> list[str]:
        """End the admissions of ``keys`` (their jobs ended or were not
        claimed); the name of the limit of each slot this freed."""
        ...


class Admitter:
    """The :class:`Admission` of jobs whose :class:`Ask` ``ask(key,
    payload)`` tells (``None``: under no limit), kept by ``limiter``.

    Remembers the admitted asks that hold slots, to extend and release them;
    a job under no limit costs no call."""

    def __init__(
        self,
        limiter: Limiter,
        ask: Callable[[str, bytes], Ask | None],
        rng: random.Random | None = None,
    ) -> None:
        self._limiter = limiter
        self._ask = ask
        self._rng = rng or random.Random()
        self._held: dict[str, Ask] = {}
        #: Which limit key goes first in the next batch (:meth:`_taking_turns`).
        self._turn = 0

    async def admit(self, jobs: Sequence[tuple[str, bytes]], lease: float) -> list[Wait]:
        asks = [self._ask(key, payload) for key, payload in jobs]
        limited = self._taking_turns([ask for ask in asks if ask is not None])
        if not limited:
            return [ADMITTED] * len(jobs)
        answers = dict(zip(limited, await self._limiter.admit_many(limited, lease), strict=True))
        waits = []
        for ask in asks:
            if ask is None:
                waits.append(ADMITTED)
                continue
            wait, exact = answers[ask]
            if wait <= 0:
                if ask.holds:
                    self._held[ask.member] = ask
                waits.append(ADMITTED)
            elif exact:
                waits.append(Wait(wait))
            else:
                # Jittered, so parked jobs of many workers do not ask in step.
                waits.append(Wait(min(wait, POLL * self._rng.uniform(0.5, 1.5)), ask.slots))
        return waits

    def _taking_turns(self, asks: list[Ask]) -> list[Ask]:
        """``asks`` in the order the Lens admits them (the first ones take a
        shared limit's free slots): round-robin by their last limit (the
        limit key's, where there is one), the first key moving on one each
        batch, so one key's many jobs do not take every slot of the task's
        limit from the others' few."""
        by_limit: dict[str, list[Ask]] = {}
        for ask in asks:
            by_limit.setdefault(ask.limits[-1].name, []).append(ask)
        if len(by_limit) < 2:
            return asks
        names = sorted(by_limit)
        self._turn = (self._turn + 1) % len(names)
        queues = [by_limit[name] for name in names[self._turn :] + names[: self._turn]]
        longest = max(map(len, queues))
        return [queue[i] for i in range(longest) for queue in queues if i < len(queue)]

    async def extend(self, keys: Sequence[str], lease: float) -> list[bool]:
        asks = [self._held[key] for key in keys if key in self._held]
        if not asks:
            return [True] * len(keys)
        kept = iter(await self._limiter.extend_admitted(asks, lease))
        return [next(kept) if key in self._held else True for key in keys]

    async def release(self, keys: Sequence[str]) -> list[str]:
        asks = [ask for key in keys if (ask := self._held.pop(key, None)) is not None]
        if not asks:
            return []
        await self._limiter.release_admitted(asks)
        return [name for ask in asks for name in ask.slots]
