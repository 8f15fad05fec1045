"""The HTTP API, declared once: bodies, query parameters, limits, headers and operations.

Everything the handlers check and everything ``/v1/openapi.json`` says is made
from the declarations here, so the two cannot drift:

=============  ==============================  ==================================
declared       checked by                      described by
=============  ==============================  ==================================
bodies         :mod:`forum.node.http.bodies` decodes  ``components/schemas`` (msgspec's
(msgspec       JSON and msgpack into them      JSON Schema of the same Structs)
Structs)
parameters     :class:`forum.node.http.query.Query`   ``parameters`` of each operation
limits         the handlers, per node          the numbers in both, per node
operations     routing, ``Accept``, bodies     ``paths``
=============  ==============================  ==================================

The limits are the serving node's (:class:`Limits` from its config), so a
node started with ``--max-batch 10`` refuses an 11-tuple batch and says 10
in its document.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from forum.node.api.status import NodeStatus
from forum.node.core.codec import MAX_KEY_BYTES
from forum.node.core.entries import MAX_PRIORITY, MIN_PRIORITY
from forum.node.core.space import MAX_WAIT as MAX_WRITE_WAIT
from forum.node.core.space import Pattern

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
    tuple of the batch (a key only with one payload)."""

    one_of: ClassVar[tuple[str, ...]] = ("payloads", "payloads_b64")
    payloads: list[P] | UnsetType = UNSET
    payloads_b64: list[Base64Text] | UnsetType = UNSET
    key: P | UnsetType = UNSET


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
    names the prefix (as text), its limit, and the seconds to wait."""

    error: str
    message: str
    prefix: str | UnsetType = UNSET
    limit: int | UnsetType = UNSET
    retry_after: float | UnsetType = UNSET


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
    #: and reserved (absent without it, as from a node before it).
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


class Prefixes(msgspec.Struct, frozen=True):
    """The prefixes paused or limited here, sorted by prefix."""

    prefixes: list[PrefixBody]


# -- query parameters ----------------------------------------------------------------

#: What a query value may look like. Numbers are narrower than Python's parsers
#: on purpose (``int`` and ``float`` take Unicode digits, ``1_0``, ``1e3``, ``inf``)::
#:
#:     integer  = 1*19 DIGIT                   ; ASCII 0-9 only
#:     signed   = [ "-" ] 1*19 DIGIT           ; a priority
#:     seconds  = 1*10 DIGIT [ "." 1*9 DIGIT ]
GRAMMAR = {
    "integer": r"[0-9]{1,19}",
    "signed": r"-?[0-9]{1,19}",
    "seconds": r"[0-9]{1,10}(\.[0-9]{1,9})?",
}
Kind = Literal["text", "base64", "integer", "signed", "seconds", "entry_id"]


@dataclass(frozen=True, slots=True)
class Parameter:
    """One query parameter: its name, its grammar, and the bounds it is held to."""

    name: str
    kind: Kind
    #: For people; ``{...}`` names a field of :class:`Limits`.
    description: str
    required: bool = False
    #: An integer's default when absent, and its least value.
    default: int = 0
    minimum: int = 0
    #: The greatest value: a number, or the name of a field of :class:`Limits`.
    maximum: float | str = 2**63 - 1
    #: Seconds past ``maximum`` are cut to it (a wait), not refused (a lease).
    cut: bool = False

    def bound(self, limits: Limits) -> float:
        """``maximum`` on the node with ``limits``."""
        value: float = (
            getattr(limits, self.maximum) if isinstance(self.maximum, str) else self.maximum
        )
        return value

    def describe(self, limits: Limits) -> str:
        return self.description.format(**{k: getattr(limits, k) for k in Limits.__slots__})


PREFIX = Parameter("prefix", "text", "UTF-8 byte prefix; absent matches every tuple.")
PREFIX_B64 = Parameter("prefix_b64", "base64", "The prefix as URL-safe base64, for any bytes.")
WAIT = Parameter(
    "wait",
    "seconds",
    "Seconds to wait for a match, such as 5 or 0.25 (cut to the node's max_wait, "
    "{max_wait:g} s here); absent or 0 answers at once.",
    maximum="max_wait",
    cut=True,
)
LEASE = Parameter(
    "lease",
    "seconds",
    "Seconds the tuple stays reserved: > 0 and at most {max_lease:g}.",
    required=True,
    maximum="max_lease",
)
BATCH_LIMIT = Parameter(
    "limit",
    "integer",
    "Most tuples to answer with: 1 to {max_batch}; default 100.",
    default=DEFAULT_LIMIT,
    minimum=1,
    maximum="max_batch",
)
PAGE_LIMIT = Parameter(
    "limit",
    "integer",
    "Most tuples per page: 1 to {max_page}; default 100.",
    default=DEFAULT_LIMIT,
    minimum=1,
    maximum="max_page",
)
CURSOR = Parameter("cursor", "integer", "next_cursor of the previous page; 0 (default) to start.")
ENTRY_ID = Parameter(
    "id",
    "entry_id",
    f"An entry id, origin:seq (as a raw answer's {ENTRY_ID_HEADER}).",
    required=True,
)
PATTERN = (PREFIX, PREFIX_B64)
#: What a take or reserve takes from: a prefix it must name (either way). An
#: absent one took from every prefix: a forgotten parameter emptied all queues.
TAKE_PREFIX = Parameter(
    "prefix",
    "text",
    "UTF-8 byte prefix of the tuples to take. This or prefix_b64 is required: "
    "an explicit empty prefix= takes from every prefix.",
)
TAKE_PATTERN = (TAKE_PREFIX, PREFIX_B64)

# The write options in the query string (a raw body has no fields for them);
# a JSON or msgpack body may give them as fields instead (WriteOptionFields).
DELAY = Parameter("delay", "seconds", "Seconds until the tuple is due (invisible until then).")
NOT_BEFORE = Parameter(
    "not_before", "seconds", "When the tuple is due, in Unix seconds (not with delay)."
)
TTL = Parameter("ttl", "seconds", "Seconds the tuple lives once due; then it is gone everywhere.")
PRIORITY = Parameter(
    "priority",
    "signed",
    f"{MIN_PRIORITY} to {MAX_PRIORITY}, higher served first; default 0.",
)
KEY = Parameter("key", "text", f"The write's key as UTF-8 text, 1 to {MAX_KEY_BYTES} bytes.")
KEY_B64 = Parameter("key_b64", "base64", "The key as URL-safe base64, for any bytes.")
DEDUP_WINDOW = Parameter(
    "dedup_window",
    "seconds",
    "With key: a second write of the key within so many seconds answers with the "
    "first one's id instead of writing.",
)
WRITE_WAIT = Parameter(
    "wait",
    "seconds",
    "Seconds to wait for room when a limited prefix is full (else 429): at most "
    "{max_write_wait:g} (the node's max_wait, and never over a minute).",
    maximum="max_write_wait",
)
WRITE_OPTIONS = (DELAY, NOT_BEFORE, TTL, PRIORITY, KEY, KEY_B64, DEDUP_WINDOW, WRITE_WAIT)
#: The prefix in the path of the pause routes: its bytes percent-encoded
#: (``job%2F`` for ``job/``, ``%FF`` for the byte 0xFF); never empty.
#: The most groups ``GET /v1/prefixes?separator=`` counts (the first in byte order).
MAX_GROUPS = 500
SEPARATOR = Parameter(
    "separator",
    "text",
    "Also a row per group of tuples here (a payload up to and including its first "
    f"separator, such as /; the payload itself without one) with its live, delayed and "
    f"reserved counts and its oldest live tuple's age; at most {MAX_GROUPS} groups, the "
    "first in byte order.",
)
PATH_PREFIX = Parameter(
    "prefix",
    "text",
    "The prefix, its bytes percent-encoded (job%2F for job/, %FF for the byte 0xFF); not empty.",
    required=True,
)


def prefix_query(pattern: Pattern) -> dict[str, str]:
    """The query parameters that carry ``pattern`` (text when it is UTF-8)."""
    return bytes_query("prefix", pattern.prefix)


def bytes_query(name: str, value: bytes) -> dict[str, str]:
    """The query parameter that carries ``value``: ``name`` as text when it is
    UTF-8, else ``<name>_b64`` (URL-safe base64, unpadded)."""
    try:
        return {name: value.decode()}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.urlsafe_b64encode(value).decode().rstrip("=")}


# -- operations ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    """A success answer of an operation, in each media type it can come in."""

    status: int
    description: str
    #: The document in JSON and msgpack; ``None`` for an answer without one.
    model: type[Any] | None = None
    #: The first is the default, when ``Accept`` allows anything.
    media: tuple[str, ...] = (JSON, MSGPACK)
    headers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Operation:
    """One route of the API: what it takes, and what it answers on success."""

    method: Literal["GET", "POST"]
    path: str
    summary: str
    answer: Answer
    parameters: tuple[Parameter, ...] = ()
    #: The body, in JSON or msgpack (``raw_body``: or as raw bytes, one payload).
    body: type[Body] | None = None
    raw_body: bool = False
    #: Nothing matched (within the wait).
    none: bool = False
    #: Its handler answers as ``Accept`` asks (else in its one type, whatever is asked).
    negotiates: bool = True
    #: The parameters in its path (``{name}``), percent-encoded.
    in_path: tuple[Parameter, ...] = ()

    @property
    def offers(self) -> tuple[str, ...]:
        """The media types it answers in (``Accept``), the default first."""
        return self.answer.media

    @property
    def names(self) -> frozenset[str]:
        """The query parameters it takes: any other is refused."""
        return frozenset(p.name for p in self.parameters)


_SINGLE = (RAW, JSON, MSGPACK)

WRITE = Operation(
    "POST", "/v1/tuples", "Write one tuple",
    Answer(201, "Durable; its entry id (of the first write, when deduplicated).", Written,
           (JSON, MSGPACK, TEXT)),
    WRITE_OPTIONS, body=WriteBody, raw_body=True,
)  # fmt: skip
LIST = Operation(
    "GET", "/v1/tuples", "List live tuples by prefix, oldest first, a page at a time",
    Answer(200, "One page.", Page), (*PATTERN, CURSOR, PAGE_LIMIT),
)  # fmt: skip
WRITE_BATCH = Operation(
    "POST", "/v1/tuples/batch", "Write many tuples: all become durable, or none",
    Answer(201, "Their ids, in order.", Ids), body=BatchWriteBody,
)  # fmt: skip
TAKE = Operation(
    "POST", "/v1/take", "Take the oldest live tuple that starts with the prefix",
    Answer(200, "The tuple, now taken.", TupleBody, _SINGLE, (ENTRY_ID_HEADER,)),
    (*TAKE_PATTERN, WAIT), none=True,
)  # fmt: skip
TAKE_BATCH = Operation(
    "POST", "/v1/take/batch", "Take up to limit tuples: all or none",
    Answer(200, "The tuples taken (possibly none).", Tuples), (*TAKE_PATTERN, WAIT, BATCH_LIMIT),
)  # fmt: skip
RESERVE = Operation(
    "POST", "/v1/reserve", "Reserve the oldest live match for lease s (then ack or release)",
    Answer(200, "The tuple, reserved: out of reach until acked, released or its lease ends.",
           ReservedBody, _SINGLE, (ENTRY_ID_HEADER, DELIVERIES_HEADER)),
    (*TAKE_PATTERN, WAIT, LEASE), none=True,
)  # fmt: skip
RESERVE_BATCH = Operation(
    "POST", "/v1/reserve/batch", "Reserve up to limit matches for lease seconds",
    Answer(200, "The tuples reserved (possibly none).", ReservedTuples),
    (*TAKE_PATTERN, WAIT, LEASE, BATCH_LIMIT),
)  # fmt: skip
ACK = Operation(
    "POST", "/v1/ack", "Take a reserved tuple for good",
    Answer(200, "false if the tuple is no longer here", Acked), (ENTRY_ID,),
)  # fmt: skip
ACK_BATCH = Operation(
    "POST", "/v1/ack/batch", "Take many reserved tuples for good, in one append",
    Answer(200, "One flag per id: false if it was no longer here.", AckedMany), body=Ids,
)  # fmt: skip
#: A worker's round trip: the acks of the jobs it completed and the reserve of
#: its next batch in one request (the acks are made first, whatever the reserve finds).
ACK_RESERVE = Operation(
    "POST", "/v1/ack/reserve",
    "Ack reserved tuples (body ids), then reserve up to limit matches for lease seconds",
    Answer(200, "One flag per id acked (false if it was no longer here), and the tuples "
           "reserved (possibly none).", AckedReserved),
    (*TAKE_PATTERN, WAIT, LEASE, BATCH_LIMIT), body=Ids,
)  # fmt: skip
EXTEND = Operation(
    "POST", "/v1/reserve/extend", "Renew many reservations to lease seconds from now (a heartbeat)",
    Answer(200, "One flag per id: false if it was no longer reserved.", Extended),
    body=ExtendBody,
)  # fmt: skip
RELEASE = Operation(
    "POST", "/v1/release", "Give a reserved tuple back now",
    Answer(200, "false if it was not reserved", Released), (ENTRY_ID,),
)  # fmt: skip
READ = Operation(
    "GET", "/v1/read", "Read the oldest live tuple that starts with the prefix",
    Answer(200, "The tuple, still live.", TupleBody, _SINGLE, (ENTRY_ID_HEADER,)),
    (*PATTERN, WAIT), none=True,
)  # fmt: skip
COUNT = Operation(
    "GET", "/v1/count", "Count live tuples by prefix",
    Answer(200, "The count.", Count, (JSON, MSGPACK, TEXT)), PATTERN,
)  # fmt: skip
COMPACT = Operation(
    "POST", "/v1/compact",
    "Run one compaction pass now (the current segment sealed first); answers once it is done",
    Answer(200, "What the pass did.", Compacted),
)  # fmt: skip
#: The status document is the :class:`~forum.node.api.status.NodeStatus` dataclass,
#: which the client parses too (msgspec makes a schema of a dataclass as well).
STATUS = Operation(
    "GET", "/v1/status", "The node's identity, contents and peers",
    Answer(200, "Status.", NodeStatus),
)  # fmt: skip
SPEC = Operation(
    "GET", "/v1/openapi.json", "This document", Answer(200, "OpenAPI 3.1", media=(JSON,)),
    negotiates=False,
)  # fmt: skip
HEALTHZ = Operation(
    "GET", "/healthz", "The process is up (no token needed)",
    Answer(200, "Up.", Health, (JSON,)), negotiates=False,
)  # fmt: skip
READYZ = Operation(
    "GET", "/readyz", "The Strand is open and the node is not shutting down (no token needed)",
    Answer(200, "Ready.", Ready, (JSON,)), negotiates=False,
)  # fmt: skip
#: The WebSocket of msgpack frames for programs (forum.node.http.stream, docs/wire.md):
#: the same operations as the routes above, many in flight on one connection.
STREAM = Operation(
    "GET", "/v1/stream",
    "Upgrade to a WebSocket of msgpack request and answer frames (docs/wire.md)",
    Answer(101, "Switching protocols: the stream is open.", media=()), negotiates=False,
)  # fmt: skip
#: Pausing a prefix (replicated: every node's takes and reserves of it answer
#: nothing until it is resumed; writes go on), and what is paused or limited.
PAUSE = Operation(
    "POST", "/v1/prefixes/{prefix}/pause",
    "Pause the takes and reserves of a prefix on every node (writes go on)",
    Answer(201, "The pause is durable; its marker's id.", Paused), in_path=(PATH_PREFIX,),
)  # fmt: skip
RESUME = Operation(
    "POST", "/v1/prefixes/{prefix}/resume", "End every pause of exactly this prefix",
    Answer(200, "How many pauses ended (0: it was not paused).", Resumed), in_path=(PATH_PREFIX,),
)  # fmt: skip
PREFIXES = Operation(
    "GET", "/v1/prefixes",
    "The prefixes paused here, each limited prefix's fill, and with separator the groups "
    "of tuples here with their counts",
    Answer(200, "Sorted by prefix.", Prefixes), (SEPARATOR,),
)  # fmt: skip
METRICS = Operation(
    "GET", "/metrics", "Prometheus metrics in the text format (behind the token when one is set)",
    Answer(200, "Prometheus text format.", media=(TEXT,)), negotiates=False,
)  # fmt: skip

#: Server-Sent Events of the node's writes, takes and expiries (forum.node.http.watch;
#: ``Last-Event-ID`` resumes, docs/http-api.md "Watch").
WATCH = Operation(
    "GET", "/v1/watch",
    "Follow the node's writes, takes and expiries by prefix as Server-Sent Events",
    Answer(200, "An endless text/event-stream (docs/http-api.md, Watch).", media=(EVENT_STREAM,)),
    PATTERN, negotiates=False,
)  # fmt: skip

#: The operations of the stream (``GET /v1/stream``, forum.node.http.stream), by the
#: name a request gives, and the route each is over HTTP: the same checks, the
#: same answer (its status and document), whichever way it is asked.
#: The most requests in flight on one stream (docs/wire.md).
MAX_IN_FLIGHT = 256
#: The stream frame that cancels a request in flight (docs/wire.md).
CANCEL = "cancel"

STREAM_OPS = {
    "write": WRITE, "write_many": WRITE_BATCH, "read": READ, "take": TAKE,
    "take_many": TAKE_BATCH, "reserve": RESERVE, "reserve_many": RESERVE_BATCH, "ack": ACK,
    "ack_many": ACK_BATCH, "ack_reserve": ACK_RESERVE, "extend_many": EXTEND, "release": RELEASE,
    "count": COUNT, "list": LIST,
}  # fmt: skip

#: Every operation of the node itself (replication adds the cluster routes).
OPERATIONS = (
    WRITE, LIST, WRITE_BATCH, TAKE, TAKE_BATCH, RESERVE, RESERVE_BATCH, ACK, ACK_BATCH,
    ACK_RESERVE, EXTEND, RELEASE, READ, COUNT, COMPACT, STATUS, SPEC, HEALTHZ, READYZ, METRICS,
    STREAM, WATCH, PAUSE, RESUME, PREFIXES,
)  # fmt: skip
