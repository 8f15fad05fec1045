"""Handlers that are mistakes, for ``forum worker --handler`` in test_cli_errors.py."""

from __future__ import annotations

from coordinator import Job


def sync_handler(job: Job) -> None:
    """Not async: the worker would await its None on every job."""


async def takes_nothing() -> None:
    """Async, but no job parameter."""


NOT_A_FUNCTION = 42
