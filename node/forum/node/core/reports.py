"""What a node reports about itself: a snapshot of its tuple space
(:class:`ForumStats`, for status and metrics) and what one compaction pass
did (:class:`CompactionReport`). Plain values, so the client decodes them
without the server."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ForumStats:
    """A snapshot of one node's tuple space, for status and metrics."""

    origin: str
    entries: int
    live: int
    strand_bytes: int
    segments: int
    waiting_takers: int
    reserved: int
    writes: int
    takes: int
    double_takes: int
    tails_cut: int
    #: Compaction passes run, Strand bytes they gave back, entries they dropped.
    compactions: int = 0
    bytes_reclaimed: int = 0
    entries_dropped: int = 0
    #: Per origin, the seq up to which every entry is held here (or was dropped).
    vector: dict[str, int] = field(default_factory=dict)
    #: Tuples written but not due yet; tuples that expired here (since start).
    delayed: int = 0
    expired: int = 0
    #: The prefixes paused here; per limited prefix, [tuples held here, its
    #: limit]. Prefixes as text (UTF-8, other bytes as ``\\xNN``): status is JSON.
    paused: tuple[str, ...] = ()
    limits: dict[str, list[int]] = field(default_factory=dict)
    #: Per prefix (a payload up to its first ``/``, as text like ``limits``),
    #: the double takes of tuples handed out here (reserved when a peer's
    #: Take came); those of tuples gone here already are in ``double_takes`` only.
    double_takes_by_prefix: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one compaction pass did."""

    bytes_before: int
    bytes_after: int
    entries_dropped: int
    segments_rewritten: int
    segments_removed: int
    #: Per origin, the floor after the pass: every seq up to it is here or dead.
    floors: dict[str, int]
    seconds: float
