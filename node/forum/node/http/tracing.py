"""A SERVER span per HTTP request, when tracing is on (:mod:`forum.node.core.tracing`).

:func:`build_app` puts :func:`tracing_middleware` outermost only when a
tracer provider is set as the app is built, so a node without one runs no
code of it at all. Each span is named ``<METHOD> <route>`` (the route's
template, as the HTTP semantic conventions name server spans, and as
``/metrics`` labels requests), its parent the caller's context from the
``traceparent`` header (:class:`forum.node.client.remote.ForumClient` sends
it over HTTP), its status an error for a 5xx answer. The stream's and the
watch's upgrade requests are not traced: each is a connection that lasts as
long as its client, not an operation.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from forum.node.api.operations import STREAM, WATCH
from forum.node.core.tracing import parent_of
from forum.node.http.metrics import route_label

#: The routes whose requests are connections, not operations: no span.
_CONNECTIONS = frozenset({STREAM.path, WATCH.path})


def tracing_middleware(tracer: Tracer) -> Middleware:
    """The middleware that traces each request with ``tracer``."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = route_label(request)
        if route in _CONNECTIONS:
            return await handler(request)
        parent = parent_of(
            {name: request.headers[name] for name in ("traceparent", "tracestate")
             if name in request.headers}
        )  # fmt: skip
        with tracer.start_as_current_span(
            f"{request.method} {route}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": request.method,
                "http.route": route,
                "url.path": request.path,
            },
            # A 4xx is the caller's mistake, not the node's failure (HTTP's conventions):
            # the status is set from the answer alone.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                _answered(span, exc.status)
                raise
            except asyncio.CancelledError:
                _answered(span, 499)  # the client went away first (as /metrics counts it)
                raise
            _answered(span, response.status)
            return response

    return middleware


def _answered(span: Span, status: int) -> None:
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))
