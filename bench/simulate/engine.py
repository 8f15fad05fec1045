"""The event loop, CPU queues and the network of the simulation.

Time is in seconds, a float. Events sit in one heap ordered by (time, sequence),
so two runs with one seed replay the same history: nothing here reads the
clock or iterates a set whose order could differ.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

Action = Callable[[], object]


class Sim:
    """A heap of timed actions; :meth:`run` fires them in order."""

    def __init__(self, seed: int) -> None:
        self.now = 0.0
        self.rng = random.Random(seed)
        self._heap: list[tuple[float, int, Action]] = []
        self._seq = 0
        self.events = 0

    def at(self, when: float, action: Action) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (max(when, self.now), self._seq, action))

    def after(self, delay: float, action: Action) -> None:
        self.at(self.now + delay, action)

    def every(self, period: float, action: Action, jitter: float = 0.0) -> None:
        """Run ``action`` every ``period`` (+- ``jitter`` of it) for ever."""

        def tick() -> None:
            action()
            self.after(period * (1 + jitter * (2 * self.rng.random() - 1)), tick)

        self.after(period * self.rng.random(), tick)

    def run(self, until: float, done: Callable[[], bool] | None = None) -> None:
        """Fire actions up to ``until``, or until ``done()`` holds (checked
        every 1,000 events)."""
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] <= until:
            when, _, action = pop(heap)
            self.now = when
            action()
            self.events += 1
            if done is not None and self.events % 1000 == 0 and done():
                return
        self.now = max(self.now, until) if not heap or heap[0][0] > until else self.now


class Cpu:
    """A FIFO queue in front of ``cores`` identical cores: a process (one
    core), or a host whose processes share its cores (the calibration's
    2-core machine). ``busy`` is the CPU time handed out, per account."""

    def __init__(self, sim: Sim, cores: int = 1) -> None:
        self.sim = sim
        self.free = [0.0] * cores
        self.busy: dict[str, float] = {}

    def run(self, cost: float, account: str, then: Action | None = None) -> float:
        """Queue ``cost`` seconds of work; ``then`` runs when it is done.
        Returns the time it will be done."""
        free = self.free
        k = 0 if len(free) == 1 else free.index(min(free))
        start = max(self.sim.now, free[k])
        end = start + cost
        free[k] = end
        self.busy[account] = self.busy.get(account, 0.0) + cost
        if then is not None:
            self.sim.at(end, then)
        return end

    def stall(self, duration: float) -> None:
        """A GC pause or an fsync stall: nothing runs for ``duration``."""
        self.free = [max(f, self.sim.now) + duration for f in self.free]

    def backlog(self) -> float:
        """Seconds of queued work ahead of a new task."""
        return max(0.0, min(self.free) - self.sim.now)


@dataclass(frozen=True, slots=True)
class Latency:
    """One link class's one-way delay: uniform in [low, high] seconds, and
    with probability ``tail_p`` a Pareto(``tail_alpha``) multiple of it
    (the heavy tail: a retransmit, a GC on the path)."""

    low: float
    high: float
    tail_p: float = 0.01
    tail_alpha: float = 1.5

    def sample(self, rng: random.Random) -> float:
        base = rng.uniform(self.low, self.high)
        if rng.random() < self.tail_p:
            base *= min(rng.paretovariate(self.tail_alpha), 200.0)
        return base


class Net:
    """One-way message delays between zones, and partitions.

    Endpoints are named; ``cut`` holds pairs of endpoint *classes* (a name's
    part before the first ``/``, e.g. ``g3`` for every member of group 3, or a
    full name) that cannot reach each other. A message over a cut link is
    dropped: the sender's timeout is what notices.
    """

    def __init__(self, sim: Sim, intra: Latency, cross: Latency) -> None:
        self.sim = sim
        self.intra = intra
        self.cross = cross
        self.cut: set[frozenset[str]] = set()
        self.messages = 0

    def blocked(self, a: str, b: str) -> bool:
        if not self.cut:
            return False
        for x in (a, a.split("/", 1)[0]):
            for y in (b, b.split("/", 1)[0]):
                if frozenset((x, y)) in self.cut:
                    return True
        return False

    def delay(self, zone_a: int, zone_b: int) -> float:
        link = self.intra if zone_a == zone_b else self.cross
        return link.sample(self.sim.rng)

    def send(
        self, a: str, zone_a: int, b: str, zone_b: int, action: Action, at: float | None = None
    ) -> bool:
        """Deliver ``action`` at ``b`` the link's delay after ``at`` (the
        sender's CPU is done then; default now); False (and nothing
        delivered) when the link is cut."""
        self.messages += 1
        if self.blocked(a, b):
            return False
        start = self.sim.now if at is None else at
        self.sim.at(start + self.delay(zone_a, zone_b), action)
        return True


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
