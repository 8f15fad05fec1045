"""A handler module that itself imports fine but needs a package that is not installed."""

from __future__ import annotations

import forum_test_package_that_is_not_installed  # noqa: F401  # type: ignore[import-not-found]

from forum.coordinator import Job


async def handle(job: Job) -> None:
    """Never reached: the import above fails."""
