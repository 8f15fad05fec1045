"""Every error the ``forum.replication`` package raises, under one root.

::

    ReplicationError                anything replication raises on purpose
    ├── PeerError                   a call to one peer failed (``peer`` names its URL;
    │   │                           also node's ClientError: the one client-error base)
    │   ├── PeerUnavailable         no answer: refused, reset, DNS (retriable;
    │   │   │                       also a NodeUnavailable)
    │   │   └── PeerTimeout         no answer in time (also a NodeTimeout, a TimeoutError)
    │   └── PeerRejected            the peer answered with an error status
    │       ├── Unauthenticated     401: no valid proof of the cluster key for that peer
    │       └── PeerIsSelf          409: the "peer" is this very node
    ├── BadSignature                a body lacks valid proof of the cluster key
    │   └── ClockSkewed             ... only its time is off: the sender's clock
    │                               (``offset`` from ours) is past max_clock_skew
    └── BadMessage                  a replication body is malformed or forged
                                    (also a ValueError)

``retriable`` tells a caller whether doing the same thing again may succeed,
by the rule the node's client follows too (:func:`forum.node.core.errors.retriable_status`).
"""

from __future__ import annotations

from forum.node.core.errors import ClientError, NodeTimeout, NodeUnavailable, retriable_status


class ReplicationError(Exception):
    """Root of every error raised by Forum's replication package."""

    retriable: bool = False


class PeerError(ReplicationError, ClientError):
    """A call to a peer failed. ``peer`` names the peer's URL (as ``node`` does)."""

    def __init__(self, peer: str, message: str) -> None:
        super().__init__(peer, message)
        self.peer = peer


class PeerUnavailable(PeerError, NodeUnavailable):
    """The peer could not be reached (connection refused or reset, DNS)."""

    # As every NodeUnavailable; said again, since ReplicationError's False comes first.
    retriable = True


class PeerTimeout(PeerUnavailable, NodeTimeout):
    """The peer did not answer within the connect or total timeout."""


class PeerRejected(PeerError):
    """The peer answered with an error status; 5xx and 429 are worth retrying."""

    def __init__(self, peer: str, status: int, message: str) -> None:
        super().__init__(peer, f"HTTP {status}: {message}")
        self.status = status
        self.retriable = retriable_status(status)


class Unauthenticated(PeerRejected):
    """401: the peer does not share our cluster key, our clocks disagree, or the
    request was signed for another node (the peer's origin changed: a wiped node)."""

    def __init__(self, peer: str, message: str) -> None:
        super().__init__(peer, 401, message)


class PeerIsSelf(PeerRejected):
    """409: the URL leads back to this node; it is dropped from the peers."""

    def __init__(self, peer: str, message: str) -> None:
        super().__init__(peer, 409, message)


class BadSignature(ReplicationError):
    """A request or response lacks valid proof of the cluster key (or is stale, or
    was signed for another node)."""


class ClockSkewed(BadSignature):
    """A request whose signature is good but whose time is further from our
    clock than ``max_clock_skew``: ``offset`` is the sender's clock minus ours."""

    def __init__(self, message: str, *, offset: float, signature: str) -> None:
        super().__init__(message)
        self.offset = offset
        #: The request's (good) signature, to sign the refusal with.
        self.signature = signature


class BadMessage(ReplicationError, ValueError):
    """A replication body (request or response) is malformed, forged or too large."""
