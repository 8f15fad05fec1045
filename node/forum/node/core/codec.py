"""Entries to bytes and back (msgpack), with a format version.

One entry is a msgpack array whose first element is the codec version:

==========  ===============================================================
version 1   ``[1, 0, origin: str, seq: int, payload: bin]``   a Write
            ``[1, 1, origin, seq, target_origin: str, target_seq: int]``  a Take
            ``[1, 2, origin, seq, payload: bin, properties: map]``  a Write
            with properties (:class:`~forum.node.core.entries.Properties`)
==========  ===============================================================

The properties map holds only the properties that differ from a plain
write's, under one-letter keys; a reader refuses a key it does not know
(a node that ignored one would apply the tuple wrongly):

=====  ==========================  =============================================
key    value                       property
=====  ==========================  =============================================
``d``  int > 0                     ``due``, ms since the Unix epoch
``x``  int > 0                     ``expires``, ms since the Unix epoch
``p``  int, -128 .. 127, not 0     ``priority``
``k``  bin, 1 .. 1024 bytes        ``key``
``w``  int > 0                     ``dedup_until``, ms since the Unix epoch
``c``  true                        ``pause`` (a pause marker; see entries)
=====  ==========================  =============================================

A plain Write is always written as kind 0, so a log of plain writes reads
the same as before properties existed.

The same encoding is used in the Strand and on the wire between peers, so a
record read from disk can be forwarded without re-encoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import msgpack
import msgspec

from forum.node.core.entries import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    PLAIN,
    Entry,
    EntryId,
    Properties,
    Take,
    Write,
    check_origin,
)
from forum.node.core.errors import SerializationError

CODEC_VERSION = 1
_WRITE = 0
_TAKE = 1
_WRITE_WITH = 2
#: The longest dedup key.
MAX_KEY_BYTES = 1024


def encode_entry(entry: Entry) -> bytes:
    """Encode one entry; ``SerializationError`` if it cannot be."""
    try:
        if isinstance(entry, Write):
            eid = entry.id
            if entry.props is PLAIN or entry.props == PLAIN:
                return _pack([CODEC_VERSION, _WRITE, eid.origin, eid.seq, entry.payload])
            props = encode_props(entry.props)
            return _pack([CODEC_VERSION, _WRITE_WITH, eid.origin, eid.seq, entry.payload, props])
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
    """Encodes entries as :func:`encode_entry` does, the same bytes, with
    msgspec's msgpack encoder, kept for every call (one per thread).

    msgspec writes each value in msgpack's shortest form, as msgpack does
    (``tests/node/test_codec.py`` holds them to each other at every length
    and size boundary), in about half the time. A Write with properties
    gives its properties map as :class:`msgspec.Raw`, packed once per
    Properties object rather than per Write (the writes of a burst share
    one; ``write_properties``) and copied in as it is."""

    __slots__ = ("_encode", "_props", "_raw_props")

    def __init__(self) -> None:
        self._encode = msgspec.msgpack.Encoder(enc_hook=_base_value).encode
        self._props = PLAIN  # the properties packed last, and their packed map
        self._raw_props = msgspec.Raw(b"")

    def encode(self, entries: Sequence[Entry]) -> list[bytes]:
        """``SerializationError`` if one cannot be encoded."""
        encode = self._encode
        out = []
        try:
            for entry in entries:
                if type(entry) is Write:
                    eid, props = entry.id, entry.props
                    if props is PLAIN:
                        out.append(
                            encode([CODEC_VERSION, _WRITE, eid.origin, eid.seq, entry.payload])
                        )
                    else:
                        if props is not self._props:
                            self._raw_props = msgspec.Raw(_pack(encode_props(props)))
                            self._props = props
                        raw = self._raw_props
                        six = [CODEC_VERSION, _WRITE_WITH, eid.origin, eid.seq, entry.payload, raw]
                        out.append(encode(six))
                elif type(entry) is Take:
                    eid, target = entry.id, entry.target
                    fields = [CODEC_VERSION, _TAKE, eid.origin, eid.seq, target.origin, target.seq]
                    out.append(encode(fields))
                else:
                    out.append(encode_entry(entry))
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(f"cannot encode {entry!r}: {exc}") from exc
        return out


def _base_value(value: object) -> object:
    """A subclass of bytes, str or int as its base type's value (msgspec
    encodes the base types alone; msgpack takes their subclasses)."""
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    raise NotImplementedError


def encode_props(props: Properties) -> dict[str, Any]:
    """The properties map of a Write: only what differs from a plain write."""
    fields: dict[str, Any] = {}
    if props.due:
        fields["d"] = props.due
    if props.expires:
        fields["x"] = props.expires
    if props.priority:
        fields["p"] = props.priority
    if props.key is not None:
        fields["k"] = props.key
    if props.dedup_until:
        fields["w"] = props.dedup_until
    if props.pause:
        fields["c"] = True
    return fields


def decode_props(fields: Any) -> Properties:
    """Properties from a checked map; ``SerializationError`` for anything else."""
    if not isinstance(fields, dict) or not fields:
        raise SerializationError("a Write's properties are a non-empty map")
    unknown = set(fields) - _PROPERTY_KEYS
    if unknown:
        raise SerializationError(f"unknown Write properties: {sorted(map(str, unknown))}")
    due, expires, dedup_until = (fields.get(k, 0) for k in "dxw")
    for name, value in (("due", due), ("expires", expires), ("dedup_until", dedup_until)):
        if type(value) is not int or value < 0:
            raise SerializationError(f"a Write's {name} is ms since the epoch, not {value!r}")
    priority = fields.get("p", 0)
    if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise SerializationError(f"a Write's priority is an int in -128..127, not {priority!r}")
    key = fields.get("k")
    if key is not None and (type(key) is not bytes or not 0 < len(key) <= MAX_KEY_BYTES):
        raise SerializationError(f"a Write's key is 1 to {MAX_KEY_BYTES} bytes")
    pause = fields.get("c", False)
    if pause is not True and pause is not False:
        raise SerializationError("a Write's pause flag is true or absent")
    props = Properties(due, expires, priority, key, dedup_until, pause)
    return PLAIN if props == PLAIN else props


_PROPERTY_KEYS = frozenset("dxpkwc")


def _pack(fields: list[Any] | dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


#: An entry as plain values, checked but not yet made into objects: a Write
#: is ``(origin, seq, payload)``, or ``(origin, seq, payload, properties)``
#: when it has properties; a Take ``(origin, seq, target_origin,
#: target_seq)`` (tell the two apart by :func:`is_write`). Replay works on
#: these: a million EntryId objects for entries that are dead by the end of
#: the log would be wasted.
WriteRaw = tuple[str, int, bytes] | tuple[str, int, bytes, Properties]
TakeRaw = tuple[str, int, str, int]
RawEntry = WriteRaw | TakeRaw


def is_write(raw: RawEntry) -> bool:
    """Whether ``raw`` is a Write (else a Take)."""
    return len(raw) == 3 or type(raw[2]) is bytes


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
    if type(raw[2]) is bytes:
        return Write(EntryId(raw[0], raw[1]), raw[2], raw[3])
    take = cast(TakeRaw, raw)
    return Take(EntryId(take[0], take[1]), EntryId(take[2], take[3]))


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
    if kind == _WRITE_WITH and len(fields) == 6:
        payload = fields[4]
        if not isinstance(payload, bytes):
            raise SerializationError("a Write's payload must be bytes")
        props = decode_props(fields[5])
        return (origin, seq, payload) if props is PLAIN else (origin, seq, payload, props)
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
