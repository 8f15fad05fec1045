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

``HORIZON`` is a document of :mod:`node.checked_file` (a msgpack map and
its CRC-32, replaced atomically and durably): ``{"version": 1, "floors":
{origin: seq}}``.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from node import segment
from node.checked_file import TMP_SUFFIX, fsync_dir, read_document, replace_file, write_document
from node.codec import TakeRaw, decode_raw
from node.errors import StrandCorrupt

HORIZON_FILE = "HORIZON"
HORIZON_VERSION = 1
#: node.manifest's file, named here too: a crashed write of it is a leftover.
MANIFEST_FILE = "MANIFEST"

#: An entry's id as plain values, as replay and compaction handle them.
Key = tuple[str, int]


def read_floors(directory: Path) -> dict[str, int]:
    """The floors written by the last compaction (empty if none ran)."""
    path = directory / HORIZON_FILE
    document = read_document(path)
    if document is None:
        return {}
    try:
        floors = document["floors"]
        if document["version"] != HORIZON_VERSION or not isinstance(floors, dict):
            raise ValueError("unknown version or layout")
        return {str(origin): int(seq) for origin, seq in floors.items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise StrandCorrupt(str(path), 0, f"the HORIZON file is not one: {exc}") from exc


def write_floors(directory: Path, floors: Mapping[str, int]) -> None:
    """Replace the HORIZON file atomically and durably."""
    write_document(directory / HORIZON_FILE, {"version": HORIZON_VERSION, "floors": dict(floors)})


def remove_leftovers(directory: Path) -> None:
    """Remove what a compaction (or a MANIFEST write) that crashed left half written."""
    for name in os.listdir(directory):
        if name.endswith(TMP_SUFFIX) and (
            name in (HORIZON_FILE + TMP_SUFFIX, MANIFEST_FILE + TMP_SUFFIX)
            or name.endswith(segment.SUFFIX + TMP_SUFFIX)
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


#: Told a rewritten segment's length and entries before it replaces the old
#: one ((0, 0): before the segment is removed), so the MANIFEST accepts both.
Accept = Callable[[int, int], None]


def rewrite(
    directory: Path,
    number: int,
    drop: frozenset[Key] | set[Key],
    accept: Accept | None = None,
) -> Rewritten:
    """Rewrite sealed segment ``number`` without the entries in ``drop``.

    The survivors are written in the current format (batches of up to
    ``REWRITE_BATCH`` bytes), whatever the format they were read in.
    ``accept`` is called between the new file's fsync and its rename (or
    before the unlink of a segment with no survivors)."""
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
        if accept is not None:
            accept(0, 0)
        os.unlink(path)
        fsync_dir(directory)
        return Rewritten(number, scan.good_end, 0, [], dropped)
    chunks = [segment.header(number)]
    size = segment.HEADER.size
    survivors: list[tuple[Key, int]] = []
    for group in _groups(kept):
        record, within = segment.batch([body for _, body in group])
        survivors.extend((key, size + at) for (key, _), at in zip(group, within, strict=True))
        chunks.append(record)
        size += len(record)
    replace_file(
        path, b"".join(chunks), None if accept is None else lambda: accept(size, len(kept))
    )
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
