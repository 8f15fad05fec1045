"""Handlers for the ``forum worker`` processes of tests/dashboard/test_truth_browser.py."""

from __future__ import annotations

from forum.coordinator import Job


async def done(job: Job) -> None:
    """Finishes at once: the job is done."""
    return None
