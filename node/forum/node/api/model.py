"""The HTTP API's documents, declared once: bodies, answers, limits, media types, headers.

Everything the handlers check and everything ``/v1/openapi.json`` says is made
from the declarations here and beside it, so the two cannot drift:

=============================  ===============================  ===========================
declared                       checked by                       described by
=============================  ===============================  ===========================
bodies (msgspec Structs),      :mod:`forum.node.http.bodies`    ``components/schemas``
here                           decodes JSON and msgpack into    (msgspec's JSON Schema of
                               them; the client its answers     the same Structs)
parameters                     :class:`forum.node.http.query.   ``parameters`` of each
(:mod:`~forum.node.api.        Query`                           operation
parameters`)
limits (:class:`Limits`)       the handlers, per node           the numbers in both
operations (:mod:`~forum.      routing, ``Accept``, bodies      ``paths``
node.api.operations`)
=============================  ===============================  ===========================

The limits are the serving node's (:class:`Limits` from its config), so a
node started with ``--max-batch 10`` refuses an 11-tuple batch and says 10
in its document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from forum.node.core.entries import MAX_PRIORITY, MIN_PRIORITY
from forum.node.core.space import MAX_WAIT as MAX_WRITE_WAIT

RAW = "application/octet-stream"
JSON = "application/json"
MSGPACK = "application/msgpack"
TEXT = "text/plain"
#: Server-Sent Events (``GET /v1/watch``, forum.node.http.watch).
EVENT_STREAM = "text/event-stream"
#: Other names programs use for msgpack; accepted on the way in and in Accept.
MSGPACK_ALIASES = frozenset({MSGPACK, "application/x-msgpack", "application/vnd.msgpack"})
#: The response header that carries a raw payload's entry id.
ENTRY_ID_HEADER = "Forum-Entry-Id"
#: The response header that carries a raw reservation's delivery count (``Reserved.deliveries``).
DELIVERIES_HEADER = "Forum-Deliveries"
#: The response headers of a raw tuple's properties, each only when set
#: (``Properties``: due and expires in ms since the epoch, the key percent-encoded).
PROPERTY_HEADERS = {
    "due": "Forum-Due",
    "expires": "Forum-Expires",
    "priority": "Forum-Priority",
    "key": "Forum-Key",
}
#: The headers an operation's answer names (``Answer.headers``), as
#: ``/v1/openapi.json`` describes them.
HEADER_SCHEMAS: dict[str, dict[str, Any]] = {
    ENTRY_ID_HEADER: {
        "description": "The tuple's entry id (raw answers).",
        "schema": {"type": "string"},
    },
    DELIVERIES_HEADER: {
        "description": "The reservation's delivery count (raw answers).",
        "schema": {"type": "integer", "minimum": 1},
    },
}

#: The longest reservation, in seconds.
MAX_LEASE = 3600.0
#: The most tuples one page of ``GET /v1/tuples`` holds.
MAX_PAGE = 1000
#: How many tuples a batch take or a page holds when ``limit`` is not given.
DEFAULT_LIMIT = 100


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds one node enforces and advertises."""

    max_payload: int
    max_batch: int
    max_batch_bytes: int
    #: A longer ``wait`` is cut to this (not refused).
    max_wait: float
    max_lease: float = MAX_LEASE
    max_page: int = MAX_PAGE
    #: The longest a write may wait for room under a limit: refused past it.
    max_write_wait: float = MAX_WRITE_WAIT


# -- bodies ------------------------------------------------------------------------


#: How a body spells a payload. The Structs of a write are generic in it:
#: ``WriteBody[str]`` is JSON's (text), ``WriteBody[bytes]`` msgpack's (bin),
#: both decoded by msgspec natively, in C (a batch of 10,000 in ~0.5 ms).
P = TypeVar("P")


class Payload(bytes):
    """A payload msgpack spells as bin or as text: the spelling of a msgpack
    body that has a text payload (rare: read again, one payload at a time),
    and of the OpenAPI schema (text; bytes too in msgpack)."""


#: A payload in standard base64 (JSON's way to send bytes that are not UTF-8).
Base64Text = Annotated[
    str,
    Meta(
        description="A payload in standard base64; never empty.",
        extra_json_schema={"minLength": 1, "contentEncoding": "base64"},
    ),
]
#: An entry id in its text form; parsed by :meth:`forum.node.core.entries.EntryId.parse`.
EntryIdText = Annotated[str, Meta(description="An entry id, origin:seq.")]


class Body(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A request body. Unknown fields are refused (a typo must not be ignored)."""

    #: Fields of which a body gives exactly one.
    one_of: ClassVar[tuple[str, ...]] = ()


#: The write options (``forum.node.core.write_options.write_properties``) as body fields.
#: Only their types are checked by the decoder; their values by
#: ``write_properties`` (one set of rules, and its words, for every way in), so
#: the bounds here are for the document only.
_OPTION_SECONDS = "Seconds (docs/scheduling.md)."
DelaySeconds = Annotated[
    float, Meta(description=f"Seconds until the tuple is due. {_OPTION_SECONDS}",
                extra_json_schema={"minimum": 0})
]  # fmt: skip
NotBefore = Annotated[
    float, Meta(description="When the tuple is due, in Unix seconds (not with delay).",
                extra_json_schema={"minimum": 0})
]  # fmt: skip
TtlSeconds = Annotated[
    float, Meta(description="Seconds the tuple lives once due, then it is gone everywhere.",
                extra_json_schema={"exclusiveMinimum": 0})
]  # fmt: skip
PriorityValue = Annotated[
    int, Meta(description="Higher is served first; 0 by default.",
              extra_json_schema={"minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY})
]  # fmt: skip
KeyB64 = Annotated[
    str, Meta(description="The key in standard base64 (JSON's way to send bytes).",
              extra_json_schema={"minLength": 1, "contentEncoding": "base64"})
]  # fmt: skip
DedupSeconds = Annotated[
    float, Meta(description="With key: a second write of the key within so many seconds "
                "answers with the first one's id.", extra_json_schema={"exclusiveMinimum": 0})
]  # fmt: skip
WriteWait = Annotated[
    float, Meta(description="Seconds to wait for room under a prefix's limit (else 429); "
                "at most the node's max_wait and 60.", extra_json_schema={"minimum": 0})
]  # fmt: skip

CopiesCount = Annotated[
    int, Meta(description="Members (this node one) that must hold the write durably before "
              "it is answered: 1 to the cluster's size; default the node's ack_copies "
              "(docs/operations.md, Copies).", extra_json_schema={"minimum": 1})
]  # fmt: skip


class WriteOptionFields(Body, frozen=True):
    """The options of a write, each absent by default (a plain write). The
    key (``key``: text, bytes too in msgpack) is a field of each body, spelt
    as its payloads are; ``key_b64`` here."""

    delay: DelaySeconds | UnsetType = UNSET
    not_before: NotBefore | UnsetType = UNSET
    ttl: TtlSeconds | UnsetType = UNSET
    priority: PriorityValue | UnsetType = UNSET
    key_b64: KeyB64 | UnsetType = UNSET
    dedup_window: DedupSeconds | UnsetType = UNSET
    wait: WriteWait | UnsetType = UNSET
    copies: CopiesCount | UnsetType = UNSET


#: The names of the write options, as the bodies spell them.
WRITE_OPTION_FIELDS = (*WriteOptionFields.__struct_fields__, "key")


class WriteBody(WriteOptionFields, Generic[P], frozen=True):
    """Exactly one of payload (text; bytes too in msgpack) or payload_b64; never
    empty; and the write's options (docs/http-api.md, "Delayed tuples" and on)."""

    one_of: ClassVar[tuple[str, ...]] = ("payload", "payload_b64")
    payload: P | UnsetType = UNSET
    payload_b64: Base64Text | UnsetType = UNSET
    key: P | UnsetType = UNSET


class BatchWriteBody(WriteOptionFields, Generic[P], frozen=True):
    """Exactly one of payloads or payloads_b64; and the options of every
    tuple of the batch (a key only with one payload; ``keys``, one per
    payload, gives each its own key, deduplicated each with
    ``dedup_window``)."""

    one_of: ClassVar[tuple[str, ...]] = ("payloads", "payloads_b64")
    payloads: list[P] | UnsetType = UNSET
    payloads_b64: list[Base64Text] | UnsetType = UNSET
    key: P | UnsetType = UNSET
    keys: list[P] | UnsetType = UNSET


class Ids(Body, frozen=True):
    """Entry ids: of a batch ack, or of a batch write's answer."""

    ids: list[EntryIdText]


class ExtendBody(Body, frozen=True):
    """The reservations to renew, and their new lease in seconds."""

    ids: list[EntryIdText]
    #: > 0 as the schema says, checked by ``check_extend_lease`` (the stream's
    #: check too, so both refuse it in the same words).
    lease: Annotated[float, Meta(extra_json_schema={"exclusiveMinimum": 0})]


class Written(msgspec.Struct, frozen=True):
    id: EntryIdText
    #: On a node with a cluster map: the map's epoch, so a client writing
    #: over the stream (whose answers have no headers) learns of a newer map
    #: from its next write (docs/scaling.md).
    map_epoch: int | UnsetType = UNSET


class TupleBody(msgspec.Struct, frozen=True):
    """One tuple. In JSON a payload that is not UTF-8 is payload_b64 instead.
    Its properties only when they are set (a plain tuple has none of them)."""

    id: EntryIdText
    payload: Annotated[Any, Meta(description="text (JSON) or bytes (msgpack)")] | UnsetType = UNSET
    payload_b64: Annotated[str, Meta(description="JSON only, when not UTF-8")] | UnsetType = UNSET
    due: (
        Annotated[int, Meta(ge=1, description="When it was due, ms since the epoch")] | UnsetType
    ) = UNSET
    expires: (
        Annotated[int, Meta(ge=1, description="When it expires, ms since the epoch")] | UnsetType
    ) = UNSET
    priority: Annotated[int, Meta(ge=MIN_PRIORITY, le=MAX_PRIORITY)] | UnsetType = UNSET
    key: Annotated[Any, Meta(description="text (JSON) or bytes (msgpack)")] | UnsetType = UNSET
    key_b64: Annotated[str, Meta(description="JSON only, when not UTF-8")] | UnsetType = UNSET


class ReservedBody(TupleBody, frozen=True, kw_only=True):
    """One reserved tuple, with its delivery count."""

    deliveries: Annotated[
        int,
        Meta(
            ge=1,
            description="1 the first time, n when n-1 earlier leases of this tuple on this "
            "node ran out",
        ),
    ]


class Tuples(msgspec.Struct, frozen=True):
    tuples: list[TupleBody]


class ReservedTuples(msgspec.Struct, frozen=True):
    tuples: list[ReservedBody]


class AckedReserved(msgspec.Struct, frozen=True):
    """A worker's settled batch and its next: one flag per id acked, then the
    tuples reserved (possibly none)."""

    acked: list[bool]
    tuples: list[ReservedBody]


class Page(msgspec.Struct, frozen=True):
    tuples: list[TupleBody]
    #: ``None`` on the last page.
    next_cursor: int | None


class Acked(msgspec.Struct, frozen=True):
    acked: bool


class AckedMany(msgspec.Struct, frozen=True):
    acked: list[bool]


class Extended(msgspec.Struct, frozen=True):
    extended: list[bool]


class Released(msgspec.Struct, frozen=True):
    released: bool


class Compacted(msgspec.Struct, frozen=True):
    """What one compaction pass did (:class:`forum.node.storage.strand.CompactionReport`)."""

    bytes_before: int
    bytes_after: int
    entries_dropped: int
    segments_rewritten: int
    segments_removed: int
    #: Per origin, the seq up to which every entry is held here or was dropped.
    floors: dict[str, int]
    seconds: float


class Count(msgspec.Struct, frozen=True):
    count: int


class Health(msgspec.Struct, frozen=True):
    status: Literal["ok"] = "ok"


class Ready(msgspec.Struct, frozen=True):
    status: Literal["ready"] = "ready"
    #: What is wrong without stopping the node (a peer refused for its clock).
    degraded: list[str] = msgspec.field(default_factory=list)


class Problem(msgspec.Struct, frozen=True):
    """A refusal; the request changed nothing. A 429 (``limit_exceeded``) also
    names the prefix (as text), its limit, and the seconds to wait. The one
    answer that is not a refusal, a 504 (``too_few_copies``), is a write that
    stands with fewer copies than it asked: its ``ids``, the ``copies`` asked
    and the ``copies_held`` (this node's among them) when it was answered."""

    error: str
    message: str
    prefix: str | UnsetType = UNSET
    limit: int | UnsetType = UNSET
    retry_after: float | UnsetType = UNSET
    ids: list[EntryIdText] | UnsetType = UNSET
    copies: int | UnsetType = UNSET
    copies_held: int | UnsetType = UNSET


class Paused(msgspec.Struct, frozen=True):
    """A prefix paused: the id of its pause marker."""

    id: EntryIdText


class Resumed(msgspec.Struct, frozen=True):
    """A prefix resumed: how many pauses of it ended here."""

    resumed: int


class PrefixBody(msgspec.Struct, frozen=True):
    """A paused or limited prefix: in JSON as text, or prefix_b64 when it is not
    UTF-8 (as a payload); held and limit for a limited prefix."""

    prefix: Annotated[Any, Meta(description="text (JSON) or bytes (msgpack)")] | UnsetType = UNSET
    prefix_b64: Annotated[str, Meta(description="JSON only, when not UTF-8")] | UnsetType = UNSET
    paused: bool = False
    held: int | None = None
    limit: int | None = None
    #: With ``separator``: the group's tuples here that are live, not due yet
    #: and reserved (absent without it).
    live: int | UnsetType = UNSET
    delayed: int | UnsetType = UNSET
    reserved: int | UnsetType = UNSET
    #: With ``separator``: how long ago this node came to hold the group's
    #: oldest live tuple (forum.node.space.arrivals); null when it has none here.
    oldest_age: (
        Annotated[
            float,
            Meta(
                ge=0,
                description="seconds since this node came to hold the group's oldest live "
                "tuple (the one live here the longest), to half a second and never more; "
                "null: none live here, or not dated cheaply",
            ),
        ]
        | UnsetType
        | None
    ) = UNSET


#: The header of every answer of a node that has a cluster map: the map's epoch.
MAP_EPOCH_HEADER = "Forum-Map-Epoch"


class GroupBody(msgspec.Struct, frozen=True):
    """One replica group of the cluster map (forum.node.cluster.map)."""

    id: str
    members: list[str]
    weight: float
    state: Literal["active", "draining", "retired"]


class ClusterMapBody(msgspec.Struct, frozen=True):
    """The cluster map this node holds, and its own group in it."""

    epoch: int
    slots: int
    groups: list[GroupBody]
    #: HMAC-SHA256 (hex) of the map's canonical JSON under the cluster secret
    #: (forum.node.cluster.map); null when the node has no cluster secret.
    signature: str | None
    #: The group this node is a member of.
    group: str


class Prefixes(msgspec.Struct, frozen=True):
    """The prefixes paused or limited here, sorted by prefix."""

    prefixes: list[PrefixBody]
