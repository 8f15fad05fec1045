"""Replay on open: every segment read back into the Strand's index, and the
directory checked against its MANIFEST.

What is checked, and what a damaged directory means (refused with
``StrandDamaged``, one line, before anything is changed; or, with
``StrandConfig.repair``, the damaged files set aside and what can be read
replayed), is in the Strand's docstring (:mod:`forum.node.storage.strand`)
and :mod:`forum.node.storage.damage`. Blocking: run in a thread by
``Strand.open``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from forum.node.core.codec import RawEntry, decode_raw
from forum.node.core.errors import SerializationError, StrandCorrupt, StrandDamaged
from forum.node.storage import compaction, damage, segment
from forum.node.storage.damage import Damage, Problem
from forum.node.storage.manifest import Manifest, manifest_path, read_manifest
from forum.node.storage.origin_log import OFFSET_BITS, OriginLog
from forum.node.storage.segments import Replayed, Segments

log = logging.getLogger("forum.node.storage.strand")  # the Strand's lines, under one name


def replay(segments: Segments, repair: bool) -> tuple[list[RawEntry], Damage | None]:
    """Read every segment back into the index, check the directory
    against its MANIFEST (damage is refused, or set aside in repair mode:
    see :mod:`forum.node.storage.damage`), and open the last segment for
    appending (blocking). Returns the entries replayed, in log order, as
    plain values, and what repair mode found (``None``: the directory was
    whole)."""
    directory = segments.directory
    logs = segments.logs
    compaction.remove_leftovers(directory)
    problems: list[Problem] = []
    try:
        found = read_manifest(directory)
    except StrandDamaged as exc:
        found = None
        problems.append(Problem(Path(exc.path), exc.reason, None, True))
    if found is not None and found.origin != segments.origin:
        reason = f"it belongs to origin {found.origin}, the directory's is {segments.origin}"
        problems.append(Problem(manifest_path(directory), reason, None, True))
        found = None
    expected, missing = damage.plan(directory, found, segment.segment_numbers(directory))
    problems += missing
    try:
        floors = compaction.read_floors(directory)
    except StrandCorrupt as exc:  # no floor is known: every seq may come in again
        floors = {}
        problems.append(Problem(Path(exc.path), exc.reason, None, True))
    for origin, floor in floors.items():
        logs[origin] = OriginLog(base=floor)
    replayed: list[RawEntry] = []
    kept: list[Replayed] = []
    flagged = False
    for exp in expected:
        path = segment.segment_path(directory, exp.number)
        try:
            scan = segment.read_segment(path, exp.number, last=exp.last, tolerant=True)
        except StrandCorrupt as exc:  # its header: nothing in it can be read
            problems.append(Problem(path, exc.reason, exp.ranges, True))
            continue
        flagged = flagged or bool(scan.flags & segment.MANIFESTED)
        problem = damage.check(path, exp, scan, scan.good_end + scan.torn_bytes)
        if problem is not None:
            problems.append(problem)
            if not problem.keep:
                continue
        kept.append((exp, scan, _replay_scan(segments, path, exp.number, scan, replayed)))
    if found is None and flagged and not problems:
        reason = "missing, but the segments say a MANIFEST accounted for them"
        problems.append(Problem(manifest_path(directory), reason, None, False))
    if found is not None:
        # Own seqs it shows as issued are never issued again; those not
        # held (a repaired directory's, not yet fetched) are missing.
        segments.own_floor = found.own
    found_damage = _repair(segments, problems, found, repair) if problems else None
    segments.open_last(kept, found, {p.number for p in problems})
    return replayed, found_damage


def _replay_scan(
    segments: Segments,
    path: Path,
    number: int,
    scan: segment.SegmentScan,
    replayed: list[RawEntry],
) -> dict[str, list[int]]:
    """Index one segment's entries (the hot loop of start-up: plain
    values, no entry objects); per origin, the lowest and highest seq."""
    logs = segments.logs
    ranges: dict[str, list[int]] = {}
    base = number << OFFSET_BITS
    for offset, body in scan.records:
        try:
            raw = decode_raw(body)
        except SerializationError as exc:
            raise StrandCorrupt(str(path), offset, str(exc)) from exc
        origin, seq = raw[0], raw[1]
        origin_log = logs.get(origin)
        if origin_log is None:
            origin_log = logs[origin] = OriginLog()
        # False for a second copy of an entry (should a crash ever
        # leave one): it is replayed once.
        if origin_log.replay(seq, base | offset):
            replayed.append(raw)
            segments.entries += 1
        seqs = ranges.get(origin)
        if seqs is None:
            ranges[origin] = [seq, seq]
        elif seq > seqs[1]:
            seqs[1] = seq
        elif seq < seqs[0]:
            seqs[0] = seq
    return ranges


def _repair(
    segments: Segments, problems: list[Problem], found: Manifest | None, repair: bool
) -> Damage:
    """Refuse a damaged directory (``StrandDamaged``, one line) or, in
    ``repair`` mode, set the damaged files aside, lower the floors of the
    origins they held (so peers' copies are taken in again), and keep the
    own seqs they held from being issued again; what was found."""
    lines = tuple(problem.line() for problem in problems)
    first = problems[0]
    more = len(problems) - 1
    reason = first.reason + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")
    if not repair:
        raise StrandDamaged(str(first.path), reason, lines, first.offset)
    logs = segments.logs
    where, moved = damage.set_aside(segments.directory, problems, time.time())
    own_floor = found.own if found is not None else 0
    floors: dict[str, int] = {}
    for problem in problems:
        if problem.ranges is None:  # what it held is unknown: every origin's floor
            floors = {origin: 0 for origin in logs}
            break
        for origin, (lo, _) in problem.ranges.items():
            floors[origin] = min(floors.get(origin, lo - 1), lo - 1)
    for problem in problems:
        own = (problem.ranges or {}).get(segments.origin)
        own_floor = max(own_floor, own[1] if own else 0)
    lowered = False
    for origin, floor in floors.items():
        origin_log = logs.get(origin)
        if origin_log is not None and floor < origin_log.base:
            origin_log.lower_base(max(floor, 0))
            lowered = True
    if lowered:
        compaction.write_floors(segments.directory, segments.floors())
    segments.own_floor = max(segments.own_floor, own_floor)
    found_damage = Damage(
        f"{first.path}: {reason}", lines, tuple(moved), where, segments.own_seq_floor
    )
    for line in lines:
        log.warning("strand: repair: %s", line)
    log.warning(
        "strand: repair: %s; own seqs up to %d were issued, missing: %s",
        f"{len(moved)} file(s) set aside in {where}" if moved else "no file to set aside",
        segments.own_seq_floor,
        segments.missing_own() or "none",
    )
    return found_damage
