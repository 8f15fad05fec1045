"""The node's HTTP server below the app: what aiohttp answers on its own, and
how many connections, held how long.

Two things never reach the app's middlewares, so they are handled here:

* Requests the HTTP parser refuses (a header flood, an oversize header or
  request line, a bad ``Content-Length``, bytes that are not HTTP) and the
  low-level 500/504. aiohttp answers them from ``RequestHandler.handle_error``
  with ``text/plain``; :class:`_JsonErrors` overrides that one method so they
  carry the API's ``{"error", "message"}`` body too. aiohttp offers no other
  hook (middlewares never see these, aio-libs/aiohttp#3287), and overriding
  the method keeps its parser, logging and connection closing as they are:
  only the body changes.
* Slow and idle clients. Each connection is a file descriptor, and a node out
  of descriptors refuses everyone. So: a connection that has not sent a whole
  request head within ``idle_timeout`` seconds of opening (or of its last
  answer) is closed (aiohttp's keep-alive timer, which data does not reset);
  a body gets ``body_timeout`` (the app's ``bodies`` middleware); and at most
  ``max_connections`` are open. Past the cap a new connection pushes out the
  oldest connection that never sent a whole request head (a slow-loris
  socket), or, when there is none, is closed at once, so the node keeps the
  descriptors it needs for its Strand and its peers.

:class:`NodeRunner` is ``web.AppRunner`` with that server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader

from forum.node.api.model import JSON
from forum.node.config.node import NodeConfig
from forum.node.http.app import ERROR_CODES
from forum.node.http.keys import STREAMS

log = logging.getLogger(__name__)

#: Descriptors kept back from the connection cap: the Strand's segments, the
#: peers' connections, the listening socket, logs.
FD_RESERVE = 64
#: The longest parser message quoted back to the client.
_MESSAGE_CHARS = 200


def connection_limit(config: NodeConfig) -> int:
    """``max_connections``, or the open-file limit less :data:`FD_RESERVE`."""
    if config.max_connections is not None:
        return config.max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(soft - FD_RESERVE, 16)


class _JsonErrors(web.RequestHandler):
    """aiohttp's connection handler, answering its own errors in the API's JSON."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # aiohttp's handle_error logs, and raises if an answer was already under way.
        super().handle_error(request, status, exc, message)
        code = ERROR_CODES.get(status, "bad_request" if status < 500 else "internal")
        if status >= 500 or not message:
            text = "the node failed to answer; its log says why"
        else:
            text = " ".join(message.split())[:_MESSAGE_CHARS]
        response = web.Response(
            status=status, text=json.dumps({"error": code, "message": text}), content_type=JSON
        )
        response.force_close()
        return response


class _NodeServer(web.Server):
    """aiohttp's low-level server with :class:`_JsonErrors` connections and a cap."""

    def __init__(
        self,
        app_server: web.Server,
        max_connections: int,
        streaming: Callable[[web.RequestHandler], bool],
        **kwargs: Any,
    ) -> None:
        super().__init__(
            app_server.request_handler,
            request_factory=self._seen_head,
            handler_cancellation=app_server.handler_cancellation,
            **kwargs,
        )
        self._app_request = app_server.request_factory
        self._handler_kwargs = kwargs
        self._max_connections = max_connections
        self._streaming = streaming
        #: Open connections, oldest first, each with whether it has sent a whole head.
        self._open: dict[web.RequestHandler, bool] = {}

    def __call__(self) -> web.RequestHandler:
        return _JsonErrors(self, loop=asyncio.get_running_loop(), **self._handler_kwargs)

    def _seen_head(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: web.RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        if protocol in self._open:
            self._open[protocol] = True
        return self._app_request(message, payload, protocol, writer, task)

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self._open[handler] = False
        if len(self._open) <= self._max_connections:
            return
        silent = next((c for c, talked in self._open.items() if not talked), handler)
        log.warning(
            "over max_connections (%d): closing %s",
            self._max_connections,
            "the new connection" if silent is handler else "the oldest that never sent a request",
        )
        del self._open[silent]
        silent.force_close()

    def pre_shutdown(self) -> None:
        """Stop reading new requests on every connection but the streams'.

        aiohttp's own closes every connection, and a closed one drops what it
        is sent: a stream's requests went unanswered from SIGTERM on. A
        stream's connection reads on until ``Streams.drain`` has answered
        what is in flight (a new request: 503) and closed it with 1001.
        """
        for connection in self._open:
            if not self._streaming(connection):
                connection.close()

    def connection_lost(
        self, handler: web.RequestHandler, exc: BaseException | None = None
    ) -> None:
        self._open.pop(handler, None)
        super().connection_lost(handler, exc)


class NodeRunner(web.AppRunner):
    """``web.AppRunner`` serving through :class:`_NodeServer`, bounded as ``config`` says.

    Long polls whose client left are cancelled (``handler_cancellation``)
    instead of taking a tuple nobody will receive; the Forum puts back what it
    handed over.
    """

    def __init__(self, app: web.Application, config: NodeConfig) -> None:
        self._handler_kwargs: dict[str, Any] = {
            "access_log": None,
            # Bodies are taken as sent: an inflated body could pass every limit.
            "auto_decompress": False,
            "keepalive_timeout": config.idle_timeout,
        }
        self._max_connections = connection_limit(config)
        super().__init__(
            app,
            handle_signals=False,
            shutdown_timeout=config.shutdown_timeout,
            handler_cancellation=True,
            **self._handler_kwargs,
        )

    async def _make_server(self) -> web.Server:
        # AppRunner's own starts the app; its server lends the app's handler.
        app_server = await super()._make_server()
        streaming = self.app[STREAMS].holds
        return _NodeServer(app_server, self._max_connections, streaming, **self._handler_kwargs)
