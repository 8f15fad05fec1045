"""The data model: entry ids, the two kinds of log entry, and live tuples.

An :class:`EntryId` names one entry forever: ``origin`` is the incarnation id
of the node that appended it (its name plus a random suffix, made once with
its data directory), ``seq`` counts that origin's entries from 1 without gaps.

A :class:`Write` adds a tuple; a :class:`Take` removes the tuple its
``target`` names. A tuple is live on a node iff its Write is known there, no
Take of it is, it is due and it has not expired.

A Write carries the tuple's :class:`Properties` (when it is due, when it
expires, its priority, its dedup key, or that it is a pause marker): every
node applies them alike from the Write itself, so nodes agree on them
without any coordination.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

#: Origins are written into file names and URLs: keep them to a safe alphabet.
_ORIGIN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
MAX_ORIGIN_LENGTH = 128


#: Origins already checked. A node sees few origins, and every entry names
#: one, so this keeps validation off the replay and apply hot paths.
_checked_origins: set[str] = set()
_MAX_CHECKED = 4096


def check_origin(origin: str) -> str:
    """Return ``origin`` if it is a valid origin name, else raise ``ValueError``."""
    if isinstance(origin, str) and origin in _checked_origins:
        return origin
    if not isinstance(origin, str) or not origin:
        raise ValueError("origin must be a non-empty string")
    if len(origin) > MAX_ORIGIN_LENGTH:
        raise ValueError(f"origin longer than {MAX_ORIGIN_LENGTH} characters")
    if not _ORIGIN_CHARS.issuperset(origin):
        raise ValueError(f"origin {origin!r} may hold only letters, digits and -_.")
    if len(_checked_origins) < _MAX_CHECKED:
        _checked_origins.add(origin)
    return origin


@dataclass(frozen=True, slots=True, order=True)
class EntryId:
    """``(origin, seq)``; text form ``origin:seq``."""

    origin: str
    seq: int

    def __post_init__(self) -> None:
        check_origin(self.origin)
        if not isinstance(self.seq, int) or isinstance(self.seq, bool) or self.seq < 1:
            raise ValueError(f"seq must be a positive integer, not {self.seq!r}")

    def __str__(self) -> str:
        return f"{self.origin}:{self.seq}"

    @classmethod
    def parse(cls, text: str) -> EntryId:
        """Parse the text form ``origin:seq``; ``ValueError`` if it is not one."""
        origin, sep, seq = text.rpartition(":")
        if not sep or not seq.isdigit():
            raise ValueError(f"not an entry id (origin:seq): {text!r}")
        return cls(origin, int(seq))


#: Priorities run from ``MIN_PRIORITY`` to ``MAX_PRIORITY``; higher is served first.
MIN_PRIORITY, MAX_PRIORITY = -128, 127


class Properties(NamedTuple):
    """What a Write says about its tuple beyond the payload. Times are wall
    clock, whole milliseconds since the Unix epoch, so every node reads them
    alike (``docs/scheduling.md`` says what clock skew does).

    ``due``: the tuple is invisible (not taken, read, reserved or counted)
    until then; 0: at once. ``expires``: the tuple is gone from then on, on
    every node, without a Take; 0: never. ``priority``: among the matches of
    a take, the highest is served first (oldest first within one).
    ``key``: the write's dedup key, also the Lens's claim key of the job.
    ``dedup_until``: until then, another write with ``key`` on the node that
    wrote this one answers with this one's id instead of writing. ``pause``:
    not a tuple but a marker: takes and reserves of the prefix that is its
    payload answer nothing while it lives (a Take of it resumes the prefix).

    A named tuple rather than a frozen dataclass: one is made per write with
    properties, and a tuple is made several times faster.
    """

    due: int = 0
    expires: int = 0
    priority: int = 0
    key: bytes | None = None
    dedup_until: int = 0
    pause: bool = False


#: The properties of a plain write (the ones nearly every write has).
PLAIN = Properties()


@dataclass(frozen=True, slots=True)
class Write:
    """Adds the tuple ``payload``; ``id`` names it."""

    id: EntryId
    payload: bytes
    props: Properties = PLAIN


@dataclass(frozen=True, slots=True)
class Take:
    """Removes the tuple named ``target``. Its own ``id`` is the taker's."""

    id: EntryId
    target: EntryId


Entry = Write | Take


@dataclass(frozen=True, slots=True)
class Tuple:
    """A live tuple as handed to a consumer: its id, its bytes, and its
    Write's properties."""

    id: EntryId
    payload: bytes
    props: Properties = PLAIN


@dataclass(frozen=True, slots=True)
class Reserved(Tuple):
    """A tuple handed out on a lease (``reserve``). ``deliveries`` is 1 the
    first time; ``n`` when ``n - 1`` earlier leases of it on this node ran out
    with neither ``ack`` nor ``release`` (a holder that died, or a job that
    crashes whoever runs it). A release does not count. The count lives in the
    node's memory: a restart of the node starts it again at 1."""

    deliveries: int = 1
