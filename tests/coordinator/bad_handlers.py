"""Handlers that are mistakes, for ``forum worker --handler`` in test_cli_errors.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from forum.coordinator import Handler, Job


def sync_handler(job: Job) -> None:
    """Not async: the worker would await its None on every job."""


async def takes_nothing() -> None:
    """Async, but no job parameter."""


NOT_A_FUNCTION = 42


@contextlib.asynccontextmanager
async def fails_to_open() -> AsyncIterator[Handler]:
    """A factory whose opening fails (a setting missing, a store unreachable)."""
    raise RuntimeError("no result store configured")
    yield handle_nothing  # unreachable: makes this an async generator


async def handle_nothing(job: Job) -> None:
    """Never run."""
