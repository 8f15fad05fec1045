"""The Schedule's timetable (node/forum/node/space/schedule.py): ids handed back at their exact
times, in time order, ties in the order added, whichever bucket (second)
they were kept in; checked case by case and against a heap, on times the
test chooses (no clock)."""

from __future__ import annotations

import heapq
import random
from array import array

from forum.node.core.entries import EntryId
from forum.node.space.schedule import TICK_MS, Timetable

A, B = "a-1", "b-2"


def ids(*seqs: int, origin: str = A) -> list[EntryId]:
    return [EntryId(origin, seq) for seq in seqs]


def test_ids_come_at_their_time_in_time_order_ties_as_added() -> None:
    table = Timetable()
    for seq, at in ((1, 5_300), (2, 5_100), (3, 9_000), (4, 5_100), (5, 2_050)):
        table.add(EntryId(A, seq), at)
    assert table.pop_due(2_049) == []
    assert table.pop_due(5_100) == ids(5, 2, 4)
    assert table.pop_due(8_999) == ids(1)
    assert table.pop_due(10**9) == ids(3)
    assert table.next_time() is None


def test_a_second_that_has_begun_hands_back_nothing_before_its_time() -> None:
    """The bucket's second starts at 7_000: what is in it comes at 7_400, not then."""
    table = Timetable()
    table.add(EntryId(A, 1), 7_400)
    assert table.next_time() == 7 * TICK_MS  # the bucket's start: it is sorted then
    assert table.pop_due(7_000) == []
    assert table.next_time() == 7_400  # the exact time, once its second is current
    assert table.pop_due(7_399) == []
    assert table.pop_due(7_400) == ids(1)


def test_a_time_added_within_the_current_second_takes_its_place() -> None:
    table = Timetable()
    table.add(EntryId(A, 1), 3_800)
    table.add(EntryId(A, 2), 3_200)
    assert table.pop_due(3_200) == ids(2)  # second 3 is current now
    assert table.add(EntryId(B, 3), 3_500) == 3_500  # into its place, not a bucket
    table.add(EntryId(A, 4), 3_800)  # a tie: after the one added before it
    table.add(EntryId(A, 5), 3_100)  # already past: handed back at the next look
    assert table.next_time() == 3_100
    assert table.pop_due(3_300) == ids(5)
    assert table.pop_due(3_900) == [EntryId(B, 3), *ids(1, 4)]


def test_a_look_late_by_many_seconds_hands_back_all_of_them_in_order() -> None:
    table = Timetable()
    for seq in range(1, 11):
        table.add(EntryId(B if seq % 2 else A, seq), (11 - seq) * 1_500)
    assert [i.seq for i in table.pop_due(20_000)] == list(range(10, 0, -1))
    assert table.pop_due(10**9) == []


def test_a_run_hands_back_its_ids_in_the_order_appended_where_it_was_added() -> None:
    table = Timetable()
    table.add(EntryId(A, 1), 5_100)
    run, look = table.add_run(A, 5_100)
    assert look == 5 * TICK_MS
    run.extend((2, 3))
    table.add(EntryId(B, 4), 5_100)  # after the run: a later run for later ids
    late, _ = table.add_run(A, 4_200)
    late.append(5)
    run.append(6)  # (a caller would not: it added others since; here, to see where it goes)
    assert table.pop_due(4_999) == ids(5)
    assert table.pop_due(5_100) == [*ids(1, 2, 3, 6), EntryId(B, 4)]
    assert table.next_time() is None


def test_the_timetable_agrees_with_a_heap() -> None:
    """Ids added one by one and in runs (appended to while nothing else is
    added and nothing handed back, as the Forum does), against a heap."""
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    table, heap = Timetable(), list[tuple[int, int, EntryId]]()
    now, order = 10_000, 0
    run: tuple[array[int], str, int] | None = None  # the open run, its origin and time
    for _ in range(3_000):
        if run is not None and rng.random() < 0.5:
            seqs, origin, at = run
            order += 1
            seqs.append(order)
            heapq.heappush(heap, (at, order, EntryId(origin, order)))
        elif rng.random() < 0.6:
            order += 1
            entry_id = EntryId(rng.choice((A, B)), order)
            at = now + rng.choice((-50, 0, 1, 30, 999, 1_000, 2_500, 40_000))
            if rng.random() < 0.3:
                seqs, look = table.add_run(entry_id.origin, at)
                seqs.append(order)
                run = (seqs, entry_id.origin, at)
            else:
                look = table.add(entry_id, at)
                run = None
            assert look <= at and (look == at or look % TICK_MS == 0)
            heapq.heappush(heap, (at, order, entry_id))
        else:
            run = None
            now += rng.choice((0, 1, 7, 250, 1_000, 3_333))
            expected = []
            while heap and heap[0][0] <= now:
                expected.append(heapq.heappop(heap)[2])
            assert table.pop_due(now) == expected, f"seed {seed}"
            next_time = table.next_time()
            if heap:  # never later than the earliest time kept
                assert next_time is not None and now < next_time <= heap[0][0]
            else:
                assert next_time is None
