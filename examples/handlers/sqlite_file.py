"""One SQLite connection used off the event loop, shared by the SQLite examples.

SQLite calls block, so each runs in a worker thread (``asyncio.to_thread``),
one at a time. WAL mode and a busy timeout let several worker processes
share one database file.

``run(work, first=check)`` takes the database's write lock (``BEGIN
IMMEDIATE``, waiting for other processes' writes) *before* awaiting
``check()``, then runs ``work`` and commits: nothing but ``work`` and the
commit lies between the check and the write (the fenced store's
``verify()``, :mod:`examples.handlers.fenced_sqlite`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from forum.node.core.resource import AsyncResource

T = TypeVar("T")


class SqliteFile(AsyncResource):
    """``async with SqliteFile(path, schema) as db: await db.run(fn)``."""

    def __init__(self, path: str | Path, schema: str) -> None:
        self._path = str(path)
        self._schema = schema
        self._connection: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> SqliteFile:
        self._connection = await asyncio.to_thread(self._open)
        return self

    async def aclose(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await asyncio.to_thread(connection.close)

    async def run(
        self,
        work: Callable[[sqlite3.Connection], T],
        first: Callable[[], Awaitable[None]] | None = None,
    ) -> T:
        """Run ``work(connection)`` in a thread, inside one transaction; with
        ``first``, await it once the write lock is held (its exception, or a
        cancellation, rolls the transaction back)."""
        if self._connection is None:
            raise RuntimeError("the database is not open")
        connection = self._connection
        async with self._lock:
            if first is not None:
                try:
                    await _to_the_end(connection.execute, "BEGIN IMMEDIATE")
                    await first()
                except BaseException:  # first() refused, or the task was cancelled
                    if connection.in_transaction:
                        await _to_the_end(connection.rollback)
                    raise
            return await _to_the_end(_in_transaction, connection, work)

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self._path, timeout=30, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.executescript(self._schema)
        return connection


def _in_transaction(connection: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    with connection:  # commits, or rolls back on an exception
        return work(connection)


async def _to_the_end(call: Callable[..., T], *args: Any) -> T:
    """``asyncio.to_thread(call, *args)``, except that a cancellation waits for
    the thread to finish before it is raised: the connection is never used by
    a thread nobody waits for (nor by two at once, the lock being released)."""
    thread = asyncio.ensure_future(asyncio.to_thread(call, *args))
    try:
        return await asyncio.shield(thread)
    except asyncio.CancelledError:
        await asyncio.wait([thread])
        if not thread.cancelled():
            thread.exception()  # retrieved: the cancellation is what the caller sees
        raise
