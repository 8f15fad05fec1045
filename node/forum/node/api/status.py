"""The status document of a node (``GET /v1/status``), built by the server and
parsed by the client.

Its figures have one source each: those of the tuple space are the Forum's
own (:class:`~forum.node.space.forum.ForumStats`, taken by name in :meth:`NodeStatus.of`,
not copied field by field), and each peer is one :class:`PeerStatus` row,
filled by replication and read back by the client (and ``forum status``)
typed, not as a mapping re-read by key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from forum.node.core.reports import ForumStats


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """One peer of a node, as its status shows it (replication fills these)."""

    #: The URL the node dials (a seed as configured, or the URL the peer advertised).
    url: str
    #: The URL the peer advertises itself.
    advertised: str | None
    #: The peer's origin, once it answered.
    origin: str | None
    #: Whether the peer is configured (``--peer``), not learned.
    seed: bool
    #: ``alive``, ``suspect`` or ``dead``.
    state: str
    #: Wall-clock time of the last good call, and seconds since then.
    last_contact: float | None
    last_contact_age: float | None
    #: Failed calls in a row, and the last one's error.
    failures: int
    last_error: str | None
    #: Entries held here that the peer lacks, as of its last vector.
    behind: int | None
    #: Entries waiting in its push queue.
    queued: int
    #: Seqs held here that the peer does not hold, summed over origins: how far
    #: it keeps the compaction horizon below this node's vector (every seq held
    #: when its vector is unknown; 0 once it is forgotten).
    holds_back: int = 0
    #: Not heard from for ``forget_after``: it no longer holds compaction back.
    forgotten: bool = False
    #: Seconds the peer's wall clock is ahead of this node's (negative: behind),
    #: as replication measures it; ``None`` until known (docs/replication.md "Clocks").
    clock_offset: float | None = None
    #: Seconds since the peer last held every entry this node held then: the
    #: age of the oldest entry here it lacks, as of its last vector (0: it
    #: lacks none; ``None``: never heard). To half a second, never under
    #: (docs/replication.md "Lag").
    lag_seconds: float | None = None
    #: The peer and this node refuse each other's replication requests: their
    #: clocks are further apart than ``max_clock_skew`` (``clock_offset`` says
    #: by how much; docs/replication.md "Clocks").
    clock_refused: bool = False

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> PeerStatus:
        return cls(**_known(cls, document))


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether the node should take writes, beyond its own health: what
    replication says (its clock against its peers', ``forum.replication.clocks``).
    ``/readyz`` answers 503 with ``not_ready``; both show in ``/v1/status``."""

    #: Why it should not (its clock is the odd one out in the cluster), or ``None``.
    not_ready: str | None = None
    #: What is wrong but does not stop it (a peer refused for its clock).
    degraded: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamFigures:
    """The client streams of a node (``GET /v1/stream``, docs/wire.md)."""

    #: Streams open now.
    open: int = 0
    #: Requests in flight now, over all streams.
    in_flight: int = 0
    #: The most requests ever in flight at once on one stream: never more than
    #: ``max_in_flight``, however fast a client sends (the node stops reading).
    peak_in_flight: int = 0
    max_in_flight: int = 0
    #: Requests answered, and streams closed for a bad frame, since start.
    requests: int = 0
    bad_frames: int = 0


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """What a node says about itself."""

    #: The node's name (``--node-id``).
    node_id: str
    #: The incarnation id its entries carry: the name plus a suffix made with its data dir.
    origin: str
    #: The URL peers should use to reach it.
    advertise: str
    version: str
    uptime_seconds: float
    #: Entries (writes and takes) in its Strand.
    entries: int
    live: int
    strand_bytes: int
    segments: int
    waiting_takers: int
    #: Tuples reserved by consumers, not yet acked (not in ``live``).
    reserved: int
    long_polls: int
    writes: int
    takes: int
    double_takes: int
    tails_cut: int
    fsync: str
    #: One row per peer, filled by replication (empty without it).
    peers: tuple[PeerStatus, ...] = ()
    #: Compaction passes run, Strand bytes given back, entries dropped (0 when
    #: a document has none).
    compactions: int = 0
    bytes_reclaimed: int = 0
    entries_dropped: int = 0
    #: Per origin, the seq up to which every entry is held (or was dropped).
    vector: dict[str, int] = field(default_factory=dict)
    #: Per origin, the seq up to which every member holds every entry: what
    #: compaction may drop (the dead among it).
    horizon: dict[str, int] = field(default_factory=dict)
    #: The client streams' :class:`StreamFigures`, each as ``streams_<name>``
    #: (0 when a document has none).
    streams_open: int = 0
    streams_in_flight: int = 0
    streams_peak_in_flight: int = 0
    streams_max_in_flight: int = 0
    streams_requests: int = 0
    streams_bad_frames: int = 0
    #: Tuples written but not due yet, and tuples expired here since start.
    delayed: int = 0
    expired: int = 0
    #: The prefixes paused here, and per limited prefix [tuples held, limit].
    paused: tuple[str, ...] = ()
    limits: dict[str, list[int]] = field(default_factory=dict)
    #: Why the node says it is not ready (``/readyz`` 503) beyond its storage,
    #: and what degrades it without stopping it (:class:`Readiness`).
    not_ready: str | None = None
    degraded: tuple[str, ...] = ()
    #: What ``forum serve --repair`` found and fetched back from peers
    #: (forum.replication.repair's report); ``None`` when no repair ran.
    repair: dict[str, Any] | None = None
    #: Per prefix (up to its first ``/``), the double takes of tuples handed
    #: out here (``ForumStats.double_takes_by_prefix``).
    double_takes_by_prefix: dict[str, int] = field(default_factory=dict)
    #: The node's replica group and its cluster map's epoch (docs/scaling.md);
    #: ``None`` on a node without a map (its cluster is one group).
    group: str | None = None
    map_epoch: int | None = None
    #: Keyed tuples written here whose slot another group owns (misplaced, not lost).
    misplaced_writes: int = 0

    @classmethod
    def of(
        cls,
        stats: ForumStats,
        *,
        node_id: str,
        advertise: str,
        version: str,
        uptime_seconds: float,
        long_polls: int,
        fsync: str,
        peers: tuple[PeerStatus, ...],
        horizon: dict[str, int] | None = None,
        streams: StreamFigures = StreamFigures(),
        readiness: Readiness = Readiness(),
        repair: Mapping[str, Any] | None = None,
        cluster: tuple[str, int, int] | None = None,
    ) -> NodeStatus:
        """The status of a node whose Forum reports ``stats``: every figure of
        ``stats`` is taken as it is; the rest is the node's."""
        figures = {name: getattr(stats, name) for name in _FORUM_FIGURES}
        return cls(
            **figures,
            node_id=node_id,
            advertise=advertise,
            version=version,
            uptime_seconds=uptime_seconds,
            long_polls=long_polls,
            fsync=fsync,
            peers=peers,
            horizon=horizon or {},
            repair=None if repair is None else dict(repair),
            **{f"streams_{f.name}": getattr(streams, f.name) for f in fields(StreamFigures)},
            not_ready=readiness.not_ready,
            degraded=readiness.degraded,
            group=None if cluster is None else cluster[0],
            map_epoch=None if cluster is None else cluster[1],
            misplaced_writes=0 if cluster is None else cluster[2],
        )

    def to_document(self) -> dict[str, Any]:
        document = asdict(self)
        document["peers"] = [asdict(p) for p in self.peers]
        return document

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> NodeStatus:
        """Parse a status document; fields this client does not know are ignored
        (a newer node may say more), missing ones are a ``KeyError``."""
        values = _known(cls, document)
        values["peers"] = tuple(PeerStatus.from_document(p) for p in values.get("peers", ()))
        values["degraded"] = tuple(values.get("degraded", ()))
        return cls(**values)


#: Every figure of the Forum's stats is in the status, under its own name.
_FORUM_FIGURES = tuple(f.name for f in fields(ForumStats))


def _known(kind: type[Any], document: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(kind)}
    return {k: v for k, v in document.items() if k in names}
