"""Every error the ``node`` package raises, under one root.

::

    ForumError                      anything Forum raises on purpose
    ├── StrandError                 the log could not be written or read
    │   ├── StrandCorrupt           a record before the tail fails its checksum
    │   │   └── StrandDamaged       a segment missing, cut or emptied (MANIFEST)
    │   ├── RecordTooLarge          an entry too large for one record (never written)
    │   └── DataDirLocked           another Strand (process) holds the directory
    ├── SerializationError          an entry could not be encoded or decoded
    ├── LimitExceeded               a write over a prefix's limit (retriable)
    ├── TooFewCopies                a write held by fewer members than its copies in time
    ├── TooManyCopies               copies above the cluster's size (a ValueError; nothing written)
    ├── ClusterMapError             a cluster map that cannot be used (a ValueError)
    ├── TracingUnavailable          OTLP export asked for without the otel extra installed
    └── ClientError                 a remote node could not do what was asked
        ├── NodeUnavailable         no answer: refused, reset, DNS (retriable)
        │   └── NodeTimeout         no answer in time (also a TimeoutError)
        └── NodeRejected            the node answered with an error status
            ├── Unauthorized        401: missing or wrong token
            ├── PayloadTooLarge     413: body over the node's limit
            ├── Throttled           429: a limited prefix is full (also a LimitExceeded)
            └── CopiesShort         504: too few copies in time (also a TooFewCopies)

``retriable`` tells a caller whether doing the same thing again may succeed.
:class:`ClientError` is also the base of replication's ``PeerError`` (a call
from one node to another), so both clients share it, :func:`retriable_status`
and :func:`error_body`: one rule for what is worth retrying, one reading of
the node's error answers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from forum.node.core.entries import EntryId


def retriable_status(status: int) -> bool:
    """Whether an error status is worth the same request again: 5xx (the node
    is failing, or shutting down) and 429 (too busy now); never another 4xx."""
    return status >= 500 or status == 429


def error_body(status: int, body: bytes) -> tuple[str, str]:
    """The ``(error, message)`` of a node's JSON error answer; for anything else
    (a proxy's page, a cut body), ``http_<status>`` and the start of the body."""
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    start = body[:200].decode("utf-8", "replace")
    if not isinstance(document, dict):
        return f"http_{status}", start
    code, message = document.get("error"), document.get("message")
    return (
        code if isinstance(code, str) else f"http_{status}",
        message if isinstance(message, str) else start,
    )


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


class StrandDamaged(StrandCorrupt):
    """The data directory does not hold what its ``MANIFEST`` says it should:
    a segment missing, cut short, emptied or failing its checksums, or the
    ``MANIFEST`` itself missing or unreadable. The log will not open (unless
    in repair mode, ``StrandConfig.repair``). ``str()`` is one line naming the
    file and what is wrong with it; ``problems`` has one line per problem."""

    def __init__(
        self, path: str, reason: str, problems: tuple[str, ...] = (), offset: int = 0
    ) -> None:
        StrandError.__init__(self, f"{path}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason
        self.problems = problems or (f"{path}: {reason}",)


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


class LimitExceeded(ForumError):
    """A local write would put a limited prefix over its limit (see the
    node's ``limits``). ``retry_after``: seconds after which to try again.
    A remote node's is :class:`Throttled` (a ``LimitExceeded`` too), so code
    written against the tuple space catches one class either way."""

    retriable = True

    def __init__(self, prefix: bytes, limit: int, retry_after: float) -> None:
        shown = prefix.decode(errors="backslashreplace")
        super().__init__(f"prefix {shown!r} is at its limit of {limit} tuples")
        self.prefix = prefix
        self.limit = limit
        self.retry_after = retry_after


class SerializationError(ForumError):
    """An entry (or a request body) could not be encoded or decoded."""


class ClientError(ForumError):
    """A request to a remote node failed. ``node`` names the node's URL.

    ``retriable`` is ``True`` for no answer (:class:`NodeUnavailable`) and for
    the statuses :func:`retriable_status` names."""

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
        self.retriable = retriable_status(status)


def _rejected(error: NodeRejected, node: str, status: int, code: str, message: str) -> None:
    """Give ``error`` what ``NodeRejected.__init__`` gives, for a subclass
    that is also a ``ForumError`` whose ``__init__`` takes other arguments
    (``NodeRejected``'s cooperative ``super()`` would reach that one's)."""
    ForumError.__init__(error, f"{node}: HTTP {status} {code}: {message}")
    error.node, error.status, error.code = node, status, code
    error.retriable = retriable_status(status)


class Unauthorized(NodeRejected):
    """401: the client's token is missing or wrong."""


class PayloadTooLarge(NodeRejected):
    """413: the body is over the node's payload limit."""


class Throttled(NodeRejected, LimitExceeded):
    """429: the node refused a write over a prefix's limit (its
    :class:`LimitExceeded`); ``prefix``, ``limit`` and ``retry_after`` (seconds)
    as the node said them (``prefix`` b"" and ``limit`` 0 when it did not)."""

    def __init__(
        self,
        node: str,
        status: int,
        code: str,
        message: str,
        *,
        prefix: bytes = b"",
        limit: int = 0,
        retry_after: float = 1.0,
    ) -> None:
        # Not NodeRejected.__init__: its cooperative super() would reach
        # LimitExceeded's, which takes other arguments. The same attributes.
        _rejected(self, node, status, code, message)
        self.prefix = prefix
        self.limit = limit
        self.retry_after = retry_after


class TooFewCopies(ForumError):
    """A write asked for ``copies`` members to hold it (this node one of
    them) and only ``held`` did after it ``waited`` seconds (its timeout, or
    less if the node shut down). The write is not undone: it stays written
    (``ids``), and replication goes on copying it; writing it again would
    write it twice, so this is not ``retriable``."""

    def __init__(self, ids: Sequence[EntryId], held: int, copies: int, waited: float) -> None:
        first = f"{ids[0]}" + (f" and {len(ids) - 1} more" if len(ids) > 1 else "")
        super().__init__(
            f"{held} of {copies} copies held after {waited:.3g} s; the write stays written "
            f"({first}) and is copied on as peers answer"
        )
        self.ids = list(ids)
        self.held = held
        self.copies = copies
        self.waited = waited


class TooManyCopies(ForumError, ValueError):
    """A write asked for more copies than the cluster has members: refused
    before anything is written (bad input, as any bad write option)."""


class CopiesShort(NodeRejected, TooFewCopies):
    """504: the node wrote the tuples but fewer than ``copies`` members held
    them within its timeout (its :class:`TooFewCopies`): ``ids``, ``held``
    and ``copies`` as the node said them. Not retriable (unlike other 5xx):
    the write stands, and again would write it twice."""

    status = 504

    def __init__(
        self, node: str, code: str, message: str, *, ids: Sequence[EntryId], held: int, copies: int
    ) -> None:
        # As Throttled: TooFewCopies.__init__ takes other arguments.
        _rejected(self, node, self.status, code, message)
        self.retriable = False
        self.ids = list(ids)
        self.held = held
        self.copies = copies
        self.waited = 0.0  # the node's message says it


class ClusterMapError(ForumError, ValueError):
    """A cluster map that cannot be used (forum.node.cluster.map): a file that
    is missing or not TOML/JSON, a wrong field, a group or member listed
    twice, no active group, a signature that does not match. The message is
    one line naming where."""


class TracingUnavailable(ForumError):
    """OTLP export (``--otel``) asked for where the ``otel`` extra is not
    installed (:mod:`forum.node.core.tracing`); the message says what to install."""
