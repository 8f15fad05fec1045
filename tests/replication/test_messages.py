"""Wire messages: round trips, and strict refusal of anything else."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from node import EntryId, Take, Write
from replication.errors import BadMessage
from replication.messages import (
    Member,
    MemberList,
    PullPage,
    PullRequest,
    Push,
    PushAck,
    decode_members,
    decode_page,
    decode_pull,
    decode_push,
    decode_push_ack,
    encode,
)
from replication.vector import VersionVector

ME = Member("a-1234", "http://127.0.0.1:7070")
W = Write(EntryId("a-1234", 1), b"job-\x00\xff")
T = Take(EntryId("b-9", 4), W.id)
VECTOR = VersionVector({"a-1234": 1, "b-9": 3}, {"b-9": ((5, 7),)})


def test_round_trips() -> None:
    push = Push(ME, frozenset({"b-9", "c-1"}), (W, T))
    assert decode_push(encode(push)) == push
    ack = PushAck(Member("b-9", None), 2, VECTOR)
    assert decode_push_ack(encode(ack)) == ack
    pull = PullRequest(ME, VECTOR, frozenset({"c-1"}), (ME, Member("b-9", "https://b:1")), 10, 99)
    assert decode_pull(encode(pull)) == pull
    page = PullPage(ME, VECTOR, (T, W), True, (ME,))
    assert decode_page(encode(page)) == page
    members = MemberList(ME, (ME,))
    assert decode_members(encode(members)) == members


def test_entries_are_inlined_as_codec_arrays() -> None:
    body = msgpack.unpackb(encode(Push(ME, frozenset(), (W,))), raw=False)
    assert body["entries"] == [[1, 0, "a-1234", 1, W.payload]]


def good_push() -> dict[str, Any]:
    return msgpack.unpackb(encode(Push(ME, frozenset(), (W, T))), raw=False)


def pack(fields: Any) -> bytes:
    return msgpack.packb(fields, use_bin_type=True)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.update(v=2),
        lambda m: m.update(kind="pull"),
        lambda m: m.update(extra=1),
        lambda m: m.pop("covered"),
        lambda m: m.update({"from": ["a-1234"]}),
        lambda m: m.update({"from": ["bad origin", None]}),
        lambda m: m.update({"from": ["a-1234", "ftp://x"]}),
        lambda m: m.update(covered="b-9"),
        lambda m: m.update(entries={}),
        lambda m: m.update(entries=[[1, 0, "a-1234", 0, b"x"]]),  # seq 0
        lambda m: m.update(entries=[[1, 0, "a-1234", 1, "text"]]),  # payload not bytes
        lambda m: m.update(entries=[[2, 0, "a-1234", 1, b"x"]]),  # unknown codec version
        lambda m: m.update(entries=[[1, 1, "a-1234", 1, "b", 1, 9]]),  # a Take too long
        lambda m: m.update(entries=[b"\x93\x01\x00"]),  # bytes, not an array
    ],
)
def test_malformed_pushes_are_refused(change: Any) -> None:
    fields = good_push()
    change(fields)
    with pytest.raises(BadMessage):
        decode_push(pack(fields))


@pytest.mark.parametrize(
    "body",
    [b"", b"\xc1", b"\x93\x01\x02\x03", pack([1, 2]), pack({1: 2}), pack({"v": 1}) + b"\x00"],
)
def test_non_messages_are_refused(body: bytes) -> None:
    with pytest.raises(BadMessage):
        decode_push(body)


def test_pull_limits_are_checked() -> None:
    pull = msgpack.unpackb(encode(PullRequest(ME, VECTOR, frozenset(), (), 10, 10)), raw=False)
    for limit in (0, -1, True, 10**9, "10"):
        with pytest.raises(BadMessage):
            decode_pull(pack(pull | {"limit": limit}))
