"""Jittered exponential backoff: how long to wait before trying a peer again.

"Equal jitter": the n-th wait is uniform in ``[c/2, c]`` with
``c = min(cap, base * 2**n)``, so nodes that lost a peer at the same moment do
not all call it again at the same moment when it returns, and no wait is
close to zero (a refusing peer is not hammered).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Backoff:
    base: float
    cap: float
    rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 <= self.base <= self.cap:
            raise ValueError("backoff needs 0 <= base <= cap")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0 for the first)."""
        ceiling = min(self.cap, self.base * 2 ** min(attempt, 62))
        return self.rng.uniform(ceiling / 2, ceiling)
