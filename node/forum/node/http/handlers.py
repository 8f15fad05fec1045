"""The handlers of the client API (``/v1``) and of the health probes.

Each handler is one operation of :mod:`forum.node.api.operations` (``HANDLERS`` binds
them; the app routes by it): it takes the parameters, the body and the
media types declared there and nothing else. It checks everything the
request carries (query, Accept, body) before it touches the Forum, so a
rejected request changes nothing; the Forum's batch operations are all or
nothing, so neither does a failed one.
"""

from __future__ import annotations

import time
from urllib.parse import unquote_to_bytes

from aiohttp import web
from aiohttp.typedefs import Handler

from forum.node.api.model import (
    JSON,
    AckedReserved,
    Compacted,
    Health,
    Page,
    Ready,
    ReservedTuples,
    Tuples,
)
from forum.node.api.operations import (
    ACK,
    ACK_BATCH,
    ACK_RESERVE,
    CLUSTER_MAP,
    COMPACT,
    COUNT,
    EXTEND,
    HEALTHZ,
    LIST,
    PAUSE,
    PREFIXES,
    READ,
    READYZ,
    RELEASE,
    RESERVE,
    RESERVE_BATCH,
    RESUME,
    STATUS,
    TAKE,
    TAKE_BATCH,
    WITHDRAW,
    WRITE,
    WRITE_BATCH,
    Operation,
)
from forum.node.api.parameters import (
    BATCH_LIMIT,
    CURSOR,
    ENTRY_ID,
    LEASE,
    PAGE_LIMIT,
    SEPARATOR,
    WAIT,
)
from forum.node.api.status import NodeStatus
from forum.node.core.version import installed_version
from forum.node.http.bodies import ApiProblem, negotiate, parse_extend, parse_ids
from forum.node.http.keys import (
    CLUSTER,
    COMPACTOR,
    CONFIG,
    FORUM,
    LIMITS,
    LONG_POLLS,
    PEERS,
    READINESS,
    REPAIR,
    SPACE,
    STARTED,
    STREAMS,
)
from forum.node.http.query import Query
from forum.node.http.responses import reserved_body, respond, respond_tuple, tuple_body
from forum.node.http.writes import parse_batch_write, parse_write

VERSION = installed_version()


def _query(request: web.Request, operation: Operation) -> Query:
    return Query(request, operation, request.app[LIMITS])


async def write_tuple(request: web.Request) -> web.Response:
    """``POST /v1/tuples``: write one tuple, with its options (query or body);
    201 with its id."""
    query = _query(request, WRITE)
    media = negotiate(request, WRITE)
    payload, asked = await parse_write(request, query, request.app[LIMITS])
    return respond(await request.app[SPACE].write(payload, asked), media, status=201)


async def write_batch(request: web.Request) -> web.Response:
    """``POST /v1/tuples/batch``: write many tuples, all or none; 201 with their ids."""
    _query(request, WRITE_BATCH)
    media = negotiate(request, WRITE_BATCH)
    payloads, asked = await parse_batch_write(request, request.app[LIMITS])
    return respond(await request.app[SPACE].write_many(payloads, asked), media, status=201)


async def take(request: web.Request) -> web.Response:
    """``POST /v1/take``: take the oldest match (waiting up to ``wait`` s); 204 if none."""
    query = _query(request, TAKE)
    pattern = query.pattern()
    wait = query.seconds(WAIT)
    media = negotiate(request, TAKE)
    found = await request.app[SPACE].take(pattern, wait)
    return web.Response(status=204) if found is None else respond_tuple(found, media)


async def reserve(request: web.Request) -> web.Response:
    """``POST /v1/reserve``: like take, but the tuple is only out of reach for
    ``lease`` seconds until ``/v1/ack`` takes it or ``/v1/release`` gives it back."""
    query = _query(request, RESERVE)
    pattern = query.pattern()
    wait = query.seconds(WAIT)
    lease = query.seconds(LEASE)
    media = negotiate(request, RESERVE)
    found = await request.app[SPACE].reserve(pattern, lease, wait)
    return web.Response(status=204) if found is None else respond_tuple(found, media)


async def reserve_batch(request: web.Request) -> web.Response:
    """``POST /v1/reserve/batch``: reserve up to ``limit`` matches for ``lease``
    seconds; with ``wait``, when none is live, wait for one, then take the rest."""
    query = _query(request, RESERVE_BATCH)
    pattern = query.pattern()
    limit = query.integer(BATCH_LIMIT)
    lease = query.seconds(LEASE)
    wait = query.seconds(WAIT)
    media = negotiate(request, RESERVE_BATCH)
    reserved = await request.app[SPACE].reserve_many(pattern, lease, limit, wait)
    return respond(ReservedTuples([reserved_body(t, media) for t in reserved]), media)


async def ack_batch(request: web.Request) -> web.Response:
    """``POST /v1/ack/batch`` with ``{"ids": [...]}``: ack many in one append."""
    _query(request, ACK_BATCH)
    ids = await parse_ids(request, request.app[LIMITS])
    media = negotiate(request, ACK_BATCH)
    return respond(await request.app[SPACE].ack_many(ids), media)


async def ack_reserve(request: web.Request) -> web.Response:
    """``POST /v1/ack/reserve`` with ``{"ids": [...]}``: ack those, then
    reserve as ``/v1/reserve/batch`` (a worker's next batch in one request)."""
    query = _query(request, ACK_RESERVE)
    pattern = query.pattern()
    limit = query.integer(BATCH_LIMIT)
    lease = query.seconds(LEASE)
    wait = query.seconds(WAIT)
    media = negotiate(request, ACK_RESERVE)
    ids = await parse_ids(request, request.app[LIMITS])
    acked, reserved = await request.app[SPACE].ack_reserve(ids, pattern, lease, limit, wait)
    return respond(AckedReserved(acked, [reserved_body(t, media) for t in reserved]), media)


async def extend_reservations(request: web.Request) -> web.Response:
    """``POST /v1/reserve/extend`` with ``{"ids": [...], "lease": s}``: renew
    many reservations to ``lease`` seconds from now (a worker's heartbeat);
    ``extended`` false for an id that is no longer reserved."""
    _query(request, EXTEND)
    media = negotiate(request, EXTEND)
    ids, lease = await parse_extend(request, request.app[LIMITS])
    return respond(await request.app[SPACE].extend_many(ids, lease), media)


async def ack(request: web.Request) -> web.Response:
    """``POST /v1/ack?id=``: take a reserved tuple for good; ``acked`` false if gone."""
    entry_id = _query(request, ACK).entry_id(ENTRY_ID)
    media = negotiate(request, ACK)
    return respond(await request.app[SPACE].ack(entry_id), media)


async def release(request: web.Request) -> web.Response:
    """``POST /v1/release?id=``: give a reserved tuple back at once."""
    entry_id = _query(request, RELEASE).entry_id(ENTRY_ID)
    media = negotiate(request, RELEASE)
    return respond(await request.app[SPACE].release(entry_id), media)


async def read(request: web.Request) -> web.Response:
    """``GET /v1/read``: the oldest match, left live (waiting up to ``wait`` s); 204 if none."""
    query = _query(request, READ)
    pattern = query.pattern()
    wait = query.seconds(WAIT)
    media = negotiate(request, READ)
    found = await request.app[SPACE].read(pattern, wait)
    return web.Response(status=204) if found is None else respond_tuple(found, media)


async def take_batch(request: web.Request) -> web.Response:
    """``POST /v1/take/batch``: take up to ``limit`` oldest matches, all or none
    (``Space.take_many``)."""
    query = _query(request, TAKE_BATCH)
    pattern = query.pattern()
    limit = query.integer(BATCH_LIMIT)
    wait = query.seconds(WAIT)
    media = negotiate(request, TAKE_BATCH)
    taken = await request.app[SPACE].take_many(pattern, limit, wait)
    return respond(Tuples([tuple_body(t, media) for t in taken]), media)


async def withdraw(request: web.Request) -> web.Response:
    """``POST /v1/withdraw``: take up to ``limit`` matches, live or not yet due
    (``Forum.withdraw``)."""
    query = _query(request, WITHDRAW)
    pattern = query.pattern()
    limit = query.integer(BATCH_LIMIT)
    media = negotiate(request, WITHDRAW)
    taken = await request.app[SPACE].withdraw(pattern, limit)
    return respond(Tuples([tuple_body(t, media) for t in taken]), media)


async def count(request: web.Request) -> web.Response:
    """``GET /v1/count``: how many live tuples match."""
    pattern = _query(request, COUNT).pattern()
    media = negotiate(request, COUNT)
    return respond(await request.app[SPACE].count(pattern), media)


async def list_tuples(request: web.Request) -> web.Response:
    """``GET /v1/tuples``: live matches, oldest first, a page at a time."""
    query = _query(request, LIST)
    pattern = query.pattern()
    cursor = query.integer(CURSOR)
    limit = query.integer(PAGE_LIMIT)
    media = negotiate(request, LIST)
    page = request.app[SPACE].list(pattern, cursor, limit)
    return respond(Page([tuple_body(t, media) for t in page.tuples], page.next_cursor), media)


def path_prefix(request: web.Request) -> bytes:
    """The ``{prefix}`` of a pause route as bytes: read from the path as sent,
    its percent-encoding undone byte by byte (aiohttp's decoded path would
    have made ``%FF`` text)."""
    segment = request.rel_url.raw_path.split("/")[3]
    return unquote_to_bytes(segment)


async def pause(request: web.Request) -> web.Response:
    """``POST /v1/prefixes/{prefix}/pause``: pause a prefix everywhere; 201
    with the pause marker's id."""
    _query(request, PAUSE)
    media = negotiate(request, PAUSE)
    return respond(await request.app[SPACE].pause(path_prefix(request)), media, status=201)


async def resume(request: web.Request) -> web.Response:
    """``POST /v1/prefixes/{prefix}/resume``: end the pauses of a prefix."""
    _query(request, RESUME)
    media = negotiate(request, RESUME)
    return respond(await request.app[SPACE].resume(path_prefix(request)), media)


async def prefixes(request: web.Request) -> web.Response:
    """``GET /v1/prefixes``: the paused prefixes, the limited ones' fill, and
    with ``separator`` the groups of tuples here."""
    separator = _query(request, PREFIXES).text(SEPARATOR)
    media = negotiate(request, PREFIXES)
    grouped = None if separator is None else separator.encode()
    return respond(request.app[SPACE].prefixes(media, grouped), media)


async def compact(request: web.Request) -> web.Response:
    """``POST /v1/compact``: one compaction pass now; answers once it is done."""
    _query(request, COMPACT)
    media = negotiate(request, COMPACT)
    report = await request.app[COMPACTOR].compact_now()
    return respond(
        Compacted(
            bytes_before=report.bytes_before,
            bytes_after=report.bytes_after,
            entries_dropped=report.entries_dropped,
            segments_rewritten=report.segments_rewritten,
            segments_removed=report.segments_removed,
            floors=report.floors,
            seconds=round(report.seconds, 3),
        ),
        media,
    )


async def status(request: web.Request) -> web.Response:
    """``GET /v1/status``: who this node is and what it holds."""
    _query(request, STATUS)
    media = negotiate(request, STATUS)
    return respond(node_status(request.app).to_document(), media)


def node_status(app: web.Application) -> NodeStatus:
    forum, config = app[FORUM], app[CONFIG]
    return NodeStatus.of(
        forum.stats(),
        node_id=forum.strand.config.node_name,
        advertise=config.advertise_url(),
        version=VERSION,
        uptime_seconds=round(time.monotonic() - app[STARTED], 3),
        long_polls=app[LONG_POLLS].waiting,
        fsync=forum.strand.config.fsync,
        peers=tuple(app[PEERS]()),
        repair=app[REPAIR](),
        horizon=app[COMPACTOR].horizon(),
        streams=app[STREAMS].figures(),
        readiness=app[READINESS](),
        cluster=None if (holder := app.get(CLUSTER)) is None else holder.figures(),
    )


async def cluster_map(request: web.Request) -> web.Response:
    """``GET /v1/map``: the cluster map this node holds, and its group in it."""
    _query(request, CLUSTER_MAP)
    media = negotiate(request, CLUSTER_MAP)
    holder = request.app.get(CLUSTER)
    if holder is None:
        raise ApiProblem(
            404, "no_cluster_map", "this node has no cluster map: its cluster is one group"
        )
    return respond(holder.body(), media)


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: the process is up and answering (in JSON, whatever the
    probe's ``Accept``)."""
    return respond(Health(), JSON)


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``: the Strand is open, replayed and can be written, the
    node is not draining, and its clock is not the odd one out of its cluster.

    The node listens only after replay, so "not ready" means shutting down, or
    the Strand cannot take appends (a full disk: until there is room again; a
    failed fsync: until the node is restarted), or its peers refuse it for
    clock skew (until its clock is fixed: writes here would reach no one,
    ``forum.replication.clocks``); the message says which. A peer refused for its
    clock while this node is in step with the rest leaves it ready, with the
    peer named under ``degraded``.
    """
    if request.app[LONG_POLLS].draining:
        raise ApiProblem(503, "not_ready", "the node is shutting down")
    problem = await request.app[FORUM].strand.health()
    if problem is not None:
        raise ApiProblem(503, "storage_unavailable", problem, headers={"Retry-After": "1"})
    readiness = request.app[READINESS]()
    if readiness.not_ready is not None:
        raise ApiProblem(503, "clock_skew", readiness.not_ready, headers={"Retry-After": "5"})
    return respond(Ready(degraded=list(readiness.degraded)), JSON)


#: The handler of each operation of the node's own (the app adds the
#: document's and the metrics' handlers, which need more than a request).
HANDLERS: dict[Operation, Handler] = {
    WRITE: write_tuple,
    LIST: list_tuples,
    WRITE_BATCH: write_batch,
    TAKE: take,
    TAKE_BATCH: take_batch,
    RESERVE: reserve,
    RESERVE_BATCH: reserve_batch,
    ACK: ack,
    ACK_BATCH: ack_batch,
    ACK_RESERVE: ack_reserve,
    EXTEND: extend_reservations,
    RELEASE: release,
    READ: read,
    COUNT: count,
    COMPACT: compact,
    STATUS: status,
    HEALTHZ: healthz,
    READYZ: readyz,
    PAUSE: pause,
    RESUME: resume,
    PREFIXES: prefixes,
    CLUSTER_MAP: cluster_map,
    WITHDRAW: withdraw,
}
