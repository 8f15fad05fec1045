"""Every error the ``node`` package raises, under one root.

::

    ForumError                      anything Forum raises on purpose
    ├── StrandError                 the log could not be written or read
    │   ├── StrandCorrupt           a record before the tail fails its checksum
    │   ├── RecordTooLarge          an entry too large for one record (never written)
    │   └── DataDirLocked           another Strand (process) holds the directory
    ├── SerializationError          an entry could not be encoded or decoded
    └── ClientError                 a remote node could not do what was asked
        ├── NodeUnavailable         no answer: refused, reset, DNS (retriable)
        │   └── NodeTimeout         no answer in time (also a TimeoutError)
        └── NodeRejected            the node answered with an error status
            ├── Unauthorized        401: missing or wrong token
            └── PayloadTooLarge     413: body over the node's limit

``retriable`` tells a caller whether doing the same thing again may succeed.
"""

from __future__ import annotations


class ForumError(Exception):
    """Root of every error raised by Forum's node package."""

    retriable: bool = False


class StrandError(ForumError):
    """The Strand (the append-only log) could not be written or read.

    A failed append changes nothing: the index never claims what the log does
    not hold.
    """


class StrandCorrupt(StrandError):
    """A record before the tail of a segment is damaged; the log will not open."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt record at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class RecordTooLarge(StrandError, ValueError):
    """An entry too large for one record of the log: refused, nothing written.

    Replay accepts no larger record, so storing it would make the log
    unreadable; it is bad input, not a storage fault.
    """


class DataDirLocked(StrandError):
    """The data directory is held by another open Strand (another node process)."""

    def __init__(self, directory: str, pid: str | None) -> None:
        holder = f"process {pid}" if pid else "another process"
        super().__init__(
            f"data directory {directory} is in use by {holder} (one directory, one node)"
        )
        self.directory = directory
        self.pid = pid


class SerializationError(ForumError):
    """An entry (or a request body) could not be encoded or decoded."""


class ClientError(ForumError):
    """A request to a remote node failed. ``node`` names the node's URL."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(f"{node}: {message}")
        self.node = node


class NodeUnavailable(ClientError):
    """The node could not be reached (connection refused, reset, DNS)."""

    retriable = True


class NodeTimeout(NodeUnavailable, TimeoutError):
    """The node did not answer in time."""


class NodeRejected(ClientError):
    """The node answered with an error status and an error body."""

    def __init__(self, node: str, status: int, code: str, message: str) -> None:
        super().__init__(node, f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.retriable = status >= 500


class Unauthorized(NodeRejected):
    """401: the client's token is missing or wrong."""


class PayloadTooLarge(NodeRejected):
    """413: the body is over the node's payload limit."""
