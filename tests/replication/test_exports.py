"""The replication package's public surface: exactly these names."""

from __future__ import annotations

from forum import replication

EXPORTED = [
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


def test_all_is_exactly_the_public_names_sorted() -> None:
    assert replication.__all__ == EXPORTED


def test_every_public_class_is_in_all() -> None:
    # Submodules (lowercase) become attributes when imported; classes are all exported.
    assert {name for name in dir(replication) if name[0].isupper()} == {
        name for name in EXPORTED if name[0].isupper()
    }
