"""``Reserved.deliveries``: how many times a tuple was handed out on a lease
that ran out. A job that kills whoever runs it shows here, so a worker can
bury it instead of running it forever."""

from __future__ import annotations

from forum.node.core.entries import Reserved, Tuple
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.fixtures.nodes import eventually

JOBS = Pattern(b"job/")


async def _lapse(forum: Forum) -> Reserved:
    """Reserve the job on a short lease and let the lease run out."""
    handed = await forum.reserve(JOBS, lease=0.02)
    assert handed is not None
    await eventually(lambda: not forum.stats().reserved, what="the lease ran out")
    return handed


async def test_each_lease_that_runs_out_counts_one_delivery(forum: Forum) -> None:
    await forum.write(b"job/poison")
    assert [(await _lapse(forum)).deliveries for _ in range(3)] == [1, 2, 3]
    fourth = await forum.reserve(JOBS, lease=30)
    assert fourth is not None and fourth.deliveries == 4


async def test_a_release_or_an_extension_does_not_count(forum: Forum) -> None:
    await forum.write(b"job/1")
    first = await forum.reserve(JOBS, lease=30)
    assert first is not None and first.deliveries == 1
    assert await forum.extend(first.id, lease=30)
    assert await forum.release(first.id)
    again = await forum.reserve(JOBS, lease=30)
    assert again is not None and again.deliveries == 1


async def test_the_count_belongs_to_the_tuple_and_goes_with_it(forum: Forum) -> None:
    """A second tuple starts at 1; once the lapsed one is taken its count is
    forgotten (nothing grows with the history), and a take or a read hands out
    the plain tuple."""
    first = await forum.write(b"job/1")
    await _lapse(forum)
    second = await forum.write(b"job/2")
    assert await forum.read_entry(JOBS) == Tuple(first, b"job/1")
    again = await forum.reserve(JOBS, lease=30)
    other = await forum.reserve(JOBS, lease=30)
    assert again is not None and (again.id, again.deliveries) == (first, 2)
    assert other is not None and (other.id, other.deliveries) == (second, 1)
    assert await forum.ack_many([first, second]) == [True, True]
    assert not forum._reservations.lapses  # the lapsed tuple is gone, so is its count


async def test_reserve_many_carries_the_count_of_each(forum: Forum) -> None:
    await forum.write_many([b"job/1", b"job/2"])
    [lapsed] = await forum.reserve_many(JOBS, lease=0.02, limit=1)
    await eventually(lambda: not forum.stats().reserved, what="the lease ran out")
    reserved = await forum.reserve_many(JOBS, lease=30, limit=5)
    assert [(r.payload, r.deliveries) for r in reserved] == [(b"job/1", 2), (b"job/2", 1)]
    assert lapsed.deliveries == 1
