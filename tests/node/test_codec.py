"""The entry codec's bytes (node/forum/node/core/codec.py, docs/wire.md): the kept encoder
writes exactly the documented msgpack arrays, whether Writes share their
Properties object or not, and they decode back to the same entries."""

from __future__ import annotations

import msgpack

from forum.node.core.codec import EntryEncoder, decode_entry, encode_entry
from forum.node.core.entries import PLAIN, Entry, EntryId, Properties, Take, Write

ORIGIN = "node-a.1"


def documented(entry: Entry) -> bytes:
    """The array docs/wire.md gives for ``entry``, packed as msgpack."""
    eid = entry.id
    if isinstance(entry, Take):
        fields: list[object] = [1, 1, eid.origin, eid.seq, entry.target.origin, entry.target.seq]
    elif entry.props == PLAIN:
        fields = [1, 0, eid.origin, eid.seq, entry.payload]
    else:
        p = entry.props
        names = (("d", p.due), ("x", p.expires), ("p", p.priority), ("k", p.key),
                 ("w", p.dedup_until), ("c", p.pause or None))  # fmt: skip
        props = {name: value for name, value in names if value not in (0, None)}
        fields = [1, 2, eid.origin, eid.seq, entry.payload, props]
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


def test_the_kept_encoder_writes_the_documented_bytes() -> None:
    shared = Properties(expires=1_800_000_003_600, priority=3)
    entries: list[Entry] = [
        *(Write(EntryId(ORIGIN, seq), b"job/%d" % seq, shared) for seq in (1, 2, 3)),
        Write(EntryId(ORIGIN, 4), b"job/4"),
        Write(EntryId(ORIGIN, 5), b"job/5", Properties(1_800_000_000_500, 0, -2, b"k\x00", 7)),
        Take(EntryId(ORIGIN, 6), EntryId("node-b.2", 9)),
        Write(EntryId(ORIGIN, 7), b"job/7", shared),  # the same object again, after others
        Write(EntryId(ORIGIN, 8), b"job/8", Properties(*shared)),  # equal, not the same
        Write(EntryId(ORIGIN, 9), b"paused/", Properties(pause=True)),
        Write(EntryId(ORIGIN, 10), b"x" * 300, shared),  # a longer payload (bin 16)
    ]
    encoder = EntryEncoder()
    for _ in range(2):  # a second call starts with the properties packed last
        encoded = encoder.encode(entries)
        assert encoded == [documented(entry) for entry in entries]
        assert encoded == [encode_entry(entry) for entry in entries]
        assert [decode_entry(body) for body in encoded] == entries


class _Bytes(bytes):
    pass


class _Int(int):
    pass


def test_the_kept_encoder_packs_each_value_as_msgpack_does_at_every_boundary() -> None:
    """The kept encoder is msgspec's, the documented bytes msgpack's: every
    form each field can take (fixint to uint 64, fixstr to str 16, bin 8 to
    bin 32, a priority from -128 up), and subclasses of the value types
    (msgpack takes them as their base type), come out the same."""
    seqs = [1, 127, 128, 255, 256, 2**16 - 1, 2**16, 2**32 - 1, 2**32, 2**63, 2**64 - 1]
    origins = ["a", "o" * 31, "o" * 32, "o" * 128]
    payloads = [b"", b"x" * 31, b"x" * 255, b"x" * 256, b"x" * (2**16 - 1), b"x" * 2**16]
    props = [
        PLAIN,
        *(Properties(expires=1_800_000_000_000, priority=p) for p in (-128, -33, -32, -1, 1, 127)),
    ]
    entries: list[Entry] = [
        Write(EntryId(origin, seq), payload, p)
        for origin in origins
        for seq in seqs
        for payload in payloads[:2]
        for p in props[:2]
    ]
    entries += [Write(EntryId(ORIGIN, 9), payload, p) for payload in payloads for p in props]
    entries += [
        Take(EntryId(origin, seq), EntryId(ORIGIN, seq)) for origin in origins for seq in seqs
    ]
    entries += [
        Write(EntryId(ORIGIN, _Int(300)), _Bytes(b"job/sub"), props[1]),
        Take(EntryId(ORIGIN, 3), EntryId(ORIGIN, _Int(70_000))),
    ]
    assert EntryEncoder().encode(entries) == [documented(entry) for entry in entries]
