"""The patterns a worker reserves from, and their weights (:class:`Lanes`).

A worker of one pattern (every worker before queues, and an app's worker
serving all its queues) has one lane: each reserve is one request on that
pattern, exactly as without lanes (:attr:`Lanes.single`).

A worker of several lanes (``forum worker --queues emails:3,default:1``)
orders them afresh for each reserve, at random by weight, as Sidekiq's
weighted queues do: the first lane of the order is lane ``i`` with
probability ``weight[i] / sum(weights)``, the second is drawn the same way
from the rest, and so on (:meth:`Lanes.order`). The reserve tries the lanes
in that order and the first that has jobs gives them; the next ones fill
what slots are left. So two lanes that both hold work are served about in
the ratio of their weights, and a lane without work costs one empty request
while a busier one is not starved.

An idle worker does not poll: when no lane had a job, it waits in one
blocking reserve, on a lane drawn by weight (:meth:`Lanes.waiting`), up to
the worker's ``take_wait``. A job written meanwhile to another lane is
found by the next round's reserve, so it waits at most ``take_wait`` (2 s by
default) for an idle worker; one written to the lane waited on is answered
at once.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from forum.node.core.space import Pattern


@dataclass(frozen=True, slots=True)
class Lane:
    """One pattern a worker reserves from, and its weight (a whole number from 1)."""

    pattern: Pattern
    weight: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.weight, bool) or not isinstance(self.weight, int) or self.weight < 1:
            raise ValueError(f"a lane's weight is a whole number from 1, not {self.weight!r}")


class Lanes:
    """A worker's lanes, ordered by weight for each reserve (see the module
    docstring). ``rng`` draws the orders (a seeded one in tests)."""

    __slots__ = ("_lanes", "_rng", "single")

    def __init__(self, lanes: Sequence[Lane], rng: random.Random | None = None) -> None:
        if not lanes:
            raise ValueError("a worker serves at least one lane")
        prefixes = [lane.pattern.prefix for lane in lanes]
        if len(set(prefixes)) != len(prefixes):
            raise ValueError(f"a lane is given twice: {prefixes!r}")
        self._lanes = tuple(lanes)
        self._rng = rng or random.Random()
        #: The pattern of a worker with one lane (the path without lanes), else ``None``.
        self.single: Pattern | None = lanes[0].pattern if len(lanes) == 1 else None

    @classmethod
    def of(cls, pattern: Pattern | Lanes) -> Lanes:
        """``pattern`` as lanes: one pattern is one lane."""
        return pattern if isinstance(pattern, Lanes) else cls([Lane(pattern)])

    def __repr__(self) -> str:
        shown = ", ".join(f"{lane.pattern.prefix!r}:{lane.weight}" for lane in self._lanes)
        return f"<Lanes {shown}>"

    @property
    def prefixes(self) -> tuple[bytes, ...]:
        """Every lane's prefix, in the order given."""
        return tuple(lane.pattern.prefix for lane in self._lanes)

    def order(self) -> list[Pattern]:
        """Every lane's pattern, in a random order drawn by weight: each next
        lane is picked from those left with a chance proportional to its
        weight (Efraimidis and Spirakis' sort key ``u ** (1 / weight)``,
        ``u`` uniform in [0, 1), highest first)."""
        if self.single is not None:
            return [self.single]
        rng = self._rng
        keyed = sorted(
            self._lanes, key=lambda lane: rng.random() ** (1.0 / lane.weight), reverse=True
        )
        return [lane.pattern for lane in keyed]

    def waiting(self) -> Pattern:
        """The pattern an idle worker's blocking reserve waits on: drawn by weight."""
        if self.single is not None:
            return self.single
        return self._rng.choices(
            [lane.pattern for lane in self._lanes], [lane.weight for lane in self._lanes]
        )[0]
