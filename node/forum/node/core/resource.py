"""The shape of everything that holds a resource (files, sockets, tasks).

An :class:`AsyncResource` is closed by ``await x.aclose()`` and is an async
context manager that closes it on the way out. The close runs shielded, so a
cancelled block still releases what it holds (as redis-py's clients do).
Subclasses that must start something on entry override ``__aenter__``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from types import TracebackType
from typing import Any, Self


class AsyncResource:
    """Base of the resource holders: implement :meth:`aclose`."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self.aclose())


@contextlib.asynccontextmanager
async def in_background(work: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    """Run ``work`` as a task while the block runs; cancelled and awaited on
    the way out, so no task outlives the block (a sampler, a file watch)."""
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
