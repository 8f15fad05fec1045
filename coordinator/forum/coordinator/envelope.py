"""How a job's claim key, attempt number and last error travel with its tuple.

A job written back for a retry (or parked as a dead letter) must still match
the prefix its workers take, and its handler must see the bytes the producer
wrote. So the payload is not wrapped: a trailer is appended.

Byte format (version 1)::

    payload | meta | meta length: u32 big-endian | magic: 00 46 4A 01 ("\\0FJ" + version)

``meta`` is a msgpack map:

==============  =====  ======================================================
``"key"``       str    the claim key of the job's first delivery (its entry id
                       text, or the user's idempotency key), so every later
                       delivery is deduplicated by the same done marker
``"attempt"``   int    this delivery's attempt number, from 1
``"error"``     str    the last attempt's error, or nil
``"not_before"`` float  optional: Unix time before which this delivery must not
                       run (a retry's backoff, written into the space by the
                       worker whose attempt failed, by its clock: a skew
                       between machines shifts the backoff by as much);
                       absent when it may run now
``"revived"``   str    optional: the id of the dead letter this job was
                       requeued from (``forum jobs retry``), so the Lens
                       counts its attempts afresh (lua/claim.lua), and a copy
                       from before the burial is still turned away; absent
                       for a job never buried
==============  =====  ======================================================

A trailer without ``"not_before"`` and ``"revived"`` is byte for byte what
the version before them wrote, so old and new workers read each other's
tuples (a worker from before ``"revived"`` reads a requeued job's trailer as
part of its payload: requeue once every worker is upgraded).

The attempt a trailer carries is what its copy says; the Lens, which every
copy meets at its claim, counts the attempt it really is (the largest of the
trailer's and the Lens's: forum.coordinator.worker), while it remembers.

A tuple without a valid trailer is a first delivery: attempt 1, no key yet
(the worker uses its entry id). A payload that by chance ends in the magic
but whose trailer does not decode is read as a plain payload too.

A dead letter is ``dead_prefix + payload + trailer``; requeueing strips the
prefix and starts the attempts again under the same claim key, with
``"revived"`` set to the dead letter's id.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import msgpack

MAGIC = b"\x00FJ\x01"
_LENGTH = struct.Struct(">I")
_TAIL = _LENGTH.size + len(MAGIC)
#: The trailer's fields that may be absent (see the module docstring).
_OPTIONAL = frozenset({"not_before", "revived"})
#: Error texts are cut to this many characters: a trailer is not a log.
MAX_ERROR = 2000
#: A dead letter's error is its last word (a task's traceback, say), read by
#: an operator: it keeps this many bytes of UTF-8, the tail when cut (the
#: end of a traceback is where the exception is).
MAX_DEAD_ERROR = 16 * 1024


@dataclass(frozen=True, slots=True)
class Envelope:
    """A job's payload and what travels with it between deliveries."""

    payload: bytes
    key: str | None = None
    attempt: int = 1
    error: str | None = None
    not_before: float | None = None
    revived: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            raise ValueError(f"attempt must be a positive integer, not {self.attempt!r}")
        if self.key is not None and (not isinstance(self.key, str) or not self.key):
            raise ValueError(f"a claim key is a non-empty string, not {self.key!r}")
        if self.not_before is not None and not math.isfinite(self.not_before):
            raise ValueError(f"not_before is a finite Unix time, not {self.not_before!r}")
        if self.revived is not None and (not isinstance(self.revived, str) or not self.revived):
            raise ValueError(f"revived is a dead letter's id, not {self.revived!r}")

    @classmethod
    def open(cls, data: bytes) -> Envelope:
        """Split a tuple's bytes into payload and trailer (see the module docstring)."""
        if len(data) < _TAIL or not data.endswith(MAGIC):
            return cls(data)
        (length,) = _LENGTH.unpack_from(data, len(data) - _TAIL)
        end = len(data) - _TAIL
        if length > end:
            return cls(data)
        meta = _decode(data[end - length : end])
        if meta is None:
            return cls(data)
        return cls(data[: end - length], **meta)

    def seal(self) -> bytes:
        """The payload with its trailer, ready to write into the space."""
        fields: dict[str, Any] = {"key": self.key, "attempt": self.attempt, "error": self.error}
        if self.not_before is not None:
            fields["not_before"] = self.not_before
        if self.revived is not None:
            fields["revived"] = self.revived
        meta = msgpack.packb(fields)
        return b"".join((self.payload, meta, _LENGTH.pack(len(meta)), MAGIC))

    def failed(self, error: str) -> Envelope:
        """This delivery, marked as failed with ``error`` (what a dead letter
        keeps: its last :data:`MAX_DEAD_ERROR` bytes; a requeued one may run
        at once)."""
        return replace(self, error=_tail(error, MAX_DEAD_ERROR), not_before=None)

    def next_attempt(self, error: str, not_before: float | None = None) -> Envelope:
        """The delivery after this one failed with ``error``, to run no
        earlier than ``not_before`` (Unix time) when given."""
        return replace(
            self, attempt=self.attempt + 1, error=error[:MAX_ERROR], not_before=not_before
        )

    def due_in(self, now: float) -> float:
        """Seconds until this delivery may run (0 when it may run now)."""
        return 0.0 if self.not_before is None else max(0.0, self.not_before - now)

    def with_key(self, key: str) -> Envelope:
        return replace(self, key=key)

    def keyed(
        self, key: Callable[[bytes], str] | None, entry_id: str, written: bytes | None = None
    ) -> Envelope:
        """This delivery with its claim key: the one it carries, else the key
        it was ``written`` with (``write(..., key=...)``: text, UTF-8, any
        other byte as ``\\xNN``), else ``key(payload)`` when a key function
        is given, else ``entry_id`` (the text of the tuple's id, for a first
        delivery). Raises what ``key`` raises, or ``ValueError`` for a key
        that is not a non-empty string."""
        if self.key is not None:
            return self
        if written is not None:
            return self.with_key(written.decode(errors="backslashreplace"))
        return self.with_key(key(self.payload) if key is not None else entry_id)

    def at_attempt(self, attempt: int) -> Envelope:
        """This delivery counted as attempt ``attempt`` (deliveries whose
        workers died count too: forum.coordinator.worker)."""
        return replace(self, attempt=attempt)


def _tail(text: str, limit: int) -> str:
    """The end of ``text`` that fits in ``limit`` bytes of UTF-8 (whole characters)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[-limit:].decode(errors="ignore")


def _decode(raw: bytes) -> dict[str, Any] | None:
    try:
        meta = msgpack.unpackb(raw)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    if not isinstance(meta, dict) or set(meta) - _OPTIONAL != {"key", "attempt", "error"}:
        return None
    key, attempt, error = meta["key"], meta["attempt"], meta["error"]
    if not (key is None or (isinstance(key, str) and key)):
        return None
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        return None
    if not (error is None or isinstance(error, str)):
        return None
    fields: dict[str, Any] = {"key": key, "attempt": attempt, "error": error}
    if "not_before" in meta:
        not_before = meta["not_before"]
        if isinstance(not_before, bool) or not isinstance(not_before, int | float):
            return None
        if not math.isfinite(not_before):
            return None
        fields["not_before"] = float(not_before)
    if "revived" in meta:
        if not isinstance(meta["revived"], str) or not meta["revived"]:
            return None
        fields["revived"] = meta["revived"]
    return fields
