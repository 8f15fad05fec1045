"""The byte format of one Strand segment file, and reading it back.

A Strand is a directory of segment files named ``NNNNNNNN.strand`` (the
segment number, eight decimal digits, from 1). Each file is::

    header, 16 bytes
        magic           8 bytes   b"FORUMSTR"
        version         u16 BE    1
        reserved        u16 BE    0
        segment number  u32 BE    the number in the file name
    records, one after another, to the end of the file
        length          u32 BE    length of body, 1 .. MAX_BODY (see max_body)
        crc             u32 BE    zlib.crc32(body)
        body            length bytes: one entry, msgpack (see node.codec)

The writer refuses a record whose body is over ``max_body(segment size)``:
it fits a segment after the header and is never over ``MAX_BODY``, the
limit replay applies whatever the segment size, so replay reads back every
record that was written. Only the last segment is ever appended to; a segment is complete when the
next one exists. A crash can leave a *torn tail* on the last segment: a
record cut short or not yet on disk when power went. Reading stops at the
first record that does not check out; if a good record can still be found
after it, the damage is not a tail (it is corruption) and reading fails.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from node.errors import RecordTooLarge, StrandCorrupt

MAGIC = b"FORUMSTR"
FORMAT_VERSION = 1
HEADER = struct.Struct(">8sHHI")
FRAME = struct.Struct(">II")
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


def header(number: int) -> bytes:
    return HEADER.pack(MAGIC, FORMAT_VERSION, 0, number)


def max_body(segment_bytes: int) -> int:
    """The largest record body a segment of ``segment_bytes`` takes: it fits
    after the header, and is never over ``MAX_BODY``."""
    return min(MAX_BODY, segment_bytes - HEADER.size - FRAME.size)


def frame(body: bytes, limit: int = MAX_BODY) -> bytes:
    """One record: length, checksum, body. ``RecordTooLarge`` if the body is
    over ``limit`` (at most ``MAX_BODY``: replay would not read it back)."""
    if len(body) > min(limit, MAX_BODY):
        raise RecordTooLarge(
            f"an entry of {len(body)} bytes is too large for the log "
            f"(at most {min(limit, MAX_BODY)} bytes per record)"
        )
    return FRAME.pack(len(body), zlib.crc32(body)) + body


@dataclass(frozen=True, slots=True)
class SegmentScan:
    """What reading one segment found.

    ``records`` are ``(offset, body)`` pairs; ``good_end`` is the offset just
    past the last good record; ``torn_bytes`` is how much follows it.
    """

    records: list[tuple[int, memoryview]]
    good_end: int
    torn_bytes: int


def read_segment(path: Path, number: int, *, last: bool) -> SegmentScan:
    """Read every record of one segment file (blocking; run it in a thread).

    A damaged tail is tolerated only in the ``last`` segment, and only when no
    good record follows the damage; anything else raises ``StrandCorrupt``.
    """
    data = memoryview(path.read_bytes())
    if len(data) < HEADER.size:
        if last:
            return SegmentScan([], 0, len(data))
        raise StrandCorrupt(str(path), 0, "segment shorter than its header")
    magic, version, _, found_number = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise StrandCorrupt(str(path), 0, "not a Strand segment (bad magic)")
    if version != FORMAT_VERSION:
        raise StrandCorrupt(str(path), 0, f"unsupported segment format version {version}")
    if found_number != number:
        raise StrandCorrupt(str(path), 0, f"header says segment {found_number}")
    records, end = _scan(data, HEADER.size)
    if end == len(data):
        return SegmentScan(records, end, 0)
    damage = _first_good_record_after(data, end)
    if damage is not None:
        raise StrandCorrupt(str(path), end, f"damaged record (a good one follows at {damage})")
    if not last:
        raise StrandCorrupt(str(path), end, "damaged record at the end of a complete segment")
    return SegmentScan(records, end, len(data) - end)


def read_record(handle_fd: int, offset: int) -> bytes:
    """The body of the record at ``offset`` in an open segment (blocking)."""
    head = os.pread(handle_fd, FRAME.size, offset)
    length, crc = FRAME.unpack(head)
    body = os.pread(handle_fd, length, offset + FRAME.size)
    if len(body) != length or zlib.crc32(body) != crc:
        raise StrandCorrupt(f"fd {handle_fd}", offset, "record does not check out on re-read")
    return body


def _scan(data: memoryview, offset: int) -> tuple[list[tuple[int, memoryview]], int]:
    """Good records from ``offset`` on, and where the good part ends."""
    records = []
    size = len(data)
    unpack = FRAME.unpack_from
    crc32 = zlib.crc32
    while offset + FRAME.size <= size:
        length, crc = unpack(data, offset)
        start = offset + FRAME.size
        end = start + length
        if not 0 < length <= MAX_BODY or end > size:
            break
        body = data[start:end]
        if crc32(body) != crc:
            break
        records.append((offset, body))
        offset = end
    return records, offset


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
