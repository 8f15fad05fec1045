"""The handlers of the client API (``/v1``) and of the health probes.

Each handler checks everything the request carries (query, Accept, body)
before it touches the Forum, so a rejected request changes nothing; the
Forum's batch operations are all or nothing, so neither does a failed one.
"""

from __future__ import annotations

import logging
import time
from importlib import metadata

from aiohttp import web

from node.errors import ForumError
from node.web_bodies import (
    JSON,
    MSGPACK,
    RAW,
    TEXT,
    ApiProblem,
    Query,
    ids_document,
    negotiate,
    parse_batch_write,
    parse_extend,
    parse_ids,
    parse_write,
    respond,
    respond_tuple,
    tuple_document,
)
from node.web_keys import CONFIG, FORUM, LONG_POLLS, PEERS, STARTED
from node.web_status import NodeStatus

log = logging.getLogger(__name__)

_PATTERN = ("prefix", "prefix_b64")
#: The most tuples one page of ``GET /v1/tuples`` holds.
MAX_LIST_LIMIT = 1000
#: The longest reservation, in seconds.
MAX_LEASE = 3600.0


def _version() -> str:
    try:
        return metadata.version("forum")
    except metadata.PackageNotFoundError:
        return "0+unknown"


VERSION = _version()


async def write_tuple(request: web.Request) -> web.Response:
    """``POST /v1/tuples``: write one tuple; 201 with its id."""
    Query(request, ())
    media = negotiate(request, (JSON, MSGPACK, TEXT), JSON)
    payload = await parse_write(request, request.app[CONFIG].max_payload)
    entry_id = await request.app[FORUM].write(payload)
    return respond({"id": str(entry_id)}, media, status=201)


async def write_batch(request: web.Request) -> web.Response:
    """``POST /v1/tuples/batch``: write many tuples, all or none; 201 with their ids."""
    Query(request, ())
    media = negotiate(request, (JSON, MSGPACK), JSON)
    config = request.app[CONFIG]
    payloads = await parse_batch_write(
        request, config.max_payload, config.max_batch, config.max_batch_bytes
    )
    ids = await request.app[FORUM].write_many(payloads) if payloads else []
    return respond(ids_document(ids), media, status=201)


async def take(request: web.Request) -> web.Response:
    """``POST /v1/take``: take the oldest match (waiting up to ``wait`` s); 204 if none."""
    query = Query(request, (*_PATTERN, "wait"))
    pattern = query.pattern()
    wait = query.seconds("wait", request.app[CONFIG].max_wait)
    media = negotiate(request, (RAW, JSON, MSGPACK), RAW)
    found = await request.app[LONG_POLLS].take(pattern, wait)
    return web.Response(status=204) if found is None else respond_tuple(found, media)


async def reserve(request: web.Request) -> web.Response:
    """``POST /v1/reserve``: like take, but the tuple is only out of reach for
    ``lease`` seconds until ``/v1/ack`` takes it or ``/v1/release`` gives it back."""
    query = Query(request, (*_PATTERN, "wait", "lease"))
    pattern = query.pattern()
    wait = query.seconds("wait", request.app[CONFIG].max_wait)
    lease = query.lease("lease", MAX_LEASE)
    media = negotiate(request, (RAW, JSON, MSGPACK), RAW)
    found = await request.app[LONG_POLLS].reserve(pattern, lease, wait)
    return web.Response(status=204) if found is None else respond_tuple(found, media)


async def reserve_batch(request: web.Request) -> web.Response:
    """``POST /v1/reserve/batch``: reserve up to ``limit`` matches for ``lease``
    seconds; with ``wait``, when none is live, wait for one, then take the rest."""
    config = request.app[CONFIG]
    query = Query(request, (*_PATTERN, "limit", "lease", "wait"))
    pattern = query.pattern()
    limit = query.integer("limit", 100, 1, config.max_batch)
    lease = query.lease("lease", MAX_LEASE)
    wait = query.seconds("wait", config.max_wait)
    media = negotiate(request, (JSON, MSGPACK), JSON)
    forum = request.app[FORUM]
    reserved = await forum.reserve_many(pattern, lease, limit)
    if not reserved and wait:
        first = await request.app[LONG_POLLS].reserve(pattern, lease, wait)
        if first is not None:
            reserved = [first]
            if limit > 1:
                reserved += await forum.reserve_many(pattern, lease, limit - 1)
    return respond({"tuples": [tuple_document(t, media) for t in reserved]}, media)


async def ack_batch(request: web.Request) -> web.Response:
    """``POST /v1/ack/batch`` with ``{"ids": [...]}``: ack many in one append."""
    config = request.app[CONFIG]
    ids = await parse_ids(request, config.max_batch)
    media = negotiate(request, (JSON, MSGPACK), JSON)
    return respond({"acked": await request.app[FORUM].ack_many(ids)}, media)


async def extend_reservations(request: web.Request) -> web.Response:
    """``POST /v1/reserve/extend`` with ``{"ids": [...], "lease": s}``: renew
    many reservations to ``lease`` seconds from now (a worker's heartbeat);
    ``extended`` false for an id that is no longer reserved."""
    Query(request, ())
    media = negotiate(request, (JSON, MSGPACK), JSON)
    ids, lease = await parse_extend(request, request.app[CONFIG].max_batch, MAX_LEASE)
    return respond({"extended": await request.app[FORUM].extend_many(ids, lease)}, media)


async def ack(request: web.Request) -> web.Response:
    """``POST /v1/ack?id=``: take a reserved tuple for good; ``acked`` false if gone."""
    entry_id = Query(request, ("id",)).entry_id("id")
    media = negotiate(request, (JSON, MSGPACK), JSON)
    return respond({"acked": await request.app[FORUM].ack(entry_id)}, media)


async def release(request: web.Request) -> web.Response:
    """``POST /v1/release?id=``: give a reserved tuple back at once."""
    entry_id = Query(request, ("id",)).entry_id("id")
    media = negotiate(request, (JSON, MSGPACK), JSON)
    return respond({"released": await request.app[FORUM].release(entry_id)}, media)


async def read(request: web.Request) -> web.Response:
    """``GET /v1/read``: the oldest match, left live (waiting up to ``wait`` s); 204 if none."""
    query = Query(request, (*_PATTERN, "wait"))
    pattern = query.pattern()
    wait = query.seconds("wait", request.app[CONFIG].max_wait)
    media = negotiate(request, (RAW, JSON, MSGPACK), RAW)
    found = await request.app[LONG_POLLS].read(pattern, wait)
    return web.Response(status=204) if found is None else respond_tuple(found, media)


async def take_batch(request: web.Request) -> web.Response:
    """``POST /v1/take/batch``: take up to ``limit`` oldest matches, all or none.

    With ``wait``, when nothing matches it waits for one match, then takes
    what else is there: a consumer gets work as soon as there is any, yet
    in batches under load.
    """
    config = request.app[CONFIG]
    query = Query(request, (*_PATTERN, "limit", "wait"))
    pattern = query.pattern()
    limit = query.integer("limit", 100, 1, config.max_batch)
    wait = query.seconds("wait", config.max_wait)
    media = negotiate(request, (JSON, MSGPACK), JSON)
    forum = request.app[FORUM]
    taken = await forum.take_many(pattern, limit)
    if not taken and wait:
        first = await request.app[LONG_POLLS].take(pattern, wait)
        if first is not None:
            taken = [first]
            if limit > 1:
                try:
                    taken += await forum.take_many(pattern, limit - 1)
                except ForumError:
                    # The first is taken for good: answer with it rather than lose it.
                    log.exception("take batch: the rest of a batch after a wait failed")
    return respond({"tuples": [tuple_document(t, media) for t in taken]}, media)


async def count(request: web.Request) -> web.Response:
    """``GET /v1/count``: how many live tuples match."""
    pattern = Query(request, _PATTERN).pattern()
    media = negotiate(request, (JSON, MSGPACK, TEXT), JSON)
    return respond({"count": await request.app[FORUM].count(pattern)}, media)


async def list_tuples(request: web.Request) -> web.Response:
    """``GET /v1/tuples``: live matches, oldest first, a page at a time."""
    query = Query(request, (*_PATTERN, "cursor", "limit"))
    pattern = query.pattern()
    cursor = query.integer("cursor", 0, 0, 2**63 - 1)
    limit = query.integer("limit", 100, 1, MAX_LIST_LIMIT)
    media = negotiate(request, (JSON, MSGPACK), JSON)
    page = request.app[FORUM].list(pattern, cursor=cursor, limit=limit)
    document = {
        "tuples": [tuple_document(t, media) for t in page.tuples],
        "next_cursor": page.next_cursor,
    }
    return respond(document, media)


async def status(request: web.Request) -> web.Response:
    """``GET /v1/status``: who this node is and what it holds."""
    Query(request, ())
    media = negotiate(request, (JSON, MSGPACK), JSON)
    return respond(node_status(request.app).to_document(), media)


#: The handlers that read a request body; any other route refuses one (a body
#: sent to a take is a client mistake, and the take must not happen anyway).
BODY_HANDLERS = frozenset({write_tuple, write_batch, ack_batch, extend_reservations})


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
    )


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: the process is up and answering."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``: the Strand is open, replayed and can be written, and the
    node is not draining.

    The node listens only after replay, so "not ready" means shutting down, or
    the Strand cannot take appends (a full disk: until there is room again; a
    failed fsync: until the node is restarted); the message says which.
    """
    if request.app[LONG_POLLS].draining:
        raise ApiProblem(503, "not_ready", "the node is shutting down")
    problem = await request.app[FORUM].strand.health()
    if problem is not None:
        raise ApiProblem(503, "storage_unavailable", problem, headers={"Retry-After": "1"})
    return web.json_response({"status": "ready"})
