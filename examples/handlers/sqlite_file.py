"""One SQLite connection used off the event loop, shared by the SQLite examples.

SQLite calls block, so each runs in a worker thread (``asyncio.to_thread``),
one at a time. WAL mode and a busy timeout let several worker processes
share one database file.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from node.resource import AsyncResource

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

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(connection)`` in a thread, inside one transaction."""
        if self._connection is None:
            raise RuntimeError("the database is not open")
        connection = self._connection
        async with self._lock:
            return await asyncio.to_thread(_in_transaction, connection, work)

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self._path, timeout=30, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.executescript(self._schema)
        return connection


def _in_transaction(connection: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    with connection:  # commits, or rolls back on an exception
        return work(connection)
