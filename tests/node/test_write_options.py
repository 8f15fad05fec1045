"""The write options' checks and Properties (node/forum/node/core/write_options.py): the
fast way of a write with a ttl, a priority or both (``expiring_properties``)
gives what ``write_properties`` gives, and refuses what it refuses, whatever
the write before it was."""

from __future__ import annotations

import math
import random

import pytest

from forum.node.core.entries import Properties
from forum.node.core.write_options import expiring_properties, is_priority_alone, write_properties

NOW = 1_800_000_000.1205  # mid-millisecond


def test_expiring_properties_are_write_properties() -> None:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    ttls: list[float | None] = [None, 0.001, 0.5, 1, 60, 3600.25, 86_400]
    priorities = [-128, -7, 0, 3, 127]
    now = NOW
    for _ in range(2_000):
        ttl, priority = rng.choice(ttls), rng.choice(priorities)
        if rng.random() < 0.2:  # equal values, other objects: checked again
            ttl = None if ttl is None else float(ttl) + 0.0
        now += rng.choice((0.0, 0.0001, 0.0004, 0.001, 0.7))
        got = expiring_properties(now, ttl, priority)
        assert got == write_properties(now, ttl=ttl, priority=priority), f"seed {seed}"
        assert type(got) is Properties


def test_a_burst_shares_one_properties_object_until_the_next_millisecond() -> None:
    ttl, priority = 30.0, 2
    first = expiring_properties(NOW, ttl, priority)
    assert expiring_properties(NOW + 0.0002, ttl, priority) is first  # the same ms
    later = expiring_properties(NOW + 0.001, ttl, priority)
    assert later is not first and later.expires == first.expires + 1


@pytest.mark.parametrize(
    ("ttl", "priority", "message"),
    [
        (math.nan, 0, "ttl is a number"),
        (math.inf, 0, "ttl is a number"),
        (-1.0, 0, "ttl must be > 0"),
        (0, 0, "ttl must be > 0"),
        (True, 0, "ttl is a number"),
        (60.0, 128, "priority must be -128 to 127"),
        (60.0, 1.0, "priority is a whole number"),
        (60.0, True, "priority is a whole number"),
    ],
)
def test_a_bad_option_is_refused_after_good_ones(ttl: float, priority: int, message: str) -> None:
    """The options of the write before are not checked again, by identity:
    the same values as other objects, or others, are checked (a NaN is never
    the one before, which passed)."""
    good_ttl, good_priority = 60.0, 1
    expiring_properties(NOW, good_ttl, good_priority)
    expiring_properties(NOW, good_ttl, good_priority)
    with pytest.raises(ValueError, match=message):
        expiring_properties(NOW, ttl, priority)
    with pytest.raises(ValueError, match=message):
        write_properties(NOW, ttl=ttl, priority=priority)


def test_a_priority_alone_is_one_shared_object_and_nothing_else_is() -> None:
    """A write with a priority and no other option gets the Properties made
    once for that priority (the Forum makes such writes live as plain ones,
    ``is_priority_alone``); any other option makes them something else."""
    for priority in (-128, -1, 0, 1, 127):
        alone = expiring_properties(NOW, None, priority)
        assert alone is write_properties(NOW, priority=priority)
        assert alone is expiring_properties(NOW + 5, None, priority)
        assert is_priority_alone(alone)
        assert not is_priority_alone(expiring_properties(NOW, 60.0, priority))
        assert not is_priority_alone(write_properties(NOW, priority=priority, delay=1))
        assert not is_priority_alone(write_properties(NOW, priority=priority, key=b"k"))
        assert not is_priority_alone(Properties(priority=priority, pause=True))
    assert not is_priority_alone(Properties(priority=3))  # equal, but not the one made once
