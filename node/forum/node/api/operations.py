"""The operations of the HTTP API, declared once: each route, what it takes and answers.

Routing, content negotiation and ``/v1/openapi.json``'s ``paths`` are made
from :data:`OPERATIONS`; the stream (``GET /v1/stream``, docs/wire.md) runs
the operations of :data:`STREAM_OPS` by name, answering as their routes do,
and the client decodes each answer as its ``answer.model``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from forum.node.api.model import (
    DELIVERIES_HEADER,
    ENTRY_ID_HEADER,
    EVENT_STREAM,
    JSON,
    MSGPACK,
    RAW,
    TEXT,
    Acked,
    AckedMany,
    AckedReserved,
    BatchWriteBody,
    Body,
    ClusterMapBody,
    Compacted,
    Count,
    ExtendBody,
    Extended,
    Health,
    Ids,
    Page,
    Paused,
    Prefixes,
    Ready,
    Released,
    ReservedBody,
    ReservedTuples,
    Resumed,
    TupleBody,
    Tuples,
    WriteBody,
    Written,
)
from forum.node.api.parameters import (
    BATCH_LIMIT,
    CURSOR,
    ENTRY_ID,
    LEASE,
    PAGE_LIMIT,
    PATH_PREFIX,
    PATTERN,
    SEPARATOR,
    TAKE_PATTERN,
    WAIT,
    WRITE_OPTIONS,
    Parameter,
)
from forum.node.api.status import NodeStatus


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
    #: Why it may answer 404 (an error document), if it may.
    not_found: str | None = None

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
WITHDRAW = Operation(
    "POST", "/v1/withdraw",
    "Take up to limit matches here, live or not yet due (a reserved one is left): never waits",
    Answer(200, "The tuples taken (possibly none).", Tuples), (*TAKE_PATTERN, BATCH_LIMIT),
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
#: The cluster map of a scaled-out cluster (docs/scaling.md); 404 on a node without one.
CLUSTER_MAP = Operation(
    "GET", "/v1/map", "The cluster map this node holds (its groups), and its own group",
    Answer(200, "The map, signed with the cluster secret when the node has one.", ClusterMapBody),
    not_found="The node has no cluster map (no_cluster_map): its cluster is one group.",
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
    "count": COUNT, "list": LIST, "withdraw": WITHDRAW,
}  # fmt: skip

#: Every operation of the node itself (replication adds the cluster routes).
OPERATIONS = (
    WRITE, LIST, WRITE_BATCH, TAKE, TAKE_BATCH, RESERVE, RESERVE_BATCH, ACK, ACK_BATCH,
    ACK_RESERVE, EXTEND, RELEASE, READ, COUNT, COMPACT, STATUS, SPEC, HEALTHZ, READYZ, METRICS,
    STREAM, WATCH, PAUSE, RESUME, PREFIXES, CLUSTER_MAP, WITHDRAW,
)  # fmt: skip
