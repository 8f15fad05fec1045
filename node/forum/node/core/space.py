"""The tuple-space interface: patterns, and the Protocol every space offers.

:class:`TupleSpace` is what a worker needs from a space. The in-process
:class:`node.Forum` and the remote :class:`node.ForumClient` both satisfy it, so
code written against one runs unchanged against the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from forum.node.core.entries import EntryId, Reserved, Tuple


@dataclass(frozen=True, slots=True)
class Pattern:
    """A byte prefix. ``Pattern(b"")`` matches every tuple."""

    prefix: bytes = b""

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, bytes):
            raise TypeError(f"a pattern is a bytes prefix, not {type(self.prefix).__name__}")

    def matches(self, payload: bytes) -> bool:
        return payload.startswith(self.prefix)


@runtime_checkable
class TupleSpace(Protocol):
    """Write, read and take tuples by prefix.

    ``timeout`` on ``take``/``take_entry``: ``None`` or ``0`` means answer at
    once; a positive number of seconds waits up to that long for a match.
    """

    async def write(self, payload: bytes) -> EntryId: ...

    async def read(self, pattern: Pattern) -> bytes | None: ...

    async def take(self, pattern: Pattern, timeout: float | None = None) -> bytes | None: ...

    async def take_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None: ...

    async def count(self, pattern: Pattern) -> int: ...


@runtime_checkable
class ReservingSpace(Protocol):
    """A space that can hand out a tuple on a lease before taking it for good
    (``Forum`` and ``ForumClient``): a holder that dies before ``ack`` loses
    nothing, the tuple comes back when the lease runs out."""

    async def reserve(
        self, pattern: Pattern, lease: float, timeout: float | None = None
    ) -> Reserved | None: ...

    async def ack(self, entry_id: EntryId) -> bool: ...

    async def release(self, entry_id: EntryId) -> bool: ...

    async def extend(self, entry_id: EntryId, lease: float) -> bool:
        """Renew a reservation's lease to ``lease`` seconds from now;
        ``False`` if the tuple is no longer reserved."""
        ...


#: The longest a write waits for room under a limit (``wait``).
MAX_WAIT = 60.0


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of :meth:`Forum.list`; pass ``next_cursor`` for the next page."""

    tuples: list[Tuple]
    next_cursor: int | None
