"""Exponential backoff with jitter: how long to wait after the n-th failure in a row.

One policy for every retry loop in Forum: replication's calls and anti-entropy
rounds, a job's next attempt, the coordinator's loops through an outage::

    after failure n (n = 1, 2, ...): wait uniform in [c * (1 - jitter), c],
                                     c = min(cap, base * 2**(n-1))

``jitter`` 0.5 is "equal jitter": callers that failed at the same moment (nodes
that lost one peer, jobs that failed together) do not all try again at the
same moment, and no wait is close to zero (a refusing peer is not hammered).
``jitter`` 0 is plain doubling, for a loop that is alone in waiting.

Why not a library's: redis-py's ``redis.backoff`` classes would make ``forum
serve`` (node and replication) import redis, and they draw from the
module-wide ``random``, so a test cannot seed them; tenacity's waits are bound
to its retry loop (they take a ``RetryCallState``), its jitter is added
seconds (``wait_exponential_jitter``) or full (``wait_random_exponential``),
not the fraction a job's retry options document, and the loops here stop on
a lease running out or a stop event and clip each sleep to what the lease has
left, which would take more code around tenacity than this module holds.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

#: Draws for callers that bring no generator of their own.
_RNG = random.Random()


@dataclass(frozen=True, slots=True)
class Backoff:
    """``base`` seconds after the first failure, doubling up to ``cap``, less up
    to ``jitter`` (a fraction) of it at random. The defaults are a job's."""

    base: float = 1.0
    cap: float = 300.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.base < 0 or self.cap < self.base or not 0 <= self.jitter <= 1:
            raise ValueError("backoff needs 0 <= base <= cap and 0 <= jitter <= 1")

    def delay(self, failures: int, rng: random.Random = _RNG) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (1 for the first)."""
        ceiling = min(self.cap, self.base * 2.0 ** min(max(failures - 1, 0), 64))
        return ceiling * (1 - self.jitter * rng.random())

    def delays(self, rng: random.Random = _RNG) -> Iterator[float]:
        """The waits after failures 1, 2, 3, ... of one run: a retry loop takes
        ``next()`` of it after each failure and starts a new one after a success."""
        failures = 0
        while True:
            failures += 1
            yield self.delay(failures, rng)
