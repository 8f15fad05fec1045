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

from collections.abc import Sequence
from typing import Any

import msgpack

from node.entries import Entry, EntryId, Take, Write, check_origin
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


class EntryEncoder:
    """Encodes entries as :func:`encode_entry` does, with one packer kept for
    every call (making a msgpack packer costs more than packing an entry).
    One per thread: a packer is not shared."""

    __slots__ = ("_pack",)

    def __init__(self) -> None:
        self._pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack

    def encode(self, entries: Sequence[Entry]) -> list[bytes]:
        """``SerializationError`` if one cannot be encoded."""
        pack = self._pack
        out = []
        try:
            for entry in entries:
                if type(entry) is Write:
                    eid = entry.id
                    out.append(pack([CODEC_VERSION, _WRITE, eid.origin, eid.seq, entry.payload]))
                elif type(entry) is Take:
                    eid, target = entry.id, entry.target
                    fields = [CODEC_VERSION, _TAKE, eid.origin, eid.seq, target.origin, target.seq]
                    out.append(pack(fields))
                else:
                    out.append(encode_entry(entry))
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(f"cannot encode {entry!r}: {exc}") from exc
        return out


def _pack(fields: list[Any]) -> bytes:
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


#: An entry as plain values, checked but not yet made into objects: a Write
#: is ``(origin, seq, payload)``, a Take ``(origin, seq, target_origin,
#: target_seq)``. Replay works on these: a million EntryId objects for entries
#: that are dead by the end of the log would be wasted.
RawEntry = tuple[str, int, bytes] | tuple[str, int, str, int]


def decode_entry(data: bytes | memoryview) -> Entry:
    """Decode one entry; ``SerializationError`` for anything that is not one."""
    return entry_from_raw(decode_raw(data))


def decode_raw(data: bytes | memoryview) -> RawEntry:
    """Decode and check one entry, as plain values."""
    try:
        fields = msgpack.unpackb(data, raw=False, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise SerializationError(f"not msgpack: {exc}") from exc
    return raw_from_fields(fields)


def entry_from_fields(fields: Any) -> Entry:
    """Build an entry from an already unpacked msgpack array (checked)."""
    return entry_from_raw(raw_from_fields(fields))


def entry_from_raw(raw: RawEntry) -> Entry:
    if len(raw) == 3:
        return Write(EntryId(raw[0], raw[1]), raw[2])
    return Take(EntryId(raw[0], raw[1]), EntryId(raw[2], raw[3]))


def raw_from_fields(fields: Any) -> RawEntry:
    """Check an unpacked msgpack array and return it as a :data:`RawEntry`."""
    if not isinstance(fields, list) or len(fields) < 4:
        raise SerializationError("an entry is a msgpack array [version, kind, origin, seq, ...]")
    version, kind, origin, seq = fields[:4]
    if version != CODEC_VERSION:
        raise SerializationError(f"unknown entry format version {version!r}")
    _check_id(origin, seq)
    if kind == _WRITE and len(fields) == 5:
        payload = fields[4]
        if not isinstance(payload, bytes):
            raise SerializationError("a Write's payload must be bytes")
        return (origin, seq, payload)
    if kind == _TAKE and len(fields) == 6:
        target_origin, target_seq = fields[4], fields[5]
        _check_id(target_origin, target_seq)
        return (origin, seq, target_origin, target_seq)
    raise SerializationError(f"unknown entry kind or length: kind={kind!r}")


def _check_id(origin: Any, seq: Any) -> None:
    if type(seq) is not int or seq < 1:
        raise SerializationError(f"an entry's seq is a positive integer, not {seq!r}")
    try:
        check_origin(origin)
    except ValueError as exc:
        raise SerializationError(f"invalid entry: {exc}") from exc
