"""The status document of a node (``GET /v1/status``), built by the server and
parsed by the client."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


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
    #: One mapping per peer, filled by replication (empty without it).
    peers: tuple[Mapping[str, Any], ...] = ()

    def to_document(self) -> dict[str, Any]:
        document = asdict(self)
        document["peers"] = [dict(p) for p in self.peers]
        return document

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> NodeStatus:
        """Parse a status document; fields this client does not know are ignored
        (a newer node may say more), missing ones are a ``KeyError``."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in document.items() if k in names}
        values["peers"] = tuple(values.get("peers", ()))
        return cls(**values)
