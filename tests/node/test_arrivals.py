"""When this node came to hold what (node/forum/node/space/arrivals.py): the marks of its
vector, the dates they give entries, and the marks a Forum keeps so that
its live and reserved tuples stay dated, with no peer (the lag's side of
the marks is tests/replication/test_lag.py). Pure computations with the
times given, then a real Forum noting on its own timer (shortened)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from forum.node.core.entries import EntryId
from forum.node.core.space import Pattern
from forum.node.space import arrivals as arrivals_module
from forum.node.space import noting as forum_module
from forum.node.space.arrivals import Arrivals, below, lowest
from forum.node.space.forum import Forum


def noted(*held: tuple[float, dict[str, int]]) -> Arrivals:
    arrivals = Arrivals()
    for at, vector in held:
        arrivals.note(vector, at)
    return arrivals


def test_an_entry_is_dated_by_the_first_note_that_found_it_held() -> None:
    """t=0 held 5, t=1 held 8, then quiet until t=9: 6..8 were held by t=1,
    however long nothing arrived after (a quiet spell moves no date)."""
    arrivals = noted(
        (0.0, {"a": 5}), (1.0, {"a": 8}), *((float(t), {"a": 8}) for t in range(2, 10))
    )
    assert arrivals.held_by("a", 3) == 0.0  # held at the first note: dated from the start
    assert arrivals.held_by("a", 6) == 1.0
    assert arrivals.held_by("a", 8) == 1.0
    assert arrivals.held_by("a", 9) is None  # not held at the last note: no date yet
    assert arrivals.held_by("b", 1) is None
    # An origin first seen at t=10: held none of it at t=9, all of it by t=10.
    arrivals.note({"a": 8, "b": 2}, 10.0)
    assert arrivals.held_by("b", 1) == 10.0


def test_letting_go_of_marks_below_a_floor_keeps_every_date_above_it() -> None:
    arrivals = noted(*((float(t), {"a": 10 * t}) for t in range(1, 30)))
    dates = {seq: arrivals.held_by("a", seq) for seq in range(151, 291)}
    arrivals.forget_below({"a": 150})
    assert {seq: arrivals.held_by("a", seq) for seq in dates} == dates
    assert len(arrivals.marks["a"].seqs) == 15  # the latest at or below 150, and those above


def test_past_the_cap_an_age_only_reads_younger(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thinning drops marks: an entry is then dated by a later one (an age
    shorter than the truth), never by an earlier."""
    monkeypatch.setattr(arrivals_module, "MAX_MARKS", 8)
    arrivals = noted(*((float(t), {"a": t}) for t in range(1, 41)))
    assert len(arrivals.marks["a"].seqs) <= 8
    for seq in range(2, 41):
        held = arrivals.held_by("a", seq)
        assert held is not None and held >= seq  # truly held from t=seq


def test_the_floors_are_the_least_any_reader_needs() -> None:
    held = {"a": 90, "b": 40, "c": 7}
    live = below([("a", 12), ("b", 30), ("a", 5)])
    assert live == {"a": 4, "b": 29}
    # replication says its lag needs a up to 50, b up to 10 (and names d, unheld)
    assert lowest(held, live, {"a": 50, "b": 10, "d": 1}) == {"a": 4, "b": 10, "c": 7}


async def until(predicate: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + 10.0
    while True:
        found = predicate()
        if found is True or (not isinstance(found, bool) and await found):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def test_a_node_alone_dates_its_live_tuples_and_keeps_their_marks(
    forum: Forum, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no peer the Forum notes what it holds (every 0.5 s; 0.02 here)
    and keeps the marks that date its oldest live tuple, a reserved one too,
    while newer tuples come and go; once it is gone, they go."""
    monkeypatch.setattr(forum_module, "NOTE_INTERVAL", 0.02)
    async with forum:
        old = await forum.write(b"g/old")
        await until(lambda: forum.arrivals.held_by(old.origin, old.seq) is not None, "noted")
        held = forum.arrivals.held_by(old.origin, old.seq)
        assert held is not None
        assert forum.oldest_ages([b"g/", b"none/"]).keys() == {b"g/"}
        for n in range(20):  # a note or more between each: a mark each
            await forum.write(b"g/%d" % n)
            notes = forum.arrivals.last
            await until(lambda n=notes: forum.arrivals.last != n, "a note")
            assert await forum.take(Pattern(b"g/%d" % n)) is not None
        reserved = await forum.reserve(Pattern(b"g/old"), lease=60)
        assert reserved is not None
        await forum.write(b"g/later")
        notes = forum.arrivals.last
        await until(lambda: forum.arrivals.last != notes, "a note while it is reserved")
        assert await forum.release(reserved.id)
        assert forum.arrivals.held_by(old.origin, old.seq) == held
        age = forum.oldest_ages([b"g/"])[b"g/"]
        assert age == pytest.approx(time.monotonic() - held, abs=0.05)
        assert age > 0.2  # 20 notes and more: it grows as it waits
        # Taken: the marks that dated it are let go (one kept below the floor).
        assert await forum.take(Pattern(b"g/old")) is not None
        notes = forum.arrivals.last
        await until(lambda: forum.arrivals.last != notes, "a note after the take")
        assert len(forum.arrivals.marks[old.origin].seqs) <= 3
        assert forum.arrivals.held_by(old.origin, old.seq) != held
    assert forum.arrivals.last is not None


async def test_a_forum_not_entered_notes_nothing(forum: Forum) -> None:
    """The timer starts with ``async with``: a Forum only made (a replay
    benchmark) has no dates, and answers an age of 0 for what it holds."""
    entry_id = await forum.write(b"g/1")
    assert forum.arrivals.started is None
    assert forum.arrivals.held_by(entry_id.origin, entry_id.seq) is None
    assert forum.oldest_ages([b"g/"]) == {b"g/": 0.0}


def test_entry_ids_date_by_origin_and_seq() -> None:
    """Origins are dated apart: one's marks say nothing of another's seqs."""
    arrivals = noted((0.0, {"a": 2}), (1.0, {"a": 2, "b": 5}))
    assert [arrivals.held_by(e.origin, e.seq) for e in (EntryId("a", 2), EntryId("b", 5))] == [
        0.0,
        1.0,
    ]
