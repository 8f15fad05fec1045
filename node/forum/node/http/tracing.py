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
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

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
                "forum.node.operation": route.rsplit("/", 1)[-1],
            },
            set_status_on_exception=False,
        ) as span:
            status = 500
            try:
                response = await handler(request)
                status = response.status
                return response
            except web.HTTPException as exc:
                status = exc.status
                raise
            except asyncio.CancelledError:
                status = 499  # the client went away first (as /metrics counts it)
                raise
            finally:
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))

    return middleware
