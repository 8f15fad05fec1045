"""What a Strand opened in repair mode found wrong with its data directory.

A Strand opened with ``StrandConfig.repair`` does not refuse a damaged
directory (a segment missing, cut, emptied or failing its checksums; the
``MANIFEST`` missing or unreadable): it sets the damaged files aside under
``<data-dir>/damaged/<timestamp>/`` (never deleting them), replays what can
still be read, and says here what it found. Repair from peers starts from
this: :meth:`node.strand.Strand.missing_own` lists the node's own seqs to
fetch back, and peers are asked for every other origin's entries again
(the floors of the origins the lost files held were lowered, so the node
takes them in).

Until the lost entries are back, the node's live set is not to be trusted:
a Take that lay in a lost file leaves its Write live here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Damage:
    """What was wrong with a data directory opened in repair mode.

    ``description`` is one line (what :class:`node.errors.StrandDamaged`
    would have said, and how many more problems were found); ``problems``
    one line per damaged or missing file. ``set_aside`` are the files moved
    into ``damaged_dir`` as they were found (a cut segment's readable part
    stays in the data directory, a copy of the whole file is set aside).
    ``own_seq_floor`` is the highest seq of the node's own origin that the
    directory shows was ever issued: the Strand never issues a seq at or
    below it again, and :meth:`node.strand.Strand.missing_own` lists those
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
