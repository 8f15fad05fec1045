"""The byte format of one Strand segment file, and reading it back.

A Strand is a directory of segment files named ``NNNNNNNN.strand`` (the
segment number, eight decimal digits, from 1). Each file is::

    header, 16 bytes
        magic           8 bytes   b"FORUMSTR"
        version         u16 BE    1 or 2 (the records below)
        flags           u16 BE    bit 0 (MANIFESTED): a MANIFEST accounts for
                                  this segment (see forum.node.storage.manifest); the
                                  other bits 0. A segment of a directory that
                                  has no MANIFEST has 0.
        segment number  u32 BE    the number in the file name
    records, one after another, to the end of the file
        length          u32 BE    length of body, 1 .. MAX_BODY (see max_body)
        crc             u32 BE    zlib.crc32(body)
        body            length bytes (below)

In a version 1 segment (read, never written) a record's body is one
entry, msgpack (see forum.node.core.codec). In a version 2 segment, the one the
writer makes, a record is a *batch*: the entries of one group commit under one
length and one checksum, as Kafka's record batches. Its body is one or
more entries, one after another, each::

        length          u32 BE    length of entry, at least 1
        back            u32 BE    how far this entry's length field lies after
                                  the start of its record (8 for the first)
        entry           length bytes, msgpack (see forum.node.core.codec)

and the entries fill the body exactly. An entry's *offset* is that of its
record (version 1) or of its length field (version 2): it names one entry,
grows in log order, and ``back`` leads from it to the record whose checksum
covers it, so one entry can be read back and checked alone.

The writer refuses a record whose body is over ``max_body(segment size)``:
it fits a segment after the header and is never over ``MAX_BODY``, the
limit replay applies whatever the segment size, so replay reads back every
record that was written. Only the last segment is ever appended to; a
segment is complete when the next one exists. A crash can leave a *torn
tail* on the last segment: a record cut short or not yet on disk when power
went. Reading stops at the first record that does not check out; if a good
record can still be found after it, the damage is not a tail (it is
corruption) and reading fails. What the last segment held for sure (its
durable length checkpoint), and which segments there are, is in the
``MANIFEST`` (:mod:`forum.node.storage.manifest`): damage before the checkpoint is not a
tail either. A batch is all or nothing: torn, it loses
every entry in it, none of which was acknowledged (the fsync that
acknowledges them covers the whole record).
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from dataclasses import dataclass
from pathlib import Path

from forum.node.core.errors import RecordTooLarge, StrandCorrupt

MAGIC = b"FORUMSTR"
#: The version the writer puts in new segments; ``READABLE`` are the ones read.
FORMAT_VERSION = 2
SINGLE_VERSION = 1
READABLE = (SINGLE_VERSION, FORMAT_VERSION)
HEADER = struct.Struct(">8sHHI")
#: The header flag of a segment a MANIFEST accounts for: found without one, the MANIFEST is missing.
MANIFESTED = 1
#: Where the flags lie in the header, and their format (to flag a segment in place).
FLAGS_AT = 10
FLAGS = struct.Struct(">H")
FRAME = struct.Struct(">II")
#: The length both a record's frame and a batch entry's head start with.
_LENGTH = struct.Struct(">I")
#: An entry's head inside a batch: its length, and how far it lies after the record's start.
ENTRY = struct.Struct(">II")
#: One record's body may not exceed this, whatever the segment size: replay
#: takes a larger length field for damage.
MAX_BODY = 64 * 1024 * 1024
SUFFIX = ".strand"


def segment_path(directory: Path, number: int) -> Path:
    return directory / f"{number:08d}{SUFFIX}"


def segment_numbers(directory: Path) -> list[int]:
    """The numbers of the segment files in ``directory``, ascending."""
    numbers = []
    for name in os.listdir(directory):
        stem, dot, ext = name.partition(".")
        if dot and "." + ext == SUFFIX and stem.isdigit():
            numbers.append(int(stem))
    return sorted(numbers)


def header(number: int, version: int = FORMAT_VERSION) -> bytes:
    return HEADER.pack(MAGIC, version, MANIFESTED, number)


def max_body(segment_bytes: int) -> int:
    """The largest record body a segment of ``segment_bytes`` takes: it fits
    after the header, and is never over ``MAX_BODY``."""
    return min(MAX_BODY, segment_bytes - HEADER.size - FRAME.size)


def batch(entries: Sequence[bytes | memoryview], limit: int = MAX_BODY) -> tuple[bytes, list[int]]:
    """One version 2 record holding ``entries`` (at least one), and each
    entry's offset from the record's start. ``RecordTooLarge`` if the body
    would be over ``limit``."""
    parts: list[bytes | memoryview] = []
    offsets: list[int] = []
    at = FRAME.size
    pack = ENTRY.pack
    for entry in entries:
        offsets.append(at)
        parts.append(pack(len(entry), at))
        parts.append(entry)
        at += ENTRY.size + len(entry)
    body = b"".join(parts)
    if len(body) > min(limit, MAX_BODY):
        raise too_large(len(body), limit)
    return FRAME.pack(len(body), zlib.crc32(body)) + body, offsets


def batches(
    entries: Iterable[bytes | memoryview], limit: int, at: int, offsets: MutableSequence[int]
) -> list[bytes]:
    """``entries`` as version 2 records, in order, each as full as a body of
    ``limit`` bytes allows (an entry too large for one alone is a record of
    its own), the first to lie at offset ``at``: each entry's offset is
    appended to ``offsets``."""
    records: list[bytes] = []
    group: list[bytes | memoryview] = []
    size = 0
    for entry in entries:
        grows = batch_size(len(entry))
        if group and size + grows > limit:
            at = _batch_into(group, at, records, offsets)
            group = []
            size = 0
        group.append(entry)
        size += grows
    if group:
        _batch_into(group, at, records, offsets)
    return records


def _batch_into(
    group: Sequence[bytes | memoryview],
    at: int,
    records: list[bytes],
    offsets: MutableSequence[int],
) -> int:
    """Append ``group`` as one record at ``at`` to ``records``, and its
    entries' offsets to ``offsets``; where the next record lies."""
    record, within = batch(group)
    records.append(record)
    offsets.extend([at + offset for offset in within])
    return at + len(record)


def batch_size(entry_bytes: int) -> int:
    """What one entry of ``entry_bytes`` adds to a batch's body."""
    return ENTRY.size + entry_bytes


def too_large(size: int, limit: int) -> RecordTooLarge:
    """The error of a record body of ``size`` bytes, over ``limit`` (or ``MAX_BODY``)."""
    return RecordTooLarge(
        f"an entry of {size} bytes is too large for the log "
        f"(at most {min(limit, MAX_BODY)} bytes per record)"
    )


class Entries:
    """A segment's entries, as ``(offset, entry)`` pairs made one at a time
    when iterated: the file's bytes and an array of offsets (8 bytes an
    entry) rather than a tuple and a memoryview held for each (some 280
    bytes, and objects enough that the allocator keeps their arenas after a
    compaction pass has read a few hundred thousand)."""

    __slots__ = ("_data", "offsets")

    def __init__(self, data: memoryview, offsets: array[int]) -> None:
        self._data = data
        #: Each entry's offset (see the module docstring), ascending.
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets)

    def __iter__(self) -> Iterator[tuple[int, memoryview]]:
        at = self.at
        for offset in self.offsets:
            yield offset, at(offset)

    def at(self, offset: int) -> memoryview:
        """The entry at ``offset`` (one of ``offsets``)."""
        # A version 1 record's frame and a batch entry's head both start
        # with the length of what follows them, and are as long.
        (length,) = _LENGTH.unpack_from(self._data, offset)
        start = offset + FRAME.size
        return self._data[start : start + length]


#: A segment with no entries.
NO_ENTRIES = Entries(memoryview(b""), array("q"))


@dataclass(frozen=True, slots=True)
class SegmentScan:
    """What reading one segment found.

    ``records`` are ``(offset, entry)`` pairs, one per entry (see the module
    docstring for what an entry's offset is); ``good_end`` is the offset just
    past the last good record; ``torn_bytes`` is how much follows it.
    """

    records: Entries
    good_end: int
    torn_bytes: int
    version: int = FORMAT_VERSION
    flags: int = 0
    #: Why reading stopped before the end (``tolerant`` reads only), or ``None``.
    damage: str | None = None


def read_segment(path: Path, number: int, *, last: bool, tolerant: bool = False) -> SegmentScan:
    """Read every entry of one segment file (blocking; run it in a thread).

    A damaged tail is tolerated only in the ``last`` segment, and only when no
    good record follows the damage; anything else raises ``StrandCorrupt``,
    unless ``tolerant``: then the records before the damage are returned,
    and ``damage`` says what stopped the read (a bad header still raises).
    """
    data = memoryview(path.read_bytes())
    if len(data) < HEADER.size:
        if last or tolerant:
            reason = None if last else "segment shorter than its header"
            return SegmentScan(NO_ENTRIES, 0, len(data), damage=reason)
        raise StrandCorrupt(str(path), 0, "segment shorter than its header")
    version = check_header(str(path), data[: HEADER.size], number)
    flags = HEADER.unpack_from(data, 0)[2]
    frames, end = _scan(data, HEADER.size)
    try:
        offsets = frames if version == SINGLE_VERSION else _entries(str(path), data, frames)
    except StrandCorrupt as exc:
        if not tolerant:
            raise
        return SegmentScan(
            NO_ENTRIES, HEADER.size, len(data) - HEADER.size, version, flags, exc.reason
        )
    records = Entries(data, offsets)
    if end == len(data):
        return SegmentScan(records, end, 0, version, flags)
    reason = None
    damage = _first_good_record_after(data, end)
    if damage is not None:
        reason = f"damaged record (a good one follows at {damage})"
    elif not last:
        reason = "damaged record at the end of a complete segment"
    if reason is not None and not tolerant:
        raise StrandCorrupt(str(path), end, reason)
    if reason is not None:
        reason = f"{reason}, at offset {end}"
    return SegmentScan(records, end, len(data) - end, version, flags, reason)


def check_header(name: str, data: bytes | memoryview, number: int) -> int:
    """The format version of a segment whose first bytes are ``data``."""
    magic, version, _, found_number = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise StrandCorrupt(name, 0, "not a Strand segment (bad magic)")
    if version not in READABLE:
        raise StrandCorrupt(name, 0, f"unsupported segment format version {version}")
    if found_number != number:
        raise StrandCorrupt(name, 0, f"header says segment {found_number}")
    return int(version)


class RecordReader:
    """Reads entries back from one open segment by offset, checking the
    record each lies in (blocking). Entries of one batch read in a row cost
    one read of it."""

    def __init__(self, fd: int, name: str, number: int) -> None:
        self._fd = fd
        self._name = name
        self.version = check_header(name, os.pread(fd, HEADER.size, 0), number)
        self._start = -1  # the batch read last: its offset and body
        self._body = b""

    def read(self, offset: int) -> bytes:
        if self.version == SINGLE_VERSION:
            return self._record(offset)
        length, back = ENTRY.unpack(os.pread(self._fd, ENTRY.size, offset))
        start = offset - back
        if start != self._start:
            self._body = self._record(start)
            self._start = start
        at = back - FRAME.size + ENTRY.size
        if back < FRAME.size or at + length > len(self._body):
            raise StrandCorrupt(self._name, offset, "entry does not lie in its record")
        found_length, found_back = ENTRY.unpack_from(self._body, at - ENTRY.size)
        if (found_length, found_back) != (length, back):
            raise StrandCorrupt(self._name, offset, "entry does not check out on re-read")
        return self._body[at : at + length]

    def _record(self, offset: int) -> bytes:
        length, crc = FRAME.unpack(os.pread(self._fd, FRAME.size, offset))
        body = os.pread(self._fd, length, offset + FRAME.size)
        if len(body) != length or zlib.crc32(body) != crc:
            raise StrandCorrupt(self._name, offset, "record does not check out on re-read")
        return body


def _scan(data: memoryview, offset: int) -> tuple[array[int], int]:
    """The offsets of good records from ``offset`` on, and where the good part ends."""
    records = array("q")
    size = len(data)
    unpack = FRAME.unpack_from
    crc32 = zlib.crc32
    while offset + FRAME.size <= size:
        length, crc = unpack(data, offset)
        start = offset + FRAME.size
        end = start + length
        if not 0 < length <= MAX_BODY or end > size:
            break
        if crc32(data[start:end]) != crc:
            break
        records.append(offset)
        offset = end
    return records, offset


def _entries(name: str, data: memoryview, batches: array[int]) -> array[int]:
    """The offsets of the entries of good batch records at ``batches``. A
    batch that checks out but does not hold entries end to end was written
    wrong: that is corruption."""
    entries = array("q")
    unpack = ENTRY.unpack_from
    for start in batches:
        (length,) = _LENGTH.unpack_from(data, start)
        at = start + FRAME.size
        size = at + length
        while at < size:
            if at + ENTRY.size > size:
                raise StrandCorrupt(name, start, "a batch's last entry is cut short")
            length, back = unpack(data, at)
            end = at + ENTRY.size + length
            if length < 1 or end > size or back != at - start:
                raise StrandCorrupt(name, start, "a batch's entries do not fill it")
            entries.append(at)
            at = end
    return entries


def _first_good_record_after(data: memoryview, offset: int) -> int | None:
    """Offset of a record that checks out somewhere after ``offset``, if any.

    Slow (it tries every byte), but it runs only on a damaged log.
    """
    size = len(data)
    for candidate in range(offset + 1, size - FRAME.size):
        length, crc = FRAME.unpack_from(data, candidate)
        end = candidate + FRAME.size + length
        if 0 < length <= MAX_BODY and end <= size and zlib.crc32(data[end - length : end]) == crc:
            return candidate
    return None
