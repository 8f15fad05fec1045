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
lets the pass drop what is dead. A pass with no window opened since the last
save writes nothing. At start the table is loaded from that file
(:meth:`DedupTable.load`), then from the node's own Writes still in the
Strand (those written since the last save). Each open window costs its key
and about 12 bytes in the file, and its key and some 180 bytes in memory.

Why a pass may drop a keyed Write once the file is saved: compaction drops a
Write only with the Take that killed it, at or below the horizon, and the
horizon is read before the save; a Write was in this table (it is added
when the write is durable) before anything could take it. A window written
after the save is above that horizon or not taken yet, so it stays in the
Strand until the next pass saves it.

The file (written and read a piece at a time, so a large table never has
a copy in memory)::

    magic    8 bytes   b"FORUMDK2"
    body     msgpack   origin, then one [key, seq, until_ms] per window
    trailer  8 bytes   the body's length and CRC-32 (u32 BE each)

A file that does not read back whole (wrong magic, cut, checksum) is
refused (``StrandCorrupt``, naming it): starting without it would let a
second write with a key through inside its window. A file of another origin
(the Strand's directory was replaced) is left out, with a warning.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

import msgpack

from forum.node.core.entries import EntryId
from forum.node.core.errors import StrandCorrupt

log = logging.getLogger(__name__)

#: The file of the open windows, in the Strand's directory.
KEYS_FILE = "dedup-keys"
_MAGIC = b"FORUMDK2"
_TRAILER = struct.Struct(">II")
#: A window's seq is the low bits of its packed int (a trillion writes a node).
_SEQ_BITS = 40
_SEQ_MASK = (1 << _SEQ_BITS) - 1
#: Windows packed per write to the file.
_CHUNK = 4096


class DedupTable:
    """Key -> (the write's seq, until when), for the writes of ``origin`` (this node's).

    The two numbers are packed in one int, ``until << 40 | seq``, and the
    origin is the table's: an open window costs a dict slot, that int and
    its place in the closing heap, about 180 bytes beside its key, where an
    id object and a pair cost 280.
    """

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self._by_key: dict[bytes, int] = {}
        self._closing: list[tuple[int, bytes]] = []  # (until, key), a heap
        self._changed = False  # a window opened since the last save

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: bytes, now: int) -> EntryId | None:
        """The id of the write with ``key`` whose window is open at ``now``."""
        self._purge(now)
        found = self._by_key.get(key)
        if found is None or found >> _SEQ_BITS <= now:
            return None
        return EntryId(self.origin, found & _SEQ_MASK)

    def add(self, key: bytes, entry_id: EntryId, until: int) -> None:
        """Record a write with ``key``, its window open until ``until`` (ms)."""
        if entry_id.origin != self.origin or not 0 < entry_id.seq <= _SEQ_MASK:
            raise ValueError(f"a dedup window of {entry_id}, not of a write of {self.origin}")
        known = self._by_key.get(key)
        if known is None or known >> _SEQ_BITS < until:
            self._by_key[key] = until << _SEQ_BITS | entry_id.seq
            heapq.heappush(self._closing, (until, key))
            self._changed = True

    async def save(self, directory: Path, now: int) -> int | None:
        """Write the windows open at ``now`` to ``directory``'s
        :data:`KEYS_FILE`, durably; how many, or ``None`` when none opened
        since the last save (nothing written). The table is read here, on
        the loop that changes it; the file is written in a thread."""
        if not self._changed:
            return None
        self._purge(now)
        windows = [
            (key, packed & _SEQ_MASK, until)
            for key, packed in self._by_key.items()
            if (until := packed >> _SEQ_BITS) > now
        ]
        self._changed = False
        try:
            await asyncio.to_thread(_write, directory / KEYS_FILE, self.origin, windows)
        except BaseException:
            self._changed = True  # the next pass tries again
            raise
        return len(windows)

    def load(self, directory: Path, now: int) -> int:
        """Add the windows of ``directory``'s :data:`KEYS_FILE` still open
        at ``now`` (none without the file); how many. ``StrandCorrupt`` if it
        does not read back whole."""
        path, origin = directory / KEYS_FILE, self.origin
        try:
            file = open(path, "rb")  # noqa: SIM115 (closed below, after the checks)
        except FileNotFoundError:
            return 0
        with file:
            body_length = _check(str(path), file)
            unpacker = msgpack.Unpacker(raw=False, max_buffer_size=_CHUNK * 2048)
            file.seek(len(_MAGIC))
            opened, left = 0, body_length
            first = True
            try:
                while left:
                    piece = file.read(min(left, 1 << 20))
                    left -= len(piece)
                    unpacker.feed(piece)
                    for item in unpacker:
                        if first:
                            first = False
                            if item != origin:
                                log.warning(
                                    "%s holds the dedup keys of %s, not of this node (%s): "
                                    "left out",
                                    path,
                                    item,
                                    origin,
                                )
                                return 0
                            continue
                        key, seq, until = item
                        if type(key) is not bytes or type(seq) is not int or type(until) is not int:
                            raise ValueError(f"not a window: {item!r:.80}")
                        if until > now:
                            self.add(key, EntryId(origin, seq), until)
                            opened += 1
            except (ValueError, TypeError, msgpack.UnpackException) as exc:
                raise StrandCorrupt(str(path), len(_MAGIC), f"unreadable body: {exc}") from None
        self._changed = False  # what it holds is what the file holds, and more
        return opened

    def _purge(self, now: int) -> None:
        closing = self._closing
        while closing and closing[0][0] <= now:
            until, key = heapq.heappop(closing)
            known = self._by_key.get(key)
            if known is not None and known >> _SEQ_BITS == until:
                del self._by_key[key]


def _write(path: Path, origin: str, windows: list[tuple[bytes, int, int]]) -> None:
    """Replace ``path`` with a :data:`KEYS_FILE` of ``windows``, durably (blocking)."""
    temporary = path.with_name(path.name + ".new")
    packer = msgpack.Packer(use_bin_type=True)
    with open(temporary, "wb") as file:
        file.write(_MAGIC)
        head = packer.pack(origin)
        file.write(head)
        length, crc = len(head), zlib.crc32(head)
        for start in range(0, len(windows), _CHUNK):
            chunk = b"".join(packer.pack(w) for w in windows[start : start + _CHUNK])
            file.write(chunk)
            length, crc = length + len(chunk), zlib.crc32(chunk, crc)
        file.write(_TRAILER.pack(length, crc))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    descriptor = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the rename itself
    finally:
        os.close(descriptor)


def _check(path: str, file: BinaryIO) -> int:
    """The body length of an open :data:`KEYS_FILE`, once its magic, length
    and checksum are right (read a piece at a time)."""
    size = os.fstat(file.fileno()).st_size
    if size < len(_MAGIC) + _TRAILER.size:
        raise StrandCorrupt(path, 0, f"{size} bytes, shorter than its header and trailer")
    magic = file.read(len(_MAGIC))
    if magic != _MAGIC:
        raise StrandCorrupt(path, 0, f"not a dedup keys file (magic {magic!r})")
    file.seek(size - _TRAILER.size)
    length, crc = _TRAILER.unpack(file.read(_TRAILER.size))
    body_length = size - len(_MAGIC) - _TRAILER.size
    if length != body_length:
        raise StrandCorrupt(
            path, size - _TRAILER.size, f"{body_length} bytes of body, not {length}"
        )
    file.seek(len(_MAGIC))
    found, left = 0, body_length
    while left:
        piece = file.read(min(left, 1 << 20))
        left -= len(piece)
        found = zlib.crc32(piece, found)
    if found != crc:
        raise StrandCorrupt(path, len(_MAGIC), "checksum mismatch")
    return body_length
