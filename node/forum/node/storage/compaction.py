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

``HORIZON`` is a document of :mod:`forum.node.storage.checked_file` (a msgpack map and
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

Everything here is blocking file work, run in a thread by the Strand
(:mod:`forum.node.storage.compaction_pass` drives it).
"""

from __future__ import annotations

import contextlib
import os
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Awaitable, Callable, Collection, Container, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import cast

from forum.node.core.codec import TakeRaw, decode_raw
from forum.node.core.errors import StrandCorrupt
from forum.node.storage import segment
from forum.node.storage.checked_file import (
    TMP_SUFFIX,
    read_document,
    replace_file,
    write_document,
)
from forum.node.storage.files import fsync_dir

HORIZON_FILE = "HORIZON"
HORIZON_VERSION = 1
#: forum.node.storage.manifest's file, named here too: a crashed write of it is a leftover.
MANIFEST_FILE = "MANIFEST"

#: An entry's id as plain values, as replay and compaction handle them.
Key = tuple[str, int]
#: Asked once a pass has read the segments: the ids of the Writes still live.
Live = Callable[[], Awaitable[Collection[Key]]]


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


class Ids:
    """Entry ids, per origin an array of seqs and one of a value each (the
    segment an id lies in, its offset): 16 bytes an id. A pass handles
    every entry it drops several times over; as ``(origin, seq)`` tuples in
    sets and lists that was about 1 KB of small objects per entry, and the
    few of them that outlived the pass kept the allocator's arenas (the
    node's RSS) the size of its peak."""

    __slots__ = ("_columns",)

    def __init__(self) -> None:
        self._columns: dict[str, tuple[array[int], array[int]]] = {}

    def add(self, origin: str, seq: int, value: int = 0) -> None:
        columns = self._columns.get(origin)
        if columns is None:
            columns = self._columns[origin] = (array("q"), array("q"))
        columns[0].append(seq)
        columns[1].append(value)

    def __len__(self) -> int:
        return sum(len(seqs) for seqs, _ in self._columns.values())

    def columns(self) -> Iterator[tuple[str, array[int], array[int]]]:
        """Per origin, its seqs and their values, in the order added."""
        for origin, (seqs, values) in self._columns.items():
            yield origin, seqs, values


class IdIndex:
    """:class:`Ids` sorted per origin, to look ids up by bisection: an id
    added more than once has the value added last."""

    __slots__ = ("_columns",)

    def __init__(self, ids: Ids) -> None:
        self._columns: dict[str, tuple[array[int], array[int]]] = {}
        for origin, seqs, values in ids.columns():
            if any(a > b for a, b in pairwise(seqs)):  # rare: log order is mostly seq order
                order = sorted(range(len(seqs)), key=seqs.__getitem__)  # stable
                self._columns[origin] = (
                    array("q", [seqs[i] for i in order]),
                    array("q", [values[i] for i in order]),
                )
            else:
                self._columns[origin] = (seqs, values)

    def get(self, origin: str, seq: int) -> int | None:
        """The value of id ``(origin, seq)``; ``None`` if it is not here."""
        columns = self._columns.get(origin)
        if columns is None:
            return None
        seqs, values = columns
        i = bisect_right(seqs, seq) - 1
        return values[i] if i >= 0 and seqs[i] == seq else None

    def __contains__(self, key: object) -> bool:
        origin, seq = cast(Key, key)
        return self.get(origin, seq) is not None

    def items(self) -> Iterator[tuple[str, int, int]]:
        """Each id once, with its value: ``(origin, seq, value)``."""
        for origin, (seqs, values) in self._columns.items():
            last = len(seqs) - 1
            for i, seq in enumerate(seqs):
                if i == last or seqs[i + 1] != seq:
                    yield origin, seq, values[i]


@dataclass(slots=True)
class Survey:
    """What the sealed segments hold at or below the horizon (one read of each)."""

    #: Per segment number, its size in bytes.
    sizes: dict[int, int] = field(default_factory=dict)
    #: Writes at or below the horizon, with the segment each lies in.
    writes: Ids = field(default_factory=Ids)
    #: Per segment, its Takes at or below the horizon, per (origin, target's
    #: origin): their seqs and their targets' seqs.
    takes: dict[int, dict[tuple[str, str], tuple[array[int], array[int]]]] = field(
        default_factory=dict
    )
    #: The ids of Writes dead if at or below the horizon: the targets of its
    #: Takes, and its Writes whose tuples had expired when read (dead
    #: without a Take: dropped as a taken one is).
    dead: Ids = field(default_factory=Ids)


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
        takes: dict[tuple[str, str], tuple[array[int], array[int]]] = {}
        for _, body in scan.records:
            raw = decode_raw(body)
            if raw[1] > horizon.get(raw[0], 0):
                continue
            if len(raw) == 3:
                found.writes.add(raw[0], raw[1], number)
            elif type(raw[2]) is bytes:
                found.writes.add(raw[0], raw[1], number)
                expires = raw[3].expires
                if expires and expires <= now_ms:
                    found.dead.add(raw[0], raw[1])
            else:
                take = cast(TakeRaw, raw)
                found.dead.add(take[2], take[3])
                columns = takes.get((take[0], take[2]))
                if columns is None:
                    columns = takes[(take[0], take[2])] = (array("q"), array("q"))
                columns[0].append(take[1])
                columns[1].append(take[3])
        if takes:
            found.takes[number] = takes
    return found


@dataclass(frozen=True, slots=True)
class Rewritten:
    """One segment after its rewrite: where each survivor lies now."""

    number: int
    bytes_before: int
    bytes_after: int  # 0: the segment was removed
    survivors: Ids  # each with its new offset
    dropped: Ids


#: Told a rewritten segment's length and entries before it replaces the old
#: one ((0, 0): before the segment is removed), so the MANIFEST accepts both.
Accept = Callable[[int, int], None]


def rewrite(
    directory: Path,
    number: int,
    drop: Container[Key],
    accept: Accept | None = None,
) -> Rewritten:
    """Rewrite sealed segment ``number`` without the entries in ``drop``.

    The survivors are written in the current format (batches of up to
    ``REWRITE_BATCH`` bytes), whatever the format they were read in.
    ``accept`` is called between the new file's fsync and its rename (or
    before the unlink of a segment with no survivors)."""
    path = segment.segment_path(directory, number)
    scan = segment.read_segment(path, number, last=False)
    kept = array("q")  # the offsets of the entries kept, ascending
    survivors = Ids()  # with their offsets (the old ones, until they move)
    dropped = Ids()
    for offset, body in scan.records:
        raw = decode_raw(body)
        if (raw[0], raw[1]) in drop:
            dropped.add(raw[0], raw[1])
        else:
            kept.append(offset)
            survivors.add(raw[0], raw[1], offset)
    if not dropped:
        return Rewritten(number, scan.good_end, scan.good_end, survivors, dropped)
    if not kept:
        if accept is not None:
            accept(0, 0)
        os.unlink(path)
        fsync_dir(directory)
        return Rewritten(number, scan.good_end, 0, survivors, dropped)
    moved = array("q")  # where each kept entry lies now, as ``kept``
    records = segment.batches(map(scan.records.at, kept), REWRITE_BATCH, segment.HEADER.size, moved)
    chunks = [segment.header(number), *records]
    size = sum(map(len, chunks))
    for _, _, offsets in survivors.columns():
        for i, offset in enumerate(offsets):
            offsets[i] = moved[bisect_left(kept, offset)]
    replace_file(
        path, b"".join(chunks), None if accept is None else lambda: accept(size, len(kept))
    )
    return Rewritten(number, scan.good_end, size, survivors, dropped)


#: The most a rewritten segment puts in one batch (far below ``segment.MAX_BODY``).
REWRITE_BATCH = 1024 * 1024
