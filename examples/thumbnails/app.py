"""The thumbnails app: one task, ``thumbnail``, with an idempotent effect.

A thumbnail is a row of a SQLite file (``$THUMBNAILS_DB``, default
``forum-thumbnails.db`` in the temporary directory, not where the worker
runs, a checkout in the quick start) keyed by the job key, and kept with
the fencing token of the claim that wrote it. The write is conditional: it happens only when the
row's token is not higher than this attempt's (``WHERE excluded.token >=
thumbnails.token``), under SQLite's write lock taken *before*
``ctx.verify_sync()`` checks the claim is still live. So:

* the same job run again (a worker died after the write, before the
  completion) writes the same row again: one row per key, whatever the runs;
* a stale holder (its lease ran out while it stalled, and the job went to
  another worker with a higher token) is refused: by ``verify`` while the
  new holder has not written yet, by the token once it has
  (``ClaimLost``: the runner drops the attempt, it records nothing).

``applied`` keeps one row per (key, token) that wrote: how many claims'
effects landed, which a test compares with the jobs.

The "image" is made up from its id (this example has no image library):
a 64x64 grey raster, scaled down by averaging boxes of pixels.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import sqlite3
import tempfile
from typing import Any

from forum import App, ClaimLost, Context

#: The node and Redis: the ones ``forum`` commands use ($FORUM_NODE,
#: $FORUM_REDIS_URL), else a local node and Redis on their default ports.
app = App(
    nodes=os.environ.get("FORUM_NODE", "http://127.0.0.1:7070"),
    redis=os.environ.get("FORUM_REDIS_URL", "redis://127.0.0.1:6379/0"),
    prefix=b"thumbnails/",
)

SOURCE_SIDE = 64
SCHEMA = """
CREATE TABLE IF NOT EXISTS thumbnails (
    key      TEXT PRIMARY KEY,
    token    INTEGER NOT NULL,
    image_id INTEGER NOT NULL,
    size     INTEGER NOT NULL,
    pixels   BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS applied (key TEXT NOT NULL, token INTEGER NOT NULL);
"""


def database() -> str:
    return os.environ.get("THUMBNAILS_DB") or os.path.join(
        tempfile.gettempdir(), "forum-thumbnails.db"
    )


@app.task(retries=5, timeout=30, give_up_on=(ValueError,))
def thumbnail(ctx: Context, image_id: int, size: int = 16) -> dict[str, Any]:
    """Scale image ``image_id`` down to ``size`` x ``size`` and store it.
    A sync task: it runs in the worker's thread pool. A bad size is a
    ``ValueError``: no retry mends it (``give_up_on``), the job is dead."""
    if not 1 <= size <= SOURCE_SIDE:
        raise ValueError(f"size is 1 to {SOURCE_SIDE}, not {size}")
    pixels = scaled(source_image(image_id), size)
    store(ctx, image_id, size, pixels)
    return {"image_id": image_id, "size": size, "sha256": hashlib.sha256(pixels).hexdigest()}


def source_image(image_id: int) -> list[bytes]:
    """Image ``image_id``'s rows: a pattern of its own, the same every time."""
    return [
        bytes((x * (image_id % 7 + 1) + y * 3 + image_id) % 256 for x in range(SOURCE_SIDE))
        for y in range(SOURCE_SIDE)
    ]


def scaled(rows: list[bytes], size: int) -> bytes:
    """``rows`` scaled to ``size`` x ``size``: each pixel the mean of its box."""
    edges = [round(i * SOURCE_SIDE / size) for i in range(size + 1)]
    out = bytearray()
    for top, bottom in itertools.pairwise(edges):
        for left, right in itertools.pairwise(edges):
            box = [rows[y][x] for y in range(top, bottom) for x in range(left, right)]
            out.append(sum(box) // len(box))
    return bytes(out)


def store(ctx: Context, image_id: int, size: int, pixels: bytes) -> None:
    """Write the thumbnail under ``ctx.key`` and ``ctx.token``, or refuse a
    stale holder (``ClaimLost``); see the module docstring."""
    with contextlib.closing(sqlite3.connect(database(), timeout=30, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(SCHEMA)
        db.execute("BEGIN IMMEDIATE")  # the write lock first, then the claim's check
        try:
            ctx.verify_sync()
            row = db.execute("SELECT token FROM thumbnails WHERE key = ?", (ctx.key,)).fetchone()
            changed = db.execute(
                "INSERT INTO thumbnails (key, token, image_id, size, pixels) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
                "token = excluded.token, image_id = excluded.image_id, "
                "size = excluded.size, pixels = excluded.pixels "
                "WHERE excluded.token >= thumbnails.token",
                (ctx.key, ctx.token, image_id, size, pixels),
            ).rowcount
            if not changed:
                raise ClaimLost(ctx.key, ctx.token, "a newer holder stored this thumbnail")
            if row is None or row[0] < ctx.token:
                db.execute("INSERT INTO applied (key, token) VALUES (?, ?)", (ctx.key, ctx.token))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
