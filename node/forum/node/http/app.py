"""The node's aiohttp application: routes, middlewares and the extension seam.

:func:`build_app` wires a :class:`~forum.node.space.forum.Forum` to HTTP. Extensions
(replication) are callables that receive the app before it starts and may add
routes, ``on_startup``/``cleanup_ctx`` handlers and metrics; they reach the
node's parts through the typed keys in :mod:`forum.node.http.keys`.

Middlewares, outermost first::

    tracing        (forum.node.http.tracing) a SERVER span per request, only when a
                   tracer provider is set (forum.node.core.tracing)
    metrics        counts and times every request, rejected ones included
    errors         turns every failure into {"error": code, "message": text}
    browser guard  (forum.node.http.auth) a browser's request from another site's page
                   (Origin, Sec-Fetch-Site), or to a Host that is not the
                   node's on a node without a token: refused, on every route
    authenticate   (forum.node.http.auth) the client token on the API, the cluster key (the
                   cluster secret, else the token) on /v1/cluster/
                   (replication), nothing on the health probes
    bodies         refuses a Content-Encoding (415) and a body on a route
                   that takes none (400); bounds the time a body may take
    budget         (forum.node.http.budget) charges a body to the node's body_budget
                   until it is answered; past it: wait, then 503

What never reaches the app (a request the HTTP parser refuses, a slow
client's connection) is :mod:`forum.node.http.server`'s.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Sequence

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry

from forum.node.api.operations import METRICS, SPEC, STREAM, WATCH
from forum.node.api.status import PeerStatus, Readiness
from forum.node.config.node import NodeConfig
from forum.node.config.placement import Placement
from forum.node.core.errors import ForumError, RecordTooLarge, StrandError
from forum.node.core.tracing import tracer
from forum.node.http.auth import CLUSTER_PREFIX, authenticate, browser_guard, cluster_key
from forum.node.http.bodies import ApiProblem, BodyTimeout, bad_request
from forum.node.http.budget import BodyBudget
from forum.node.http.cluster import MapHolder, misplaced_counter, watching
from forum.node.http.handlers import HANDLERS
from forum.node.http.keys import (
    CLUSTER,
    COMPACTOR,
    CONFIG,
    DESCRIBED,
    FORUM,
    LIMITS,
    LOGIN_PAGE,
    LONG_POLLS,
    METRICS_REGISTRY,
    OPEN_ROUTES,
    PAGES_ROOT,
    PEERS,
    READINESS,
    REPAIR,
    SELF_AUTHENTICATED,
    SPACE,
    STARTED,
    STREAMS,
    WATCH_HUB,
    Extension,
)
from forum.node.http.longpoll import LongPolls
from forum.node.http.metrics import NodeMetrics
from forum.node.http.openapi import openapi_handler
from forum.node.http.ops import Space, problem_of
from forum.node.http.stream import Streams
from forum.node.http.watch import watch
from forum.node.space.compactor import CompactionPolicy, Compactor
from forum.node.space.forum import Forum
from forum.node.space.watch import WatchHub

#: cluster_key and CLUSTER_PREFIX are forum.node.http.auth's, here too for the
#: extensions that import them from the app (replication signs with the key).
__all__ = ["CLUSTER_PREFIX", "ERROR_CODES", "build_app", "cluster_key"]

log = logging.getLogger(__name__)

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
#: The handlers that read a request body; any other route refuses one (a body
#: sent to a take is a client mistake, and the take must not happen anyway).
_BODY_HANDLERS = frozenset(handler for op, handler in HANDLERS.items() if op.body is not None)
#: The codings a request body may come in: none but HTTP/1.1's own framing.
_CODINGS = {"Content-Encoding": ("identity", ""), "Transfer-Encoding": ("chunked",)}
#: Headers of aiohttp's own errors worth keeping when they are rewritten as JSON.
_KEPT_HEADERS = ("Allow", "WWW-Authenticate", "Retry-After")


def build_app(
    forum: Forum,
    config: NodeConfig,
    extensions: Sequence[Extension] = (),
    placement: Placement | None = None,
) -> web.Application:
    """The node's app, serving ``forum`` as ``config`` says, with ``extensions``
    applied; ``placement``: its cluster map and group (forum.node.config.placement)."""
    registry = CollectorRegistry(auto_describe=True)
    long_polls = LongPolls(forum, config.max_waiters)
    compactor = Compactor(
        forum, CompactionPolicy(config.compact_interval, config.compact_dead_ratio)
    )
    metrics = NodeMetrics(registry, forum, long_polls, compactor)
    budget = BodyBudget.of(
        config, backstop=config.max_batch_bytes + _BODY_SLACK, exempt=CLUSTER_PREFIX
    )
    middlewares = [
        metrics.middleware,
        _errors,
        browser_guard(config),
        authenticate,
        _bodies,
        budget.middleware,
    ]
    traces = tracer()
    if traces is not None:  # outermost: its span covers every refusal too
        from forum.node.http.tracing import tracing_middleware  # noqa: PLC0415  (loads opentelemetry: only when on)

        middlewares.insert(0, tracing_middleware(traces))
    app = web.Application(
        middlewares=middlewares,
        # A backstop only: handlers read bodies with their own, tighter limits.
        client_max_size=config.max_batch_bytes + _BODY_SLACK,
    )
    app[FORUM] = forum
    app[CONFIG] = config
    app[LIMITS] = limits = config.api_limits
    holder = None
    misplaced = misplaced_counter(registry)
    if placement is not None and config.cluster_map is not None:
        holder = app[CLUSTER] = MapHolder(
            config.cluster_map, placement, config.cluster_secret, misplaced
        )
        app.on_response_prepare.append(holder.on_response)
        app.cleanup_ctx.append(functools.partial(watching, holder))
    app[SPACE] = space = Space(forum, long_polls, limits, holder)
    app[STREAMS] = streams = Streams(
        space,
        max_frame=config.max_batch_bytes + _BODY_SLACK,
        shutdown_timeout=config.shutdown_timeout,
        budget=budget,
    )
    app[METRICS_REGISTRY] = registry
    registry.register(budget)
    app[LONG_POLLS] = long_polls
    app[COMPACTOR] = compactor
    app[PEERS] = _no_peers
    app[READINESS] = Readiness
    app[REPAIR] = _no_repair
    app[SELF_AUTHENTICATED] = frozenset()
    app[OPEN_ROUTES] = frozenset()
    app[LOGIN_PAGE] = ""
    app[PAGES_ROOT] = ""
    app[DESCRIBED] = {}
    app[STARTED] = time.monotonic()

    # Every operation of forum.node.api.model, as declared there (so the OpenAPI
    # document, made from the same table, describes exactly what is served).
    handlers = {
        **HANDLERS,
        SPEC: openapi_handler,
        METRICS: metrics.handle,
        STREAM: streams.handle,
        WATCH: watch,
    }
    for operation, handler in handlers.items():
        if operation.method == "GET":
            app.router.add_get(operation.path, handler)  # and HEAD, as aiohttp does
        else:
            app.router.add_route(operation.method, operation.path, handler)

    _add_watch(app, forum, config)  # first: its streams end at once on shutdown
    app.cleanup_ctx.append(_listening)
    # on_shutdown runs after the socket closes and before in-flight requests
    # are awaited: long polls end now instead of holding up the shutdown.
    app.on_shutdown.append(_drain)
    for extension in extensions:
        extension(app)
    return app


def _add_watch(app: web.Application, forum: Forum, config: NodeConfig) -> None:
    """The watch hub: it listens while the app runs, and its streams end on
    shutdown (before in-flight requests are awaited: they never end else)."""
    app[WATCH_HUB] = WatchHub(
        forum,
        buffer=config.watch_buffer,
        queue=config.watch_queue,
        queue_bytes=config.watch_queue_bytes,
        heartbeat=config.watch_heartbeat,
    )
    app.cleanup_ctx.append(_watching)
    app.on_shutdown.append(_end_watches)


async def _watching(app: web.Application) -> AsyncIterator[None]:
    async with app[WATCH_HUB]:
        yield


async def _end_watches(app: web.Application) -> None:
    app[WATCH_HUB].close()


def _no_peers() -> list[PeerStatus]:
    return []


def _no_repair() -> None:
    return None


async def _listening(app: web.Application) -> AsyncIterator[None]:
    async with app[LONG_POLLS], app[COMPACTOR] as compactor:
        compactor.start()
        yield


async def _drain(app: web.Application) -> None:
    app[LONG_POLLS].drain()
    # After the long polls: the requests in flight on a stream answer at once.
    await app[STREAMS].drain()


@web.middleware
async def _bodies(request: web.Request, handler: Handler) -> web.StreamResponse:
    # The server does not inflate bodies (forum.node.http.server), so a compressed
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
    route_reads_body = request.match_info.handler in _BODY_HANDLERS
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
    except ForumError as exc:
        if isinstance(exc, StrandError) and not isinstance(exc, RecordTooLarge):
            log.error("storage failed on %s %s: %s", request.method, request.path, exc)
        raise problem_of(exc) from None
    except Exception as exc:
        log.exception("unhandled error on %s %s", request.method, request.path)
        raise problem_of(exc) from None
