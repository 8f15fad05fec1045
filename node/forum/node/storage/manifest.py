"""The MANIFEST: which segment files a Strand's directory holds, and how much of each.

A segment's records each carry a checksum, but a file deleted, or cut at a
record boundary, or an emptied last segment, leaves nothing damaged to find:
only a record of what should be there can tell. The ``MANIFEST`` file of
the data directory is that record. It is a document of
:mod:`forum.node.storage.checked_file` (a msgpack map followed by its CRC-32, u32 BE,
replaced atomically: ``MANIFEST.tmp`` written and fsynced, renamed, the
directory fsynced)::

    {"version": 1,
     "origin": str,          the data directory's origin (its ORIGIN file)
     "own": int,             the highest seq of that origin in the durable
                             part of the log when written
     "active": [number, checkpoint],
                             the segment appends go to, and a length of it
                             known durable (fsynced): the file is at least
                             that long
     "active_ranges": [[origin, lo, hi], ...],
                             per origin, the lowest and highest seq in the
                             active segment when written
     "sealed": [[number, length, entries, ranges, also], ...]}
                             every sealed segment: its exact length, the
                             entries in it, per origin the seqs it held
                             ([[origin, lo, hi], ...]), and ``also``: nil, or
                             [length, entries] a rewrite by compaction is
                             putting in its place ([0, 0]: removing it), so
                             both are whole until the next write of the
                             MANIFEST.

When it is written:

* at each roll: the full segment, fsynced, becomes sealed with its length
  and entries, and the new one (its header fsynced) active;
* by compaction: before a rewritten segment is renamed in (or an emptied
  one removed) its new length is accepted as ``also``; at the end of the
  pass the old one is forgotten;
* at the checkpoints of the active segment's length: every
  ``checkpoint_interval`` (1 s) while its durable length grew, and on a
  clean close. The length is one an fsync covered: the group commit's under
  ``always``, the background fsync's under ``interval``; under ``never``
  nothing is fsynced between rolls, so the checkpoint stays the header's;
* on open, when what it found differs from what the MANIFEST said (a torn
  tail cut, a directory with no MANIFEST given one, repair).

Segments are flagged in their header (``segment.MANIFESTED``) once a
MANIFEST accounts for them, so a deleted MANIFEST is found too. A data
directory with neither (no MANIFEST, no flagged segment: one made by a
Forum without MANIFESTs) is trusted once as it is, and a MANIFEST written
for it.

This module holds the document and its reading and writing; what a
directory that does not match it means (refused, or set aside in repair
mode) is decided by replay (:mod:`forum.node.storage.replay`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forum.node.core.errors import StrandCorrupt, StrandDamaged
from forum.node.storage.checked_file import read_document, write_document
from forum.node.storage.compaction import MANIFEST_FILE

MANIFEST_VERSION = 1
#: Per origin, the lowest and the highest seq a segment held.
Ranges = Mapping[str, tuple[int, int]]
#: ``Sealed.also`` for a segment compaction is removing.
GONE = (0, 0)


@dataclass(frozen=True, slots=True)
class Sealed:
    """What the MANIFEST says of one sealed segment."""

    length: int
    entries: int
    ranges: Ranges = field(default_factory=dict)
    #: A rewrite under way: this (length, entries) is whole too; ``GONE``: so is no file.
    also: tuple[int, int] | None = None

    def accepts(self, length: int, entries: int) -> bool:
        return (length, entries) in ((self.length, self.entries), self.also)


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a Strand's directory should hold (see the module docstring)."""

    origin: str
    own: int = 0
    active: int = 0
    checkpoint: int = 0
    active_ranges: Ranges = field(default_factory=dict)
    sealed: Mapping[int, Sealed] = field(default_factory=dict)

    def rolled(self, sealed: Sealed | None, active: int, checkpoint: int, own: int) -> Manifest:
        """The active segment sealed as ``sealed`` (``None``: there was none),
        ``active`` the next."""
        kept = dict(self.sealed)
        if sealed is not None and self.active:
            kept[self.active] = sealed
        return dataclasses.replace(
            self,
            own=max(self.own, own),
            sealed=kept,
            active=active,
            checkpoint=checkpoint,
            active_ranges={},
        )

    def checkpointed(self, active: int, checkpoint: int, own: int, ranges: Ranges) -> Manifest:
        """A durable length of segment ``active``; no change if it is no
        longer the active one (a roll came first)."""
        if active != self.active or checkpoint < self.checkpoint:
            return self
        return dataclasses.replace(
            self,
            own=max(self.own, own),
            checkpoint=checkpoint,
            active_ranges=dict(ranges),
        )

    def rewriting(self, number: int, length: int, entries: int) -> Manifest:
        """Compaction is about to put ``(length, entries)`` in place of sealed
        segment ``number`` (``GONE``: remove it): both are whole."""
        old = self.sealed[number]
        return self._with(number, dataclasses.replace(old, also=(length, entries)))

    def rewritten(self, number: int, length: int, entries: int) -> Manifest:
        """Sealed segment ``number`` is now ``(length, entries)`` (0: removed)."""
        if not length:
            return dataclasses.replace(
                self, sealed={n: s for n, s in self.sealed.items() if n != number}
            )
        old = self.sealed[number]
        return self._with(number, Sealed(length, entries, old.ranges))

    def settled(self) -> Manifest:
        """With no rewrite under way (what was rewritten is in place)."""
        return dataclasses.replace(
            self,
            sealed={n: dataclasses.replace(s, also=None) for n, s in self.sealed.items()},
        )

    def _with(self, number: int, sealed: Sealed) -> Manifest:
        return dataclasses.replace(self, sealed={**self.sealed, number: sealed})

    def document(self) -> dict[str, Any]:
        return {
            "version": MANIFEST_VERSION,
            "origin": self.origin,
            "own": self.own,
            "active": [self.active, self.checkpoint],
            "active_ranges": _ranges_out(self.active_ranges),
            "sealed": [
                [n, s.length, s.entries, _ranges_out(s.ranges), list(s.also) if s.also else None]
                for n, s in sorted(self.sealed.items())
            ],
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Manifest:
        """``ValueError`` (or ``KeyError``, ``TypeError``) if it is not one."""
        if document["version"] != MANIFEST_VERSION:
            raise ValueError(f"unknown MANIFEST version {document['version']!r}")
        active, checkpoint = document["active"]
        sealed = {}
        for number, length, entries, ranges, also in document["sealed"]:
            kept_also = (int(also[0]), int(also[1])) if also is not None else None
            sealed[int(number)] = Sealed(int(length), int(entries), _ranges_in(ranges), kept_also)
        return cls(
            origin=str(document["origin"]),
            own=int(document["own"]),
            active=int(active),
            checkpoint=int(checkpoint),
            active_ranges=_ranges_in(document["active_ranges"]),
            sealed=sealed,
        )


def manifest_path(directory: Path) -> Path:
    return directory / MANIFEST_FILE


def read_manifest(directory: Path) -> Manifest | None:
    """The directory's MANIFEST, ``None`` if there is none; ``StrandDamaged``
    if it cannot be read."""
    path = manifest_path(directory)
    try:
        document = read_document(path)
        return None if document is None else Manifest.from_document(document)
    except StrandCorrupt as exc:
        raise StrandDamaged(str(path), exc.reason) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise StrandDamaged(str(path), f"the MANIFEST file is not one: {exc}") from exc


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """Replace the MANIFEST atomically and durably (blocking)."""
    write_document(manifest_path(directory), manifest.document())


def _ranges_out(ranges: Ranges) -> list[list[Any]]:
    return [[origin, lo, hi] for origin, (lo, hi) in sorted(ranges.items())]


def _ranges_in(ranges: Any) -> dict[str, tuple[int, int]]:
    return {str(origin): (int(lo), int(hi)) for origin, lo, hi in ranges}
