"""Compaction on disk: forgetting entries that every member holds and nobody needs.

The rule (docs/replication.md, "Compaction"): a Write and the Take that
killed it may be dropped once every member of the cluster holds both, that
is once both ids are at or below the *horizon*, the per-origin minimum of
the members' version vectors. A Write whose tuple expired is dead without a
Take, and is dropped once it is at or below the horizon. A live Write is
never dropped.

What a node has dropped is written down before anything is dropped, in the
``HORIZON`` file of its data directory: per origin, the *floor*, the seq up
to which every entry is held here or was dropped as dead. Replay reads it
back, so "held up to seq N" keeps meaning "every entry up to N is here or is
dead", and an entry that was dropped is never taken in again.

``HORIZON`` is a msgpack map ``{"version": 1, "floors": {origin: seq}}``
followed by its CRC-32 (u32 BE), replaced atomically: written to
``HORIZON.tmp``, fsynced, renamed, the directory fsynced.

A segment is rewritten in the same way, under its own number so that log
order holds: the survivors, in batches of the current format (a version 1
segment comes out as version 2), are written to
``NNNNNNNN.strand.tmp``, fsynced, renamed over the segment, the directory
fsynced; a segment with no survivors is removed. A crash leaves either the
old file or the new one (and maybe a ``.tmp``, which the next open removes),
so replay always finds the same live set.

Order makes this crash-safe: within a pass segments are rewritten oldest
first, and a Take is dropped only with or after its target (the target in
the same or an earlier segment, or dropped in an earlier pass). Were a Take
dropped first, a crash before its Write's segment was rewritten would leave
the Write on disk without its Take: alive again.

Everything here is blocking file work, run in a thread by the Strand.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import msgpack

from node import segment
from node.codec import TakeRaw, decode_raw
from node.errors import StrandCorrupt

HORIZON_FILE = "HORIZON"
HORIZON_VERSION = 1
_CRC = struct.Struct(">I")
TMP_SUFFIX = ".tmp"

#: An entry's id as plain values, as replay and compaction handle them.
Key = tuple[str, int]


def read_floors(directory: Path) -> dict[str, int]:
    """The floors written by the last compaction (empty if none ran)."""
    path = directory / HORIZON_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    body, crc = data[: -_CRC.size], data[-_CRC.size :]
    if len(crc) != _CRC.size or zlib.crc32(body) != _CRC.unpack(crc)[0]:
        raise StrandCorrupt(str(path), 0, "the HORIZON file does not check out")
    try:
        document = msgpack.unpackb(body, raw=False)
        floors = document["floors"]
        if document["version"] != HORIZON_VERSION or not isinstance(floors, dict):
            raise ValueError("unknown version or layout")
        return {str(origin): int(seq) for origin, seq in floors.items()}
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise StrandCorrupt(str(path), 0, f"the HORIZON file is not one: {exc}") from exc


def write_floors(directory: Path, floors: Mapping[str, int]) -> None:
    """Replace the HORIZON file atomically and durably."""
    body = msgpack.packb({"version": HORIZON_VERSION, "floors": dict(floors)}, use_bin_type=True)
    _replace(directory / HORIZON_FILE, body + _CRC.pack(zlib.crc32(body)))


def remove_leftovers(directory: Path) -> None:
    """Remove what a compaction that crashed left half written."""
    for name in os.listdir(directory):
        if name.endswith(TMP_SUFFIX) and (
            name.startswith(HORIZON_FILE) or name.endswith(segment.SUFFIX + TMP_SUFFIX)
        ):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)


@dataclass(slots=True)
class Survey:
    """What the sealed segments hold at or below the horizon (one read of each)."""

    #: Per segment number, its size in bytes.
    sizes: dict[int, int] = field(default_factory=dict)
    #: Writes at or below the horizon, by id: the segment each lies in.
    writes: dict[Key, int] = field(default_factory=dict)
    #: Takes at or below the horizon: (take id, target id, segment).
    takes: list[tuple[Key, Key, int]] = field(default_factory=list)
    #: Writes at or below the horizon whose tuples had expired when read
    #: (dead without a Take: dropped as a taken one is).
    expired: set[Key] = field(default_factory=set)


def survey(
    directory: Path, sealed: Callable[[int], bool], horizon: Mapping[str, int], now_ms: int
) -> Survey:
    """Read the segments whose number is ``sealed`` and list their stable
    entries (the Writes expired by ``now_ms`` apart)."""
    found = Survey()
    for number in filter(sealed, segment.segment_numbers(directory)):
        path = segment.segment_path(directory, number)
        scan = segment.read_segment(path, number, last=False)
        found.sizes[number] = scan.good_end
        for _, body in scan.records:
            raw = decode_raw(body)
            if raw[1] > horizon.get(raw[0], 0):
                continue
            if len(raw) == 3:
                found.writes[(raw[0], raw[1])] = number
            elif type(raw[2]) is bytes:
                found.writes[(raw[0], raw[1])] = number
                expires = raw[3].expires
                if expires and expires <= now_ms:
                    found.expired.add((raw[0], raw[1]))
            else:
                take = cast(TakeRaw, raw)
                found.takes.append(((take[0], take[1]), (take[2], take[3]), number))
    return found


@dataclass(frozen=True, slots=True)
class Rewritten:
    """One segment after its rewrite: where each survivor lies now."""

    number: int
    bytes_before: int
    bytes_after: int  # 0: the segment was removed
    survivors: list[tuple[Key, int]]  # id, new offset
    dropped: list[Key]


def rewrite(directory: Path, number: int, drop: frozenset[Key] | set[Key]) -> Rewritten:
    """Rewrite sealed segment ``number`` without the entries in ``drop``.

    The survivors are written in the current format (batches of up to
    ``REWRITE_BATCH`` bytes), whatever the format they were read in."""
    path = segment.segment_path(directory, number)
    scan = segment.read_segment(path, number, last=False)
    kept: list[tuple[Key, bytes]] = []
    offsets: list[int] = []  # where each kept entry lies now
    dropped: list[Key] = []
    for offset, body in scan.records:
        raw = decode_raw(body)
        key = (raw[0], raw[1])
        if key in drop:
            dropped.append(key)
        else:
            kept.append((key, bytes(body)))
            offsets.append(offset)
    if not dropped:
        unmoved = [(key, offset) for (key, _), offset in zip(kept, offsets, strict=True)]
        return Rewritten(number, scan.good_end, scan.good_end, unmoved, [])
    if not kept:
        os.unlink(path)
        _fsync_dir(directory)
        return Rewritten(number, scan.good_end, 0, [], dropped)
    chunks = [segment.header(number)]
    size = segment.HEADER.size
    survivors: list[tuple[Key, int]] = []
    for group in _groups(kept):
        record, within = segment.batch([body for _, body in group])
        survivors.extend((key, size + at) for (key, _), at in zip(group, within, strict=True))
        chunks.append(record)
        size += len(record)
    _replace(path, b"".join(chunks))
    return Rewritten(number, scan.good_end, size, survivors, dropped)


#: The most a rewritten segment puts in one batch (far below ``segment.MAX_BODY``).
REWRITE_BATCH = 1024 * 1024


def _groups(kept: list[tuple[Key, bytes]]) -> list[list[tuple[Key, bytes]]]:
    """``kept`` cut into runs that each fit one batch of ``REWRITE_BATCH``."""
    groups: list[list[tuple[Key, bytes]]] = [[]]
    size = 0
    for item in kept:
        grows = segment.batch_size(len(item[1]))
        if groups[-1] and size + grows > REWRITE_BATCH:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += grows
    return groups


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
