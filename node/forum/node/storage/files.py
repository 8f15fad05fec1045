"""The data directory's own small files, and the file calls every part of the Strand makes.

A data directory holds, beside its segments (:mod:`forum.node.storage.segment`),
the ``MANIFEST`` (:mod:`forum.node.storage.manifest`) and ``HORIZON``
(:mod:`forum.node.storage.compaction`):

``LOCK``
    Held (``flock``, exclusive) by the open Strand; it holds the holder's
    pid, for the message of the next one that tries.
``ORIGIN``
    The directory's incarnation id (``<node name>-<8 hex digits>``), one
    ASCII line, made once and read back on every open.
``PROBE.tmp``
    Written and removed by ``Strand.health()`` to find out whether the disk
    has room again.

Everything here is blocking; the Strand runs it in a thread, or at open.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from pathlib import Path

from forum.node.core.entries import check_origin
from forum.node.core.errors import DataDirLocked, StrandError

ORIGIN_FILE = "ORIGIN"
LOCK_FILE = "LOCK"
PROBE_FILE = "PROBE.tmp"


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` at the descriptor's offset."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def sync_and_close(fd: int, sync: bool) -> None:
    """fsync ``fd`` (if ``sync``), and close it whatever happens."""
    try:
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """fsync a directory: its entries (a create, rename or unlink) are durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def probe(directory: Path) -> None:
    """Write a page to a file in ``directory`` and remove it; ``OSError`` if it cannot."""
    path = directory / PROBE_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, b"\0" * 4096)
    finally:
        os.close(fd)
        os.unlink(path)


def lock_directory(directory: Path) -> int:
    """Hold ``directory``'s lock (an exclusive flock on its LOCK file) for as
    long as the returned descriptor is open; ``DataDirLocked`` if it is held.

    Two Strands on one directory would hand out the same ids and overwrite
    each other's records; the kernel drops the lock when its holder exits.
    """
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise DataDirLocked(str(directory), holder if holder.isdigit() else None) from None
    except BaseException:
        os.close(fd)
        raise
    # Who holds it, for the message above; a full disk must not stop the start.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def load_or_create_origin(directory: Path, node_name: str) -> str:
    """The incarnation id of this data directory: made once, then read back.

    A wiped directory gets a new random suffix, so it never reuses the ids of
    its previous life.
    """
    path = directory / ORIGIN_FILE
    try:
        origin = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        origin = f"{node_name}-{secrets.token_hex(4)}"
        tmp = directory / (ORIGIN_FILE + ".tmp")
        with open(tmp, "w", encoding="ascii") as f:
            f.write(origin + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(directory)
        return origin
    try:
        return check_origin(origin)
    except ValueError as exc:
        raise StrandError(f"{path}: {exc}") from exc
