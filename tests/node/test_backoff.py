"""The one backoff policy: each caller's range of waits, as documented."""

from __future__ import annotations

import itertools
import random

import pytest

from forum.node.core.backoff import Backoff


def test_equal_jitter_waits_half_to_all_of_a_doubling_capped_ceiling() -> None:
    """Replication's calls: after failure n, uniform in [c/2, c], c = min(max, base·2ⁿ⁻¹)."""
    backoff = Backoff(0.1, 1.0)
    rng = random.Random(3)
    for failures, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (100, 1.0)]:
        waits = [backoff.delay(failures, rng) for _ in range(50)]
        assert all(ceiling / 2 <= wait <= ceiling for wait in waits)
        assert len(set(waits)) > 1


def test_no_jitter_is_plain_doubling_to_the_cap() -> None:
    """The coordinator's outage loops: 0.05 s, doubling, never past the cap."""
    waits = list(itertools.islice(Backoff(base=0.05, cap=1.0, jitter=0.0).delays(), 7))
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_a_run_of_failures_far_past_the_cap_stays_at_the_cap() -> None:
    assert Backoff(base=1.0, cap=5.0, jitter=0.0).delay(10_000) == 5.0


@pytest.mark.parametrize(
    ("base", "cap", "jitter"), [(-1.0, 1.0, 0.5), (2.0, 1.0, 0.5), (1.0, 2.0, 1.5)]
)
def test_a_policy_that_cannot_hold_is_refused(base: float, cap: float, jitter: float) -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(base=base, cap=cap, jitter=jitter)
