"""Replication: gossip of entries between Forum nodes.

Push of new entries in small batches, anti-entropy pull by version vectors,
membership with liveness, all over signed msgpack HTTP calls. ``forum serve``
plugs it in with :func:`extension`.
"""

from forum.replication.config import ReplicationConfig
from forum.replication.errors import (
    BadMessage,
    BadSignature,
    PeerError,
    PeerIsSelf,
    PeerRejected,
    PeerTimeout,
    PeerUnavailable,
    ReplicationError,
    Unauthenticated,
)
from forum.replication.extension import configured, extension
from forum.replication.membership import Membership, Peer, PeerState
from forum.replication.replicator import Replicator
from forum.replication.transport import HttpTransport, PeerTransport
from forum.replication.vector import Order, VersionVector

__all__ = [
    "BadMessage",
    "BadSignature",
    "HttpTransport",
    "Membership",
    "Order",
    "Peer",
    "PeerError",
    "PeerIsSelf",
    "PeerRejected",
    "PeerState",
    "PeerTimeout",
    "PeerTransport",
    "PeerUnavailable",
    "ReplicationConfig",
    "ReplicationError",
    "Replicator",
    "Unauthenticated",
    "VersionVector",
    "configured",
    "extension",
]
