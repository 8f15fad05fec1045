"""A damaged data directory: finding what does not match the MANIFEST, and setting it aside.

On open the Strand reads each segment file against what its ``MANIFEST``
(:mod:`forum.node.storage.manifest`) says it must be (:func:`plan`, :func:`check`): a
sealed segment exactly its length and entries, the current one at least its
checkpoint, nothing missing, nothing unknown. Every :class:`Problem` found
is collected before anything is changed. Without repair mode the open is
refused with the first, in one line (:class:`forum.node.core.errors.StrandDamaged`).

A Strand opened with ``StrandConfig.repair`` does not refuse: it sets the
damaged files aside under ``<data-dir>/damaged/<timestamp>/``
(:func:`set_aside`, never deleting them), replays what can still be read,
and says in :class:`Damage` what it found. Repair from peers starts from
this: :meth:`forum.node.storage.strand.Strand.missing_own` lists the node's own seqs to
fetch back, and peers are asked for every other origin's entries again (the
floors of the origins the lost files held were lowered, so the node takes
them in).

Until the lost entries are back, the node's live set is not to be trusted:
a Take that lay in a lost file leaves its Write live here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from forum.node.storage import segment
from forum.node.storage.checked_file import replace_file
from forum.node.storage.files import fsync_dir
from forum.node.storage.manifest import GONE, Manifest, Ranges, Sealed
from forum.node.storage.segment import SegmentScan


@dataclass(frozen=True, slots=True)
class Damage:
    """What was wrong with a data directory opened in repair mode.

    ``description`` is one line (what :class:`forum.node.core.errors.StrandDamaged`
    would have said, and how many more problems were found); ``problems``
    one line per damaged or missing file. ``set_aside`` are the files moved
    into ``damaged_dir`` as they were found (a cut segment's readable part
    stays in the data directory, a copy of the whole file is set aside).
    ``own_seq_floor`` is the highest seq of the node's own origin that the
    directory shows was ever issued: the Strand never issues a seq at or
    below it again, and :meth:`forum.node.storage.strand.Strand.missing_own` lists those
    below it that it does not hold.
    """

    description: str
    problems: tuple[str, ...]
    set_aside: tuple[Path, ...]
    damaged_dir: Path | None
    own_seq_floor: int

    def __post_init__(self) -> None:
        if "\n" in self.description:
            raise ValueError("a damage description is one line")
        if self.own_seq_floor < 0:
            raise ValueError("own_seq_floor must be at least 0")


#: The directory, under the data directory, damaged files are set aside in.
DAMAGED_DIR = "damaged"


@dataclass(frozen=True, slots=True)
class Problem:
    """One file of a data directory that is not what its MANIFEST says.

    ``keep`` is how many bytes at its start are still good (a cut segment's
    records before the cut; 0: none, or no file). ``ranges`` per origin the
    seqs it held as far as the MANIFEST says (``None``: unknown, any).
    ``present``: there is a file to set aside.
    """

    path: Path
    reason: str
    ranges: Ranges | None
    present: bool
    keep: int = 0
    offset: int = 0

    def line(self) -> str:
        return f"{self.path}: {self.reason}"

    @property
    def number(self) -> int:
        """The number of the segment it is about (0: not a segment)."""
        stem, _, ext = self.path.name.partition(".")
        return int(stem) if "." + ext == segment.SUFFIX and stem.isdigit() else 0


@dataclass(frozen=True, slots=True)
class Expected:
    """What one segment file found in (or named by) the MANIFEST must be.

    ``role``: ``sealed`` (exactly ``sealed``'s length and entries),
    ``active`` (at least ``checkpoint`` bytes), ``next`` (the one after the
    active one: a roll the MANIFEST was not told of before a crash) or
    ``trusted`` (no MANIFEST: a directory from before them, read as it is).
    ``last``: the last file, whose torn tail may be cut.
    """

    number: int
    role: Literal["sealed", "active", "next", "trusted"]
    last: bool
    sealed: Sealed | None = None
    checkpoint: int = 0
    ranges: Ranges | None = None


def plan(
    directory: Path, manifest: Manifest | None, numbers: Sequence[int]
) -> tuple[list[Expected], list[Problem]]:
    """The segment files to read, in order, with what each must be; and the
    problems found without reading any (a file the MANIFEST names is not
    there; a file it does not name is)."""
    last = numbers[-1] if numbers else None
    if manifest is None:
        return [Expected(n, "trusted", n == last) for n in numbers], []
    files = set(numbers)
    expected: list[Expected] = []
    problems: list[Problem] = []
    active = manifest.active
    for number in sorted(set(manifest.sealed) | files | ({active} if active else set())):
        path = segment.segment_path(directory, number)
        sealed = manifest.sealed.get(number)
        if sealed is not None:
            if number in files:
                expected.append(Expected(number, "sealed", False, sealed, ranges=sealed.ranges))
            elif sealed.also != GONE:  # else compaction removed it
                what = f"a sealed segment of {sealed.length} bytes, {sealed.entries} entries"
                problems.append(
                    Problem(path, f"missing: the MANIFEST lists {what}", sealed.ranges, False)
                )
        elif number == active:
            ranges = manifest.active_ranges
            if number in files:
                expected.append(
                    Expected(
                        number,
                        "active",
                        number == last,
                        checkpoint=manifest.checkpoint,
                        ranges=ranges,
                    )
                )
            else:
                what = f"the current segment, at least {manifest.checkpoint} bytes long"
                problems.append(
                    Problem(path, f"missing: the MANIFEST names it as {what}", ranges, False)
                )
        elif number == active + 1 and number == last:
            expected.append(Expected(number, "next", True, ranges={}))
        else:
            # Not replayed: nothing says what it is (a file from another directory?).
            problems.append(Problem(path, "a segment the MANIFEST does not name", {}, True))
    return expected, problems


def check(path: Path, expected: Expected, scan: SegmentScan, size: int) -> Problem | None:
    """What is wrong with a segment file ``size`` bytes long, read as
    ``scan``, that should be as ``expected``; ``None`` if nothing."""
    entries = len(scan.records)
    # A file shorter than its header was emptied (or cut to nothing): say so,
    # rather than how reading it failed.
    reason = scan.damage if size >= segment.HEADER.size else None
    if reason is None and expected.sealed is not None:
        sealed = expected.sealed
        if not sealed.accepts(scan.good_end, entries):
            if scan.good_end < sealed.length:
                reason = f"{_cut(size)}: {scan.good_end} of its {sealed.length} bytes are left"
            else:
                reason = (
                    f"holds {entries} entries in {scan.good_end} bytes; "
                    f"the MANIFEST says {sealed.entries} in {sealed.length}"
                )
    elif reason is None and scan.good_end < expected.checkpoint:
        written = f"{expected.checkpoint} bytes known written"
        if scan.torn_bytes > 0 and size >= expected.checkpoint:
            reason = f"damaged record at offset {scan.good_end}, within the {written}"
        else:
            reason = f"{_cut(size)}: {scan.good_end} bytes are left of the {written}"
    if reason is None:
        return None
    keep = scan.good_end if scan.good_end > segment.HEADER.size else 0
    return Problem(path, reason, expected.ranges, True, keep, scan.good_end)


def _cut(size: int) -> str:
    return "emptied" if size < segment.HEADER.size else "cut short"


def set_aside(
    directory: Path, problems: Sequence[Problem], now: float
) -> tuple[Path | None, list[Path]]:
    """Move the files of ``problems`` into ``damaged/<UTC time>/`` under
    ``directory`` (blocking). A file with a good start (``keep``) is copied
    there whole, and cut to its good start in place: its records are kept.
    Nothing is deleted. Returns the directory and the files it now holds."""
    present = [p for p in problems if p.present]
    if not present:
        return None, []
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    parent = directory / DAMAGED_DIR
    target = parent / stamp
    n = 1
    while target.exists():
        n += 1
        target = parent / f"{stamp}-{n}"
    target.mkdir(parents=True)
    fsync_dir(parent)
    fsync_dir(directory)
    moved = []
    for problem in present:
        dest = target / problem.path.name
        if problem.keep:
            data = problem.path.read_bytes()
            replace_file(dest, data)
            replace_file(problem.path, data[: problem.keep])
        else:
            os.replace(problem.path, dest)
            fsync_dir(target)
            fsync_dir(directory)
        moved.append(dest)
    return target, moved
