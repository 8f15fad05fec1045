"""The Jobs page's parts that need no server: a job's attempts read from its
history (forum.dashboard.timeline), a bulk action's flash line
(forum.dashboard.bulk.said) and the search form's checks
(forum.dashboard.listing.JobSearch)."""

from __future__ import annotations

import pytest

from forum.coordinator import HistoryEvent
from forum.dashboard.bulk import said
from forum.dashboard.listing import JobSearch
from forum.dashboard.timeline import timeline_of


def event(at: float, name: str, token: int, owner: str = "w1", attempt: int = 1) -> HistoryEvent:
    return HistoryEvent(at, name, token, owner, attempt)


def test_each_claim_is_an_attempt_closed_by_the_end_of_its_token() -> None:
    timeline = timeline_of([
        event(10.0, "claimed", 7),
        event(12.5, "released", 7),
        event(13.0, "claimed", 9, "w2", 2),
        event(13.0, "reoffered", 0, "", 0),  # nobody's claim: closes none
        event(14.0, "completed", 9, "w2", 2),
        event(20.0, "claimed", 11, "w3", 3),
    ])  # fmt: skip
    first, second, third = timeline.attempts
    assert (first.number, first.worker, first.duration, first.outcome) == (1, "w1", 2.5, "released")
    assert (second.number, second.worker, second.duration, second.said) == (
        2,
        "w2",
        1.0,
        "completed",
    )
    assert (third.ended, third.duration) == (None, None)
    assert timeline.running(11) == third and timeline.running(9) is None
    assert [e.event for e in timeline.others] == ["reoffered"]


def test_an_end_whose_claim_the_history_no_longer_holds_is_kept_beside() -> None:
    timeline = timeline_of([event(5.0, "expired", 3), event(6.0, "claimed", 4, attempt=2)])
    assert [a.token for a in timeline.attempts] == [4]
    assert [e.event for e in timeline.others] == ["expired"]


def test_a_bulk_flash_counts_each_outcome_and_names_the_others_keys() -> None:
    outcomes = [("a", "retried"), ("b", "was not dead"), ("c", "retried"), ("d", "retried")]
    assert said("retry", outcomes) == "3 retried, 1 was not dead (b)"
    many = [(f"k{n}", "not found") for n in range(7)]
    assert said("delete", many) == "7 not found (k0, k1, k2, k3, k4, +2)"
    assert said("cancel", [("x", "was over already"), ("y", "cancelled")]) == (
        "1 cancelled, 1 was over already (x)"
    )


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ({"state": "bogus"}, "no job state 'bogus'"),
        ({"limit": "0"}, "limit: 1 to 500"),
        ({"limit": "many"}, "limit: a whole number"),
        ({"order": "sideways"}, "order: newest or oldest"),
        ({"since": "yesterday"}, "since: a time as YYYY-MM-DDTHH:MM"),
        ({"since": "2026-12-06T05:00", "until": "2026-12-06T04:00"}, "is after until"),
    ],
)
def test_a_search_no_page_can_run_is_one_line(query: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        JobSearch.of(query)


def test_a_search_keeps_its_query_for_the_next_page() -> None:
    search = JobSearch.of({"app": "nu/", "state": "dead", "since": "2026-12-06T04:00"})
    assert search.since_time == 1796529600.0
    assert search.query(cursor="c2") == {
        "app": "nu/", "state": "dead", "since": "2026-12-06T04:00", "order": "newest",
        "limit": "50", "cursor": "c2",
    }  # fmt: skip
    assert search.narrowed and not JobSearch.of({"app": "nu/"}).narrowed
