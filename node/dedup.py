"""Dedup at write: the keys of this node's recent writes, each with its window.

A write with a ``key`` and a ``dedup_window`` (``Forum.write``) records the
key here until its window closes (``Properties.dedup_until``, wall clock);
another write with that key on this node meanwhile answers with the first
write's id and writes nothing, as SQS's deduplication id and NATS's
``Msg-Id`` do. Whether the first tuple is still live does not matter: the
window is about writes, not about what became of them.

The table is per node, by design: during a partition two nodes each accept
a write with one key, and both tuples exist (docs/scheduling.md says how
the Lens, whose claim key is the same key, still runs the job once).

**Durable as a compact record, not as the write.** A window may be long
(up to ten years) and outlive its tuple by far: keeping the whole Write, and
the Take that killed it, in the Strand for the window would make the Strand
the size of the history, not of the backlog. So compaction does not keep
them: before each pass the Forum saves the table's open windows to
``dedup-keys`` beside the segments (:meth:`DedupTable.save`: written to a
temporary file, fsynced, renamed over, the directory fsynced), and only then
lets the pass drop what is dead. At start the table is loaded from that
file (:meth:`DedupTable.load`), then from the node's own Writes still in the
Strand (those written since the last pass). Each open window costs its key
and two numbers there (about the key's length + 12 bytes), and in memory.

Why a pass may drop a keyed Write once the file is saved: compaction drops a
Write only with the Take that killed it, at or below the horizon, and the
horizon is read before the save; a Write was in this table (it is added
when the write is durable) before anything could take it. A window written
after the save is above that horizon or not taken yet, so it stays in the
Strand until the next pass saves it.

The file::

    magic   8 bytes   b"FORUMDK1"
    length  4 bytes   of the body (big-endian)
    crc32   4 bytes   of the body
    body    msgpack   [origin, [[key, seq, until_ms], ...]]

A file that does not read back whole (wrong magic, cut, checksum) is
refused (``StrandCorrupt``, naming it): starting without it would let a
second write with a key through inside its window. A file of another origin
(the Strand's directory was replaced) is left out, with a warning.
"""

from __future__ import annotations

import heapq
import logging
import os
import struct
import zlib
from pathlib import Path

import msgpack

from node.entries import EntryId
from node.errors import StrandCorrupt

log = logging.getLogger(__name__)

#: The file of the open windows, in the Strand's directory.
KEYS_FILE = "dedup-keys"
_MAGIC = b"FORUMDK1"
_HEAD = struct.Struct(">8sII")


class DedupTable:
    """Key -> (the write's id, until when), for this node's writes."""

    def __init__(self) -> None:
        self._by_key: dict[bytes, tuple[EntryId, int]] = {}
        self._closing: list[tuple[int, bytes]] = []  # (until, key), a heap

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: bytes, now: int) -> EntryId | None:
        """The id of the write with ``key`` whose window is open at ``now``."""
        self._purge(now)
        found = self._by_key.get(key)
        return None if found is None or found[1] <= now else found[0]

    def add(self, key: bytes, entry_id: EntryId, until: int) -> None:
        """Record a write with ``key``, its window open until ``until`` (ms)."""
        known = self._by_key.get(key)
        if known is None or known[1] < until:
            self._by_key[key] = (entry_id, until)
            heapq.heappush(self._closing, (until, key))

    def save(self, directory: Path, origin: str, now: int) -> int:
        """Write the windows open at ``now`` to ``directory``'s
        :data:`KEYS_FILE`, durably (blocking: run it in a thread); how many.
        Every key is of ``origin``'s writes (this node's)."""
        self._purge(now)
        keys = [
            [key, entry_id.seq, until]
            for key, (entry_id, until) in self._by_key.items()
            if until > now and entry_id.origin == origin
        ]
        path = directory / KEYS_FILE
        if not keys and not path.exists():
            return 0  # a node that never used a window has no file
        body = msgpack.packb([origin, keys], use_bin_type=True)
        temporary = path.with_name(KEYS_FILE + ".new")
        with open(temporary, "wb") as file:
            file.write(_HEAD.pack(_MAGIC, len(body), zlib.crc32(body)) + body)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)  # the rename itself
        finally:
            os.close(descriptor)
        return len(keys)

    def load(self, directory: Path, origin: str, now: int) -> int:
        """Add the windows of ``directory``'s :data:`KEYS_FILE` still open
        at ``now`` (none without the file); how many. ``StrandCorrupt`` if it
        does not read back whole."""
        path = directory / KEYS_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return 0
        origin_there, keys = _decode(str(path), data)
        if origin_there != origin:
            log.warning(
                "%s holds the dedup keys of %s, not of this node (%s): left out",
                path,
                origin_there,
                origin,
            )
            return 0
        opened = 0
        for key, seq, until in keys:
            if until > now:
                self.add(key, EntryId(origin, seq), until)
                opened += 1
        return opened

    def _purge(self, now: int) -> None:
        closing = self._closing
        while closing and closing[0][0] <= now:
            until, key = heapq.heappop(closing)
            known = self._by_key.get(key)
            if known is not None and known[1] == until:
                del self._by_key[key]


def _decode(path: str, data: bytes) -> tuple[str, list[tuple[bytes, int, int]]]:
    """The origin and the (key, seq, until) of a :data:`KEYS_FILE`'s bytes."""
    if len(data) < _HEAD.size:
        raise StrandCorrupt(path, 0, f"{len(data)} bytes, shorter than its header")
    magic, length, crc = _HEAD.unpack_from(data)
    body = data[_HEAD.size :]
    if magic != _MAGIC:
        raise StrandCorrupt(path, 0, f"not a dedup keys file (magic {magic!r})")
    if len(body) != length:
        raise StrandCorrupt(path, _HEAD.size, f"{len(body)} bytes of body, not {length}")
    if zlib.crc32(body) != crc:
        raise StrandCorrupt(path, _HEAD.size, "checksum mismatch")
    try:
        origin, keys = msgpack.unpackb(body, raw=False)
        found = [(bytes(key), int(seq), int(until)) for key, seq, until in keys]
    except (ValueError, TypeError) as exc:
        raise StrandCorrupt(path, _HEAD.size, f"unreadable body: {exc}") from None
    if not isinstance(origin, str):
        raise StrandCorrupt(path, _HEAD.size, "no origin")
    return origin, found
