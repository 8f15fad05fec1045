"""Wire messages: round trips, and strict refusal of anything else."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from forum.node.core.entries import EntryId, Take, Write
from forum.replication.digest import RangeDigest
from forum.replication.errors import BadMessage
from forum.replication.messages import (
    LendRequest,
    LentNotice,
    Loan,
    Member,
    MemberList,
    PullPage,
    PullRequest,
    Push,
    PushAck,
    decode_lend,
    decode_lent,
    decode_loan,
    decode_members,
    decode_page,
    decode_pull,
    decode_push,
    decode_push_ack,
    digest_header,
    encode,
    read_digest,
)
from forum.replication.vector import VersionVector

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


def test_pages_and_pulls_of_compaction_are_version_2_and_round_trip() -> None:
    dead = {"a-1234": ((2, 3), (5, 5))}
    page = PullPage(ME, VECTOR, (W,), False, (ME,), dead=dead, floors={"a-1234": 9})
    body = encode(page)
    assert msgpack.unpackb(body, raw=False)["dead"] == {"a-1234": [2, 3, 5, 5]}
    assert msgpack.unpackb(body, raw=False)["v"] == 2
    assert decode_page(body) == page
    pull = PullRequest(ME, VECTOR, frozenset(), (), 10, 99, ("a-1234", 1, 9))
    assert msgpack.unpackb(encode(pull), raw=False)["v"] == 2
    assert decode_pull(encode(pull)) == pull


def test_a_version_1_page_is_read_and_one_without_dead_ranges_is_written() -> None:
    """What an older peer sends, and what is sent while nothing was dropped."""
    page = PullPage(ME, VECTOR, (W, T), True, (ME,))
    fields = msgpack.unpackb(encode(page), raw=False)
    assert fields["v"] == 1 and "dead" not in fields and "floors" not in fields
    assert decode_page(pack(fields)) == page
    pull = msgpack.unpackb(encode(PullRequest(ME, VECTOR, frozenset(), (), 10, 99)), raw=False)
    assert pull["v"] == 1 and "recheck" not in pull


def v2_page() -> dict[str, Any]:
    page = PullPage(ME, VECTOR, (W,), False, (), dead={"a-1234": ((2, 3),)}, floors={"a-1234": 3})
    return msgpack.unpackb(encode(page), raw=False)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.pop("floors"),  # v2 carries both
        lambda m: m.update(v=1),  # v1 carries neither
        lambda m: m.update(dead={"a-1234": [3, 2]}),  # last before first
        lambda m: m.update(dead={"a-1234": [2, 3, 3, 4]}),  # overlapping
        lambda m: m.update(dead={"a-1234": [0, 3]}),  # seq 0
        lambda m: m.update(dead={"a-1234": [2]}),  # half a range
        lambda m: m.update(dead={"a-1234": []}),
        lambda m: m.update(dead={"bad origin": [1, 2]}),
        lambda m: m.update(dead=[1, 2]),
        lambda m: m.update(floors={"a-1234": -1}),
        lambda m: m.update(floors={"a-1234": "3"}),
    ],
)
def test_malformed_dead_ranges_and_floors_are_refused(change: Any) -> None:
    fields = v2_page()
    change(fields)
    with pytest.raises(BadMessage):
        decode_page(pack(fields))


@pytest.mark.parametrize("recheck", [["a-1234", 3, 2], ["a-1234", 0, 2], ["a-1234", 1], "x"])
def test_a_malformed_recheck_is_refused(recheck: Any) -> None:
    pull = PullRequest(ME, VECTOR, frozenset(), (), 10, 99, ("a-1234", 1, 9))
    fields = msgpack.unpackb(encode(pull), raw=False) | {"recheck": recheck}
    with pytest.raises(BadMessage):
        decode_pull(pack(fields))


DIGEST = RangeDigest(4, 600, 590, 2**64 - 1)
BLOCKS = ((0, 252, 7), (1, 256, 2**63), (2, 82, 1))


def test_a_pulls_digest_travels_in_a_header_and_its_page_is_version_3() -> None:
    """The body of a pull with a digest is what a node of the previous
    release reads (v1); the digest is a header it ignores."""
    pull = PullRequest(ME, VECTOR, frozenset(), (), 10, 99, digest=DIGEST)
    fields = msgpack.unpackb(encode(pull), raw=False)
    assert fields["v"] == 1 and "digest" not in fields
    header = digest_header(DIGEST)
    assert header == {"X-Forum-Digest": f"4,600,590,{2**64 - 1}"}
    assert read_digest(header) == DIGEST and read_digest({}) is None
    page = PullPage(ME, VECTOR, (W,), False, (), digest=(4, 600, BLOCKS))
    fields = msgpack.unpackb(encode(page), raw=False)
    assert fields["v"] == 3 and fields["digest"][:5] == [4, 600, 0, 252, 7]
    assert fields["dead"] == {} and fields["floors"] == {}
    assert decode_page(encode(page)) == page
    empty = PullPage(ME, VECTOR, (), False, (), digest=(9, 600, ()))
    assert decode_page(encode(empty)) == empty


@pytest.mark.parametrize(
    "text", ["4,600,590", "4,3,1,1", "-1,600,1,1", f"4,600,1,{2**64}", "4,600,1,x", "", "1e3,1,1,1"]
)
def test_a_malformed_digest_header_is_refused(text: str) -> None:
    with pytest.raises(BadMessage):
        read_digest({"X-Forum-Digest": text})


@pytest.mark.parametrize(
    "digest",
    [
        [4],
        [4, 600, 0, 252],  # a block cut short
        [4, 600, 0, 0, 7],  # a block of nothing
        [4, 600, 0, 1, -1],
        [600, 4],
        [4, 600, *([0, 1, 1] * 1_025)],  # more blocks than MAX_BLOCKS
    ],
)
def test_a_malformed_page_digest_is_refused(digest: Any) -> None:
    page = PullPage(ME, VECTOR, (), False, (), digest=(4, 600, BLOCKS))
    fields = msgpack.unpackb(encode(page), raw=False) | {"digest": digest}
    with pytest.raises(BadMessage):
        decode_page(pack(fields))


def test_a_pull_is_never_version_3_and_a_version_3_page_needs_its_digest() -> None:
    pull = msgpack.unpackb(encode(PullRequest(ME, VECTOR, frozenset(), (), 10, 99)), raw=False)
    with pytest.raises(BadMessage, match="unsupported pull version 3"):
        decode_pull(pack(pull | {"v": 3}))
    page = msgpack.unpackb(
        encode(PullPage(ME, VECTOR, (), False, (), digest=(4, 9, ()))), raw=False
    )
    del page["digest"]
    with pytest.raises(BadMessage, match="missing keys"):
        decode_page(pack(page))


def test_lending_messages_round_trip() -> None:
    lend = LendRequest(ME, b"job-\x00", 8, 30_000)
    assert decode_lend(encode(lend)) == lend
    loan = Loan(ME, (W,), (2,))
    assert decode_loan(encode(loan)) == loan
    lent = LentNotice(ME, (1, 2), (3,), 5_000)
    assert decode_lent(encode(lent)) == lent


@pytest.mark.parametrize(
    "change",
    [
        {"prefix": "job-"},  # text, not bytes
        {"prefix": b"x" * 5_000},
        {"limit": 0},
        {"limit": True},
        {"lease_ms": 0},
        {"lease_ms": 86_400_001},
        {"sneaky": 1},
    ],
)
def test_malformed_lend_requests_are_refused(change: dict[str, Any]) -> None:
    fields = msgpack.unpackb(encode(LendRequest(ME, b"job-", 8, 30_000)), raw=False)
    with pytest.raises(BadMessage):
        decode_lend(pack(fields | change))


@pytest.mark.parametrize(
    "change",
    [{"deliveries": []}, {"deliveries": [0]}, {"deliveries": "1"}, {"entries": [[9]]}],
)
def test_malformed_loans_are_refused(change: dict[str, Any]) -> None:
    fields = msgpack.unpackb(encode(Loan(ME, (W,), (1,))), raw=False)
    with pytest.raises(BadMessage):
        decode_loan(pack(fields | change))


@pytest.mark.parametrize(
    "change", [{"released": [0]}, {"extended": "1"}, {"lease_ms": -1}, {"released": None}]
)
def test_malformed_lent_notices_are_refused(change: dict[str, Any]) -> None:
    fields = msgpack.unpackb(encode(LentNotice(ME, (1,), (2,), 1_000)), raw=False)
    with pytest.raises(BadMessage):
        decode_lent(pack(fields | change))
