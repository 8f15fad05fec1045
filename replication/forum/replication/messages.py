"""The replication wire messages: msgpack maps, checked strictly on the way in.

Every body is one msgpack map with a format version and a kind; a map with a
missing, unknown or ill-typed key is a :class:`BadMessage`. Entries are the
arrays of :mod:`forum.node.core.codec` (the same bytes as in the Strand), inlined.

========== ================================================================
push       ``{v: 1, kind: "push", from: [origin, url], covered: [origin, ...],``
           ``entries: [entry, ...]}``  (POST .../push)
push_ack   ``{v: 1, kind: "push_ack", from, applied: int, vector}``
           the receiver's vector, for the origins of the pushed entries
pull       ``{v: 1, kind: "pull", from, vector, exclude: [origin, ...],``
           ``members: [[origin, url], ...], limit: int, max_bytes: int}``
           (POST .../pull): "here is what I hold; send what I lack"
           v2 adds ``recheck: [origin, first, last] | nil``; the asker's
           digest travels in the ``X-Forum-Digest`` header (see below)
page       ``{v: 1, kind: "page", from, vector, entries, more: bool, members}``
           ``more`` says the page was cut short by ``limit``/``max_bytes``;
           v2 adds ``dead: {origin: [first, last, first, last, ...]}`` and
           ``floors: {origin: seq}``; v3 adds ``digest: [lo, upto, block,
           count, xor, ...] | nil``
members    ``{v: 1, kind: "members", from, members}``  (GET .../members)
lend       ``{v: 1, kind: "lend", from, prefix: bin, limit: int, lease_ms: int}``
           (POST .../lend): "reserve for me up to ``limit`` of your own
           tuples under ``prefix``, for ``lease_ms``"
loan       ``{v: 1, kind: "loan", from, deliveries: [int, ...], entries}``
           the Writes reserved for the asker, each with its deliveries
lent       ``{v: 1, kind: "lent", from, released: [seq, ...], extended:``
           ``[seq, ...], lease_ms: int}`` (POST .../lent): of the receiver's
           own tuples lent to the sender, those back, and those to keep
           reserved ``lease_ms`` more; answered with a ``members`` message
========== ================================================================

``from`` names the sender: its origin and the URL it advertises (``nil`` when
it has none). ``covered`` lists the origins the sender pushes the same
entries to itself, so a receiver forwards them only to the others.
``exclude`` lists origins the asker is fetching from another peer right now.

Version 2 (compaction, docs/replication.md "Dead ranges"): a page's ``dead``
lists the seqs among those it covers that the sender dropped by compaction
(held once, dead for good), so the asker's vector passes them and any copy
of them it still holds live dies; ``floors`` are the sender's compaction
floors. A pull's ``recheck`` asks for one origin's seqs ``first..last`` again,
though the asker holds them: it was behind the sender's floor and may hold
live copies the sender dropped. A message is written in the lowest version
that carries it (v1 unless it has dead ranges or a recheck) and both are
read, so a v1 peer keeps working with a v2 one until compaction drops
something the v1 peer lacks; it then refuses the v2 page ("unsupported page
version 2") and stays behind, visibly, rather than keeping a tuple
alive that the others took.

Divergence (docs/replication.md "Divergence"): a pull may carry the
asker's digest of the *receiver's own* origin over seqs ``lo + 1 .. upto``
(:mod:`forum.replication.digest`) in the header ``X-Forum-Digest: lo,upto,count,xor``
(decimal), outside the body and its signature, as the clock stamp: a node
of the previous release ignores it and answers as before, so nodes are
upgraded one by one. The receiver, the authority for its own entries,
compares it with its own and, when they differ, answers with its per-block
digests of that range in a version 3 page's ``digest`` (``lo`` raised to
its own floor if that is higher), so the asker can recheck the blocks that
differ. A v3 page carries the v2 keys too, and is sent only in answer to a
pull with the header, so an old asker never gets one. (Unsigned: who can
alter traffic can only strip it, which stops a comparison as dropping the
request would, or make the receiver list its blocks; the healing itself
rests on the signed pages of the recheck.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import msgpack

from forum.node.core.codec import encode_entry, entry_from_fields
from forum.node.core.entries import Entry, check_origin
from forum.node.core.errors import SerializationError
from forum.replication.digest import BlockDigest, RangeDigest
from forum.replication.errors import BadMessage
from forum.replication.vector import MAX_ORIGINS, VersionVector

#: The versions read (2 for pulls, 3 for pages: ``_HIGHEST``); a message is
#: written in the lowest version that carries it.
VERSION = 3
VERSIONS = (1, 2, 3)
#: The highest version read, per kind (pages only are at 3).
_HIGHEST = {"pull": 2, "page": 3}
#: The header of a pull's digest (see the module docstring).
DIGEST_HEADER = "X-Forum-Digest"
_DIGEST_TEXT = re.compile(r"\d{1,19},\d{1,19},\d{1,19},\d{1,20}")
#: The routes, under the node's /v1/cluster/ prefix (peers only: the cluster secret).
ROUTE_PREFIX = "/v1/cluster/replication/"
PUSH_PATH = "/v1/cluster/replication/push"
PULL_PATH = "/v1/cluster/replication/pull"
MEMBERS_PATH = "/v1/cluster/replication/members"
LEND_PATH = "/v1/cluster/replication/lend"
LENT_PATH = "/v1/cluster/replication/lent"
#: The longest lease a lend may ask for (a day), and the longest prefix.
MAX_LEASE_MS = 86_400_000
MAX_PREFIX = 4_096
#: Bounds on lists in a message: far above real use, low enough to refuse garbage cheaply.
MAX_ENTRIES = 100_000
MAX_MEMBERS = 1_024
MAX_URL = 2_048
MAX_LIMIT = 100_000
#: Seq ranges ``(first, last)``, inclusive.
SeqRange = tuple[int, int]
#: The most blocks a page's digest lists (256 Ki seqs at 256 a block).
MAX_BLOCKS = 1_024
#: A page's digest: ``(lo, upto, blocks)``, see :class:`PullPage`.
PageDigest = tuple[int, int, tuple[BlockDigest, ...]]

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
    #: ``(origin, first, last)``: serve these seqs again, held or not (v2).
    recheck: tuple[str, int, int] | None = None
    #: The asker's digest of the receiver's own origin (the ``X-Forum-Digest``
    #: header, not the body: :func:`digest_header`, :func:`read_digest`).
    digest: RangeDigest | None = None


@dataclass(frozen=True, slots=True)
class PullPage:
    sender: Member
    vector: VersionVector
    entries: tuple[Entry, ...]
    more: bool
    members: tuple[Member, ...]
    #: Per origin, the seqs among those the page covers that compaction dropped (v2).
    dead: Mapping[str, tuple[SeqRange, ...]] = field(default_factory=dict)
    #: The sender's compaction floors (v2; sent with ``dead``).
    floors: Mapping[str, int] = field(default_factory=dict)
    #: The sender's blocks of its own origin over ``(lo, upto]``, when the
    #: pull's digest differed from its own (v3).
    digest: PageDigest | None = None


@dataclass(frozen=True, slots=True)
class MemberList:
    sender: Member
    members: tuple[Member, ...]


@dataclass(frozen=True, slots=True)
class LendRequest:
    sender: Member
    prefix: bytes
    limit: int
    lease_ms: int


@dataclass(frozen=True, slots=True)
class Loan:
    sender: Member
    #: The Writes lent, each with how many times it has been handed out.
    entries: tuple[Entry, ...]
    deliveries: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LentNotice:
    sender: Member
    released: tuple[int, ...]
    extended: tuple[int, ...]
    lease_ms: int


Message = Push | PushAck | PullRequest | PullPage | MemberList | LendRequest | Loan | LentNotice


# -- encoding --------------------------------------------------------------------


def encode(message: Message) -> bytes:
    """The msgpack body of ``message``."""
    fields: dict[str, Any] = {"v": 1}
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
            if message.recheck is not None:
                fields |= {"v": 2, "recheck": list(message.recheck)}
        case PullPage():
            fields |= {
                "kind": "page",
                "vector": message.vector.to_wire(),
                "more": message.more,
                "members": _members_wire(message.members),
            }
            if message.dead or message.floors or message.digest is not None:
                fields |= {
                    "v": 2,
                    "dead": {o: [s for r in rs for s in r] for o, rs in message.dead.items()},
                    "floors": dict(message.floors),
                }
            if message.digest is not None:
                lo, upto, blocks = message.digest
                flat = [value for block in blocks for value in block]
                fields |= {"v": 3, "digest": [lo, upto, *flat]}
            entries = message.entries
        case MemberList():
            fields |= {"kind": "members", "members": _members_wire(message.members)}
        case LendRequest():
            fields |= {
                "kind": "lend",
                "prefix": message.prefix,
                "limit": message.limit,
                "lease_ms": message.lease_ms,
            }
        case Loan():
            fields |= {"kind": "loan", "deliveries": list(message.deliveries)}
            entries = message.entries
        case LentNotice():
            fields |= {
                "kind": "lent",
                "released": list(message.released),
                "extended": list(message.extended),
                "lease_ms": message.lease_ms,
            }
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
    "lend": {"prefix", "limit", "lease_ms"},
    "loan": {"deliveries", "entries"},
    "lent": {"released", "extended", "lease_ms"},
}
#: What version 2 adds, per kind; and version 3.
_KEYS_V2 = {"pull": {"recheck"}, "page": {"dead", "floors"}}
_KEYS_V3 = {"page": {"digest"}}


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
        _recheck(fields.get("recheck")),
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
        _dead(fields.get("dead", {})),
        _floors(fields.get("floors", {})),
        _page_digest(fields.get("digest")),
    )


def decode_members(body: bytes) -> MemberList:
    fields = _fields(body, "members")
    return MemberList(_member(fields["from"]), _members(fields["members"]))


def decode_lend(body: bytes) -> LendRequest:
    fields = _fields(body, "lend")
    prefix = fields["prefix"]
    if not isinstance(prefix, bytes) or len(prefix) > MAX_PREFIX:
        raise BadMessage(f"prefix must be bytes, at most {MAX_PREFIX}")
    return LendRequest(
        _member(fields["from"]),
        prefix,
        _count(fields["limit"], "limit", MAX_LIMIT),
        _count(fields["lease_ms"], "lease_ms", MAX_LEASE_MS),
    )


def decode_loan(body: bytes) -> Loan:
    fields = _fields(body, "loan")
    entries = _entries(fields["entries"])
    deliveries = fields["deliveries"]
    if not isinstance(deliveries, list) or len(deliveries) != len(entries):
        raise BadMessage("deliveries is a list, one per entry")
    return Loan(
        _member(fields["from"]),
        entries,
        tuple(_count(d, "deliveries", 2**31) for d in deliveries),
    )


def decode_lent(body: bytes) -> LentNotice:
    fields = _fields(body, "lent")
    return LentNotice(
        _member(fields["from"]),
        _seqs(fields["released"], "released"),
        _seqs(fields["extended"], "extended"),
        _count(fields["lease_ms"], "lease_ms", MAX_LEASE_MS),
    )


def _seqs(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > MAX_LIMIT:
        raise BadMessage(f"{what} is a list of at most {MAX_LIMIT} seqs")
    return tuple(_count(seq, what, 2**63) for seq in value)


def _fields(body: bytes, kind: str) -> dict[str, Any]:
    try:
        fields = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise BadMessage(f"not a msgpack body: {exc}") from exc
    if not isinstance(fields, dict):
        raise BadMessage("a replication message is a msgpack map")
    version = fields.get("v")
    versions = VERSIONS[: _HIGHEST.get(kind, 1)]
    if version not in versions:
        raise BadMessage(
            f"unsupported {kind} version {version!r} (this node reads {list(versions)})"
        )
    if fields.get("kind") != kind:
        raise BadMessage(f"expected a {kind!r} message, got {fields.get('kind')!r}")
    expected = _KEYS[kind] | {"v", "kind", "from"}
    if version in (2, 3):
        expected |= _KEYS_V2.get(kind, set())
    if version == 3:
        expected |= _KEYS_V3.get(kind, set())
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


def _recheck(value: Any) -> tuple[str, int, int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 3:
        raise BadMessage("recheck is [origin, first, last] or nil")
    origin = _origin(value[0], "recheck")
    first = _count(value[1], "recheck first", 2**63)
    last = _count(value[2], "recheck last", 2**63, minimum=first)
    return origin, first, last


def digest_header(digest: RangeDigest) -> dict[str, str]:
    """The header carrying a pull's digest."""
    return {DIGEST_HEADER: f"{digest.lo},{digest.upto},{digest.count},{digest.xor}"}


def read_digest(headers: Mapping[str, str]) -> RangeDigest | None:
    """A pull's digest from its headers; ``None`` without one (an older node);
    ``BadMessage`` if it is not ``lo,upto,count,xor`` with ``lo <= upto``."""
    text = headers.get(DIGEST_HEADER)
    if text is None:
        return None
    if not _DIGEST_TEXT.fullmatch(text):
        raise BadMessage(f"{DIGEST_HEADER} must be lo,upto,count,xor in decimal, not {text[:80]!r}")
    lo, upto, count, xor = (int(part) for part in text.split(","))
    if not lo <= upto < 2**63 or count >= 2**63 or xor >= 2**64:
        raise BadMessage(f"{DIGEST_HEADER}: out of range: {text}")
    return RangeDigest(lo, upto, count, xor)


def _page_digest(value: Any) -> PageDigest | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) < 2 or len(value) % 3 != 2:
        raise BadMessage("digest is [lo, upto, block, count, xor, ...] or nil")
    if (len(value) - 2) // 3 > MAX_BLOCKS:
        raise BadMessage(f"digest holds more than {MAX_BLOCKS} blocks")
    lo = _count(value[0], "digest lo", 2**63, minimum=0)
    upto = _count(value[1], "digest upto", 2**63, minimum=lo)
    blocks: list[BlockDigest] = []
    for number, count, xor in zip(value[2::3], value[3::3], value[4::3], strict=True):
        blocks.append(
            (
                _count(number, "digest block", 2**63, minimum=0),
                _count(count, "digest count", 2**63),
                _count(xor, "digest xor", 2**64 - 1, minimum=0),
            )
        )
    return lo, upto, tuple(blocks)


def _dead(value: Any) -> dict[str, tuple[SeqRange, ...]]:
    """Per origin, sorted disjoint ranges; at most ``MAX_ENTRIES`` in all."""
    if not isinstance(value, dict) or len(value) > MAX_MEMBERS:
        raise BadMessage(f"dead is a map of at most {MAX_MEMBERS} origins")
    dead: dict[str, tuple[SeqRange, ...]] = {}
    total = 0
    for origin, flat in value.items():
        _origin(origin, "dead")
        if not isinstance(flat, list) or not flat or len(flat) % 2:
            raise BadMessage(f"dead {origin}: expected [first, last, ...]")
        total += len(flat) // 2
        if total > MAX_ENTRIES:
            raise BadMessage(f"dead holds more than {MAX_ENTRIES} ranges")
        ranges: list[SeqRange] = []
        floor = 1
        for first, last in zip(flat[::2], flat[1::2], strict=True):
            _count(first, f"dead {origin}", 2**63, minimum=floor)
            _count(last, f"dead {origin}", 2**63, minimum=first)
            ranges.append((first, last))
            floor = last + 1
        dead[origin] = tuple(ranges)
    return dead


def _floors(value: Any) -> dict[str, int]:
    if not isinstance(value, dict) or len(value) > MAX_ORIGINS:
        raise BadMessage(f"floors is a map of at most {MAX_ORIGINS} origins")
    for origin, seq in value.items():
        _origin(origin, "floors")
        _count(seq, f"floors {origin}", 2**63)
    return dict(value)


def _origin(value: Any, what: str) -> str:
    return _checked(lambda: check_origin(value), what)
