"""A side effect made safe to repeat with an idempotency key: the job's key.

Use it when the effect is not "overwrite a value" but "make something happen"
(charge a card, send a message, append a ledger line) and the system that
does it deduplicates requests by a key the caller chooses, the way payment
APIs take an ``Idempotency-Key`` header. The job's claim key — its first
delivery's entry id, unchanged across retries and re-offers — is that key::

    t0  worker A runs job k: charges 10 with key "a:7"; dies before complete
    t1  A's lease expires; the job is re-offered; worker B runs it
    t2  B charges 10 with key "a:7"   -> the ledger already has it: no new charge

No fencing token is needed: any number of repeats has one effect. What is
needed is that the downstream system keeps keys longer than the job can be
re-delivered (its retries, a re-offer after a lease, a double take).

``Ledger`` stands in for that downstream system here (a SQLite table whose
primary key is the idempotency key).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

from examples.handlers.sqlite_file import SqliteFile
from forum.coordinator import Handler, Job

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    idempotency_key TEXT PRIMARY KEY,
    request         BLOB NOT NULL
);
-- Every request received, repeats included: shows the deduplication at work.
CREATE TABLE IF NOT EXISTS requests (idempotency_key TEXT NOT NULL);
"""


class Ledger:
    """A downstream service that performs each idempotency key's request once."""

    def __init__(self, path: str | Path) -> None:
        self._db = SqliteFile(path, SCHEMA)

    async def __aenter__(self) -> Ledger:
        await self._db.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._db.__aexit__(None, None, None)

    async def charge(self, idempotency_key: str, request: bytes) -> bool:
        """Perform ``request`` unless ``idempotency_key`` was seen; ``True`` if performed now."""

        def write(db: sqlite3.Connection) -> bool:
            db.execute("INSERT INTO requests (idempotency_key) VALUES (?)", (idempotency_key,))
            return bool(
                db.execute(
                    "INSERT OR IGNORE INTO charges (idempotency_key, request) VALUES (?, ?)",
                    (idempotency_key, request),
                ).rowcount
            )

        return await self._db.run(write)

    async def charges(self) -> dict[str, bytes]:
        def read(db: sqlite3.Connection) -> dict[str, bytes]:
            rows = db.execute("SELECT idempotency_key, request FROM charges").fetchall()
            return {str(key): bytes(request) for key, request in rows}

        return await self._db.run(read)

    async def requests(self) -> int:
        def read(db: sqlite3.Connection) -> int:
            return int(db.execute("SELECT count(*) FROM requests").fetchone()[0])

        return await self._db.run(read)


def idempotent_handler(ledger: Ledger) -> Handler:
    async def handle(job: Job) -> None:
        await ledger.charge(job.key, job.payload)

    return handle


@contextlib.asynccontextmanager
async def open_handler() -> AsyncIterator[Handler]:
    """For the CLI: the ledger file at ``$FORUM_EXAMPLE_SQLITE``."""
    async with Ledger(os.environ["FORUM_EXAMPLE_SQLITE"]) as ledger:
        yield idempotent_handler(ledger)
