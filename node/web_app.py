"""The node's aiohttp application: routes, middlewares and the extension seam.

:func:`build_app` wires a :class:`~node.forum.Forum` to HTTP. Extensions
(replication) are callables that receive the app before it starts and may add
routes, ``on_startup``/``cleanup_ctx`` handlers and metrics; they reach the
node's parts through the typed keys in :mod:`node.web_keys`.

Middlewares, outermost first::

    metrics        counts and times every request, rejected ones included
    errors         turns every failure into {"error": code, "message": text}
    authenticate   the client token on the API, the cluster key (the
                   cluster secret, else the token) on /v1/cluster/
                   (replication), nothing on the health probes
    bodies         refuses a Content-Encoding (415) and a body on a route
                   that takes none (400); bounds the time a body may take

What never reaches the app (a request the HTTP parser refuses, a slow
client's connection) is :mod:`node.web_server`'s.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator, Sequence

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry

from node.compactor import CompactionPolicy, Compactor
from node.config import NodeConfig
from node.errors import ForumError, RecordTooLarge, StrandError
from node.forum import Forum
from node.web_bodies import ApiProblem, BodyTimeout, bad_request
from node.web_handlers import (
    BODY_HANDLERS,
    ack,
    ack_batch,
    count,
    extend_reservations,
    healthz,
    list_tuples,
    read,
    readyz,
    release,
    reserve,
    reserve_batch,
    status,
    take,
    take_batch,
    write_batch,
    write_tuple,
)
from node.web_keys import (
    COMPACTOR,
    CONFIG,
    FORUM,
    LONG_POLLS,
    METRICS_REGISTRY,
    PEERS,
    SELF_AUTHENTICATED,
    STARTED,
    Extension,
)
from node.web_longpoll import LongPolls
from node.web_metrics import NodeMetrics
from node.web_openapi import openapi_handler
from node.web_status import PeerStatus

log = logging.getLogger(__name__)

#: Routes under this prefix are for peers: they need the cluster key (see cluster_key).
CLUSTER_PREFIX = "/v1/cluster/"
#: Routes open to anyone (probes must work without secrets).
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
#: Room for the framing of a batch beyond its payload bytes.
_BODY_SLACK = 64 * 1024

ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    431: "headers_too_large",
    503: "unavailable",
}
#: The codings a request body may come in: none but HTTP/1.1's own framing.
_CODINGS = {"Content-Encoding": ("identity", ""), "Transfer-Encoding": ("chunked",)}
#: Headers of aiohttp's own errors worth keeping when they are rewritten as JSON.
_KEPT_HEADERS = ("Allow", "WWW-Authenticate", "Retry-After")


def build_app(
    forum: Forum, config: NodeConfig, extensions: Sequence[Extension] = ()
) -> web.Application:
    """The node's app, serving ``forum`` as ``config`` says, with ``extensions`` applied."""
    registry = CollectorRegistry(auto_describe=True)
    long_polls = LongPolls(forum, config.max_waiters)
    metrics = NodeMetrics(registry, forum, long_polls)
    app = web.Application(
        middlewares=[metrics.middleware, _errors, _authenticate, _bodies],
        # A backstop only: handlers read bodies with their own, tighter limits.
        client_max_size=config.max_batch_bytes + _BODY_SLACK,
    )
    app[FORUM] = forum
    app[CONFIG] = config
    app[METRICS_REGISTRY] = registry
    app[LONG_POLLS] = long_polls
    app[COMPACTOR] = Compactor(
        forum, CompactionPolicy(config.compact_interval, config.compact_dead_ratio)
    )
    app[PEERS] = _no_peers
    app[SELF_AUTHENTICATED] = frozenset()
    app[STARTED] = time.monotonic()

    router = app.router
    router.add_post("/v1/tuples", write_tuple)
    router.add_get("/v1/tuples", list_tuples)
    router.add_post("/v1/tuples/batch", write_batch)
    router.add_post("/v1/take", take)
    router.add_post("/v1/take/batch", take_batch)
    router.add_post("/v1/reserve", reserve)
    router.add_post("/v1/reserve/batch", reserve_batch)
    router.add_post("/v1/ack", ack)
    router.add_post("/v1/ack/batch", ack_batch)
    router.add_post("/v1/reserve/extend", extend_reservations)
    router.add_post("/v1/release", release)
    router.add_get("/v1/read", read)
    router.add_get("/v1/count", count)
    router.add_get("/v1/status", status)
    router.add_get("/v1/openapi.json", openapi_handler)
    router.add_get("/healthz", healthz)
    router.add_get("/readyz", readyz)
    router.add_get("/metrics", metrics.handle)

    app.cleanup_ctx.append(_listening)
    # on_shutdown runs after the socket closes and before in-flight requests
    # are awaited: long polls end now instead of holding up the shutdown.
    app.on_shutdown.append(_drain)
    for extension in extensions:
        extension(app)
    return app


def _no_peers() -> list[PeerStatus]:
    return []


async def _listening(app: web.Application) -> AsyncIterator[None]:
    async with app[LONG_POLLS], app[COMPACTOR] as compactor:
        compactor.start()
        yield


async def _drain(app: web.Application) -> None:
    app[LONG_POLLS].drain()


def cluster_key(config: NodeConfig) -> str | None:
    """The credential of the cluster routes: the cluster secret, else the token, else none.

    Never nothing while a token is set (the peer routes must not be a way
    around it), and nodes that share a token but have no secret still
    replicate with each other. Replication signs with it (``replication.auth``).
    """
    return config.cluster_secret if config.cluster_secret is not None else config.token


@web.middleware
async def _authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in OPEN_PATHS:
        return await handler(request)
    config = request.app[CONFIG]
    for_peers = request.path.startswith(CLUSTER_PREFIX)
    checked_by_route: frozenset[str] = request.app[SELF_AUTHENTICATED]
    if (
        for_peers
        and request.match_info.http_exception is None  # an existing route ...
        and request.path.startswith(tuple(checked_by_route))  # ... that checks its own
    ):
        return await handler(request)
    secret = cluster_key(config) if for_peers else config.token
    if secret is not None and not _bearer_matches(request, secret):
        peer_secret = for_peers and config.cluster_secret is not None
        what = "the cluster secret" if peer_secret else "the node's token"
        raise ApiProblem(
            401,
            "unauthorized",
            f"missing or wrong credentials: send 'Authorization: Bearer <{what}>'",
            headers={"WWW-Authenticate": 'Bearer realm="forum"'},
        )
    return await handler(request)


def _bearer_matches(request: web.Request, secret: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # compare_digest: the time taken must not tell how much of the secret matched.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), secret.encode()
    )


@web.middleware
async def _bodies(request: web.Request, handler: Handler) -> web.StreamResponse:
    # The server does not inflate bodies (node.web_server), so a compressed
    # one cannot slip past the size limits: it is refused here, on every route.
    for header, accepted in _CODINGS.items():
        coding = request.headers.get(header, accepted[0]).strip().lower()
        if coding not in accepted:
            raise ApiProblem(
                415,
                "unsupported_encoding",
                f"{header} {coding!r} is not accepted (only {accepted[0]}): send the body as it is",
            )
    if not request.body_exists:
        return await handler(request)
    route_reads_body = request.match_info.handler in BODY_HANDLERS
    if request.match_info.http_exception is None and not (
        route_reads_body or request.path.startswith(CLUSTER_PREFIX)
    ):
        # Checked before the handler runs: a take with a body must not take.
        raise bad_request(
            "unexpected_body", f"{request.path} takes no body: its input is the query string"
        )
    timeout = request.app[CONFIG].body_timeout
    late = asyncio.get_running_loop().call_later(timeout, _body_late, request, timeout)
    try:
        return await handler(request)
    finally:
        late.cancel()


def _body_late(request: web.Request, timeout: float) -> None:
    if not request.content.is_eof():
        request.content.set_exception(BodyTimeout(f"the body did not arrive within {timeout:g} s"))


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiProblem:
        raise
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: exc.headers[k] for k in _KEPT_HEADERS if k in exc.headers}
        code = ERROR_CODES.get(exc.status, "bad_request" if exc.status < 500 else "internal")
        message = f"{exc.reason}: {request.method} {request.path}"
        raise ApiProblem(exc.status, code, message, headers) from None
    except BodyTimeout as exc:
        raise ApiProblem(
            408, "request_timeout", str(exc), headers={"Connection": "close"}
        ) from None
    except RecordTooLarge as exc:
        # Bad input that got past the body limits: the log refuses it whole.
        raise ApiProblem(413, "payload_too_large", str(exc)) from None
    except StrandError as exc:
        log.error("storage failed on %s %s: %s", request.method, request.path, exc)
        raise ApiProblem(
            503, "storage_unavailable", str(exc), headers={"Retry-After": "1"}
        ) from None
    except ForumError as exc:
        # The Forum refuses work once it is closing (shutdown).
        raise ApiProblem(503, "unavailable", str(exc), headers={"Retry-After": "1"}) from None
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        raise ApiProblem(500, "internal", "the node failed to answer; its log says why") from None
