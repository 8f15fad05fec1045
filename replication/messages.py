"""The replication wire messages: msgpack maps, checked strictly on the way in.

Every body is one msgpack map with a format version and a kind; a map with a
missing, unknown or ill-typed key is a :class:`BadMessage`. Entries are the
arrays of :mod:`node.codec` (the same bytes as in the Strand), inlined.

========== ================================================================
push       ``{v: 1, kind: "push", from: [origin, url], covered: [origin, ...],``
           ``entries: [entry, ...]}``  (POST .../push)
push_ack   ``{v: 1, kind: "push_ack", from, applied: int, vector}``
           the receiver's vector, for the origins of the pushed entries
pull       ``{v: 1, kind: "pull", from, vector, exclude: [origin, ...],``
           ``members: [[origin, url], ...], limit: int, max_bytes: int}``
           (POST .../pull): "here is what I hold; send what I lack"
page       ``{v: 1, kind: "page", from, vector, entries, more: bool, members}``
           ``more`` says the page was cut short by ``limit``/``max_bytes``
members    ``{v: 1, kind: "members", from, members}``  (GET .../members)
========== ================================================================

``from`` names the sender: its origin and the URL it advertises (``nil`` when
it has none). ``covered`` lists the origins the sender pushes the same
entries to itself, so a receiver forwards them only to the others.
``exclude`` lists origins the asker is fetching from another peer right now.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import msgpack

from node.codec import encode_entry, entry_from_fields
from node.entries import Entry, check_origin
from node.errors import SerializationError
from replication.errors import BadMessage
from replication.vector import VersionVector

VERSION = 1
#: The routes, under the node's /v1/cluster/ prefix (peers only: the cluster secret).
ROUTE_PREFIX = "/v1/cluster/replication/"
PUSH_PATH = "/v1/cluster/replication/push"
PULL_PATH = "/v1/cluster/replication/pull"
MEMBERS_PATH = "/v1/cluster/replication/members"
#: Bounds on lists in a message: far above real use, low enough to refuse garbage cheaply.
MAX_ENTRIES = 100_000
MAX_MEMBERS = 1_024
MAX_URL = 2_048
MAX_LIMIT = 100_000

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Member:
    """A node as others should know it: its origin and the URL it advertises."""

    origin: str
    url: str | None

    def __post_init__(self) -> None:
        check_origin(self.origin)
        if self.url is not None:
            check_url(self.url)


def check_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host, else ``ValueError``."""
    if not isinstance(url, str) or len(url) > MAX_URL:
        raise ValueError(f"a peer URL is a string of at most {MAX_URL} characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    return url


@dataclass(frozen=True, slots=True)
class Push:
    sender: Member
    covered: frozenset[str]
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class PushAck:
    sender: Member
    applied: int
    vector: VersionVector


@dataclass(frozen=True, slots=True)
class PullRequest:
    sender: Member
    vector: VersionVector
    exclude: frozenset[str]
    members: tuple[Member, ...]
    limit: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class PullPage:
    sender: Member
    vector: VersionVector
    entries: tuple[Entry, ...]
    more: bool
    members: tuple[Member, ...]


@dataclass(frozen=True, slots=True)
class MemberList:
    sender: Member
    members: tuple[Member, ...]


Message = Push | PushAck | PullRequest | PullPage | MemberList


# -- encoding --------------------------------------------------------------------


def encode(message: Message) -> bytes:
    """The msgpack body of ``message``."""
    fields: dict[str, Any] = {"v": VERSION}
    entries: Sequence[Entry] | None = None
    match message:
        case Push():
            fields |= {"kind": "push", "covered": sorted(message.covered)}
            entries = message.entries
        case PushAck():
            fields |= {"kind": "push_ack", "applied": message.applied}
            fields["vector"] = message.vector.to_wire()
        case PullRequest():
            fields |= {
                "kind": "pull",
                "vector": message.vector.to_wire(),
                "exclude": sorted(message.exclude),
                "members": _members_wire(message.members),
                "limit": message.limit,
                "max_bytes": message.max_bytes,
            }
        case PullPage():
            fields |= {
                "kind": "page",
                "vector": message.vector.to_wire(),
                "more": message.more,
                "members": _members_wire(message.members),
            }
            entries = message.entries
        case MemberList():
            fields |= {"kind": "members", "members": _members_wire(message.members)}
    fields["from"] = [message.sender.origin, message.sender.url]
    return pack(fields, [encode_entry(e) for e in entries] if entries is not None else None)


def pack(fields: dict[str, Any], entries: Sequence[bytes] | None) -> bytes:
    """A msgpack map of ``fields``, plus ``entries`` (already encoded) inlined as an array."""
    packer = msgpack.Packer(use_bin_type=True)
    parts = [packer.pack_map_header(len(fields) + (entries is not None))]
    for key, value in fields.items():
        parts += (packer.pack(key), packer.pack(value))
    if entries is not None:
        parts += (packer.pack("entries"), packer.pack_array_header(len(entries)), *entries)
    return b"".join(parts)


def _members_wire(members: Sequence[Member]) -> list[list[str | None]]:
    return [[m.origin, m.url] for m in members]


# -- decoding --------------------------------------------------------------------

_KEYS = {
    "push": {"covered", "entries"},
    "push_ack": {"applied", "vector"},
    "pull": {"vector", "exclude", "members", "limit", "max_bytes"},
    "page": {"vector", "entries", "more", "members"},
    "members": {"members"},
}


def decode_push(body: bytes) -> Push:
    fields = _fields(body, "push")
    return Push(
        _member(fields["from"]),
        _origins(fields["covered"], "covered"),
        _entries(fields["entries"]),
    )


def decode_push_ack(body: bytes) -> PushAck:
    fields = _fields(body, "push_ack")
    return PushAck(
        _member(fields["from"]),
        _count(fields["applied"], "applied", MAX_ENTRIES, minimum=0),
        _vector(fields["vector"]),
    )


def decode_pull(body: bytes) -> PullRequest:
    fields = _fields(body, "pull")
    return PullRequest(
        _member(fields["from"]),
        _vector(fields["vector"]),
        _origins(fields["exclude"], "exclude"),
        _members(fields["members"]),
        _count(fields["limit"], "limit", MAX_LIMIT),
        _count(fields["max_bytes"], "max_bytes", 2**40),
    )


def decode_page(body: bytes) -> PullPage:
    fields = _fields(body, "page")
    more = fields["more"]
    if not isinstance(more, bool):
        raise BadMessage("more must be a boolean")
    return PullPage(
        _member(fields["from"]),
        _vector(fields["vector"]),
        _entries(fields["entries"]),
        more,
        _members(fields["members"]),
    )


def decode_members(body: bytes) -> MemberList:
    fields = _fields(body, "members")
    return MemberList(_member(fields["from"]), _members(fields["members"]))


def _fields(body: bytes, kind: str) -> dict[str, Any]:
    try:
        fields = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise BadMessage(f"not a msgpack body: {exc}") from exc
    if not isinstance(fields, dict):
        raise BadMessage("a replication message is a msgpack map")
    if fields.get("v") != VERSION:
        raise BadMessage(f"unsupported message version {fields.get('v')!r} (this node: {VERSION})")
    if fields.get("kind") != kind:
        raise BadMessage(f"expected a {kind!r} message, got {fields.get('kind')!r}")
    expected = _KEYS[kind] | {"v", "kind", "from"}
    if fields.keys() != expected:
        extra = sorted(map(str, fields.keys() - expected))
        missing = sorted(expected - fields.keys())
        raise BadMessage(f"{kind}: unknown keys {extra}, missing keys {missing}")
    return fields


def _checked(build: Callable[[], T], what: str) -> T:
    try:
        return build()
    except (ValueError, TypeError) as exc:
        raise BadMessage(f"{what}: {exc}") from exc


def _member(value: Any) -> Member:
    if not isinstance(value, list) or len(value) != 2:
        raise BadMessage("a member is [origin, url]")
    return _checked(lambda: Member(value[0], value[1]), "member")


def _members(value: Any) -> tuple[Member, ...]:
    if not isinstance(value, list) or len(value) > MAX_MEMBERS:
        raise BadMessage(f"members is a list of at most {MAX_MEMBERS}")
    return tuple(_member(m) for m in value)


def _origins(value: Any, what: str) -> frozenset[str]:
    if not isinstance(value, list) or len(value) > MAX_MEMBERS:
        raise BadMessage(f"{what} is a list of at most {MAX_MEMBERS} origins")
    return frozenset(_checked(lambda: [check_origin(o) for o in value], what))


def _vector(value: Any) -> VersionVector:
    return _checked(lambda: VersionVector.from_wire(value), "vector")


def _count(value: Any, what: str, maximum: int, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise BadMessage(f"{what} must be an integer in [{minimum}, {maximum}]")
    return value


def _entries(value: Any) -> tuple[Entry, ...]:
    if not isinstance(value, list) or len(value) > MAX_ENTRIES:
        raise BadMessage(f"entries is a list of at most {MAX_ENTRIES}")
    try:
        return tuple(entry_from_fields(fields) for fields in value)
    except SerializationError as exc:
        raise BadMessage(f"bad entry: {exc}") from exc
