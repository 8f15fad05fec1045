"""Entries to bytes and back (msgpack), with a format version.

One entry is a msgpack array whose first element is the codec version:

==========  ===============================================================
version 1   ``[1, 0, origin: str, seq: int, payload: bin]``   a Write
            ``[1, 1, origin, seq, target_origin: str, target_seq: int]``  a Take
==========  ===============================================================

The same encoding is used in the Strand and on the wire between peers, so a
record read from disk can be forwarded without re-encoding.
"""

from __future__ import annotations

from typing import Any

import msgpack

from node.entries import Entry, EntryId, Take, Write
from node.errors import SerializationError

CODEC_VERSION = 1
_WRITE = 0
_TAKE = 1


def encode_entry(entry: Entry) -> bytes:
    """Encode one entry; ``SerializationError`` if it cannot be."""
    try:
        if isinstance(entry, Write):
            return _pack([CODEC_VERSION, _WRITE, entry.id.origin, entry.id.seq, entry.payload])
        if isinstance(entry, Take):
            return _pack(
                [
                    CODEC_VERSION,
                    _TAKE,
                    entry.id.origin,
                    entry.id.seq,
                    entry.target.origin,
                    entry.target.seq,
                ]
            )
    except (TypeError, ValueError, OverflowError) as exc:
        raise SerializationError(f"cannot encode {entry!r}: {exc}") from exc
    raise SerializationError(f"not an entry: {entry!r}")


def _pack(fields: list[Any]) -> bytes:
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


def decode_entry(data: bytes | memoryview) -> Entry:
    """Decode one entry; ``SerializationError`` for anything that is not one."""
    try:
        fields = msgpack.unpackb(data, raw=False, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise SerializationError(f"not msgpack: {exc}") from exc
    return entry_from_fields(fields)


def entry_from_fields(fields: Any) -> Entry:
    """Build an entry from an already unpacked msgpack array (validated)."""
    if not isinstance(fields, list) or len(fields) < 2:
        raise SerializationError("an entry is a msgpack array [version, kind, ...]")
    if fields[0] != CODEC_VERSION:
        raise SerializationError(f"unknown entry format version {fields[0]!r}")
    try:
        if fields[1] == _WRITE and len(fields) == 5:
            _, _, origin, seq, payload = fields
            if not isinstance(payload, bytes):
                raise SerializationError("a Write's payload must be bytes")
            return Write(_entry_id(origin, seq), payload)
        if fields[1] == _TAKE and len(fields) == 6:
            _, _, origin, seq, t_origin, t_seq = fields
            return Take(_entry_id(origin, seq), _entry_id(t_origin, t_seq))
    except ValueError as exc:
        raise SerializationError(f"invalid entry: {exc}") from exc
    raise SerializationError(f"unknown entry kind or length: kind={fields[1]!r}")


def _entry_id(origin: Any, seq: Any) -> EntryId:
    if not isinstance(origin, str) or not isinstance(seq, int):
        raise SerializationError("an entry id is (origin: str, seq: int)")
    return EntryId(origin, seq)
