"""A result store that refuses a stale writer: SQLite, a conditional upsert.

For results that live in a SQL database, which cannot see the Lens: the row
keeps the fencing token that wrote it, and the update only happens when the
new token is not lower::

    INSERT INTO results (key, token, value) VALUES (?, ?, ?)
    ON CONFLICT (key) DO UPDATE SET token = excluded.token, value = excluded.value
    WHERE excluded.token >= results.token

No row changed means a higher token wrote first: the writer is stale
(:class:`StaleToken`, a ``ClaimLost``).

Its limit, exactly: the store refuses a stale holder only once a newer
holder has written. A holder whose claim expired, and whose job nobody has
written since, still writes::

    t0  worker A claims job k, token 41; verify() passes; A stalls
    t1  A's lease expires; the job is re-offered
    t2  A wakes up, writes with token 41                      -> stored (the limit)
    t3  worker B claims k, token 57, writes                   -> stored, over A's
    t4  A writes with token 41 again                          -> StaleToken

So the handler passes ``job.verify`` to :meth:`FencedSqliteStore.put`, which
takes SQLite's write lock first, then awaits ``verify()``, then writes and
commits. ``verify()`` refuses unless the claim holds for at least the Lens's
safety margin longer, so a write that commits within the margin of
``verify()`` answering commits under a live claim. What remains is that
window: a holder that stalls between ``verify()`` answering and the commit
for longer than the margin (a GC pause, a SIGSTOP) writes as at t2. Its
result stays until the newer holder's replaces it, which is why the effect
must be one that a newer holder's write replaces.
:mod:`examples.handlers.fenced_redis`, beside the Lens, has no such window.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from examples.handlers.fenced_redis import StaleToken
from examples.handlers.sqlite_file import SqliteFile
from forum.coordinator import Handler, Job

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key   TEXT PRIMARY KEY,
    token INTEGER NOT NULL,
    value BLOB NOT NULL
);
-- One row per new token stored: how many times each job's effect was applied.
CREATE TABLE IF NOT EXISTS applied (key TEXT NOT NULL, token INTEGER NOT NULL);
"""


class FencedSqliteStore:
    """Results by job key in a SQLite file, each kept with its fencing token."""

    def __init__(self, path: str | Path) -> None:
        self._db = SqliteFile(path, SCHEMA)

    async def __aenter__(self) -> FencedSqliteStore:
        await self._db.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._db.__aexit__(None, None, None)

    async def put(
        self,
        key: str,
        token: int,
        value: bytes,
        verify: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Store ``value`` for ``key`` unless a higher token wrote first
        (:class:`StaleToken`). ``verify`` (``job.verify``) is awaited with the
        write lock held, right before the write; its ``ClaimLost`` writes nothing."""

        def write(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT token FROM results WHERE key = ?", (key,)).fetchone()
            changed = db.execute(
                "INSERT INTO results (key, token, value) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET token = excluded.token, value = excluded.value "
                "WHERE excluded.token >= results.token",
                (key, token, value),
            ).rowcount
            if changed and (row is None or row[0] < token):
                db.execute("INSERT INTO applied (key, token) VALUES (?, ?)", (key, token))
            return bool(changed)

        if not await self._db.run(write, first=verify):
            raise StaleToken(key, token, "a higher token wrote first")

    async def get(self, key: str) -> tuple[int, bytes] | None:
        def read(db: sqlite3.Connection) -> tuple[int, bytes] | None:
            row = db.execute("SELECT token, value FROM results WHERE key = ?", (key,)).fetchone()
            return None if row is None else (int(row[0]), bytes(row[1]))

        return await self._db.run(read)

    async def applied(self) -> list[tuple[str, int]]:
        def read(db: sqlite3.Connection) -> list[tuple[str, int]]:
            rows = db.execute("SELECT key, token FROM applied ORDER BY rowid").fetchall()
            return [(str(key), int(token)) for key, token in rows]

        return await self._db.run(read)


def fenced_handler(store: FencedSqliteStore) -> Handler:
    """A handler that computes a result and stores it under the job's token."""

    async def handle(job: Job) -> None:
        result = job.payload.upper()  # the job's real work goes here
        # verify() is the only check of the claim itself (the store checks tokens):
        # the store runs it with its write lock held, right before the write.
        await store.put(job.key, job.token, result, verify=job.verify)

    return handle


@contextlib.asynccontextmanager
async def open_handler() -> AsyncIterator[Handler]:
    """For the CLI: the database file at ``$FORUM_EXAMPLE_SQLITE``."""
    async with FencedSqliteStore(os.environ["FORUM_EXAMPLE_SQLITE"]) as store:
        yield fenced_handler(store)
