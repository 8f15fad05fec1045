"""The history checker judges runs by total-queue semantics plus unique effects."""

from __future__ import annotations

from forum.deploy.history import History


def _history() -> History:
    h = History()
    for job in ("a", "b", "c"):
        h.wrote(job, acknowledged=True)
    h.wrote("d", acknowledged=False)
    return h


def test_a_clean_run_is_valid() -> None:
    h = _history()
    h.delivered(["a", "b", "c", "a"])  # "a" delivered twice (a double take) ...
    h.applied(["a", "b", "c"])  # ... but its effect applied once
    v = h.check()
    assert v.valid
    assert (v.done, v.duplicate_deliveries, v.recovered) == (3, 1, 0)
    assert v.summary().startswith("OK: attempted=4 acknowledged=3 done=3 lost=0")


def test_lost_unexpected_and_duplicate_effects_fail_the_run() -> None:
    h = _history()
    h.applied(["a", "b", "b", "zz"])
    v = h.check()
    assert not v.valid
    assert v.lost == ("c",)
    assert v.unexpected == ("zz",)
    assert v.duplicate_effects == ("b",)
    assert "lost: c" in v.explain()


def test_an_unacknowledged_write_that_lands_is_recovered_not_unexpected() -> None:
    h = _history()
    h.applied(["a", "b", "c", "d"])
    v = h.check()
    assert v.valid and v.recovered == 1 and v.unexpected == ()
