"""The coordinator package's public surface: exactly these names."""

from forum import coordinator

EXPORTED = [
    "AlreadyClaimed",
    "AlreadyDone",
    "AttemptsSpent",
    "Backoff",
    "CancelOutcome",
    "Claim",
    "ClaimAuthority",
    "ClaimLost",
    "DeadLetter",
    "Failed",
    "GiveUp",
    "Handler",
    "HeldClaim",
    "HistoryEvent",
    "Holder",
    "Job",
    "KeyState",
    "Lane",
    "Lanes",
    "Lens",
    "LensConfig",
    "LensError",
    "LensStateLost",
    "LensUnavailable",
    "NotDue",
    "Reaper",
    "RetryAfter",
    "TakeOnly",
    "WorkSpace",
    "Worker",
    "WorkerPresence",
    "WorkerStats",
]


def test_all_is_exactly_the_public_names_sorted() -> None:
    assert coordinator.__all__ == EXPORTED


def test_every_public_class_is_in_all() -> None:
    # Submodules (lowercase) become attributes when imported; classes are all exported.
    assert {name for name in dir(coordinator) if name[0].isupper()} == set(EXPORTED)
