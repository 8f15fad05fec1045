"""The coordinator package's public surface."""

import coordinator


def test_all_is_sorted_and_complete() -> None:
    assert coordinator.__all__ == sorted(coordinator.__all__)
    assert set(coordinator.__all__) == {
        name for name in dir(coordinator) if not name.startswith("_") and name[0].isupper()
    }
    for name in coordinator.__all__:
        assert getattr(coordinator, name) is not None


def test_required_names_are_exported() -> None:
    required = {"Lens", "Claim", "LensError", "AlreadyClaimed", "AlreadyDone", "ClaimLost",
                "LensUnavailable", "Worker", "Job"}  # fmt: skip
    assert required <= set(coordinator.__all__)
