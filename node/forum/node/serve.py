"""Running one node: open the Strand, serve the app, drain on SIGTERM/SIGINT.

Start-up::

    check the address can be bound -> open the Strand (replays the log) -> build
    the app -> start the extensions -> listen -> "listening on ..."

The check comes first so that a node that cannot listen (the port in use)
says so and creates nothing: no data directory left behind by a node that
never ran. It binds and lets go (the Strand's replay may take a while, and
the socket is made by the listening site itself), so a port taken in between
is still the same ``OSError``, after the Strand is open.
    (and a warning when the node is reachable beyond loopback with no --token)

With ``repair`` (``forum serve --repair``) a damaged data directory opens
anyway (the Strand sets the damaged files aside, :mod:`forum.node.storage.damage`), and
replication repairs it from the peers while the extensions start, so the
node listens only once it holds what its peers could give back
(:mod:`forum.replication.repair`). SIGTERM during that start-up stops the node.

Shutdown, on SIGTERM or SIGINT::

    t0  stop listening (new connections are refused; /readyz would say 503)
    t1  long polls end at once and answer 204
    t2  in-flight requests get ``shutdown_timeout`` seconds to finish
    t3  close the Strand (pending appends made durable), exit 0
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TextIO

from aiohttp import web

from forum.node.config.node import NodeConfig
from forum.node.config.placement import placed, placement
from forum.node.http.app import build_app
from forum.node.http.keys import Extension
from forum.node.http.server import NodeRunner
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig

log = logging.getLogger("forum.serve")


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document)


def configure_logging(config: NodeConfig, stream: TextIO = sys.stderr) -> None:
    handler = logging.StreamHandler(stream)
    if config.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.log_level.upper())


def strand_config(config: NodeConfig, repair: bool = False) -> StrandConfig:
    strand = (
        StrandConfig()
        .with_storage(config.data_dir)
        .with_fsync(config.fsync, config.fsync_interval)
        .with_segment_bytes(config.segment_bytes)
        .with_repair(repair)
    )
    return strand if config.node_id is None else strand.with_node_name(config.node_id)


async def serve(
    config: NodeConfig,
    extensions: Sequence[Extension] = (),
    *,
    stop: asyncio.Event | None = None,
    on_listening: Callable[[str], None] | None = None,
    repair: bool = False,
) -> int:
    """Run a node until ``stop`` is set or SIGTERM/SIGINT arrives; returns the exit code.

    ``on_listening`` is called with the URL once the node accepts connections.
    ``repair``: open a damaged data directory and repair it (module docstring).
    """
    # The map first: a wrong one is one line, before a data directory is made.
    where = placement(config)
    config = placed(config, where)
    await asyncio.to_thread(check_bindable, config.host or None, config.port)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    async with contextlib.AsyncExitStack() as stack:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, _stop_on_signal, stop, signum)
            stack.callback(loop.remove_signal_handler, signum)
        strand = await stack.enter_async_context(await Strand.open(strand_config(config, repair)))
        forum = await stack.enter_async_context(
            Forum(
                strand,
                config.remote_delay,
                config.remote_hold,
                limits=config.prefix_limits,
                ack_copies=config.ack_copies,
                copies_timeout=config.copies_timeout,
            )
        )
        app = build_app(forum, config, extensions, where)
        # Timeouts, the connection cap and JSON parser errors: forum.node.http.server.
        runner = NodeRunner(app, config)
        if not await _until_stopped(runner.setup(), stop):
            log.info("stopped while starting")
            return 0
        stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, config.host or None, config.port, reuse_address=True)
        await site.start()
        url = _bound_url(runner, config)
        stats = forum.stats()
        log.info(
            "node %s (origin %s) listening on %s; data in %s, fsync %s, %d live tuples",
            strand.config.node_name,
            stats.origin,
            url,
            config.data_dir,
            config.fsync,
            stats.live,
        )
        warning = exposure_warning(config)
        if warning is not None:
            log.warning("%s", warning)
        if on_listening is not None:
            on_listening(url)
        await stop.wait()
        log.info("shutting down: draining requests (up to %ss)", config.shutdown_timeout)
    log.info("stopped")
    return 0


def check_bindable(host: str | None, port: int) -> None:
    """``OSError`` (``EADDRINUSE``, say) unless each address ``host:port``
    resolves to can be bound now, as the listening site will bind it
    (``SO_REUSEADDR``; IPv6 sockets IPv6 only, beside the IPv4 ones)."""
    if port == 0:
        return  # the kernel picks a free one
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            probe.bind(address)


def exposure_warning(config: NodeConfig) -> str | None:
    """What to warn about a node that listens beyond loopback without a token, if so."""
    if config.token is not None or _loopback(config.host):
        return None
    where = f"listening on {config.host or '0.0.0.0'}"
    if config.cluster_secret is None:
        return (
            f"{where} with no --token or --cluster-secret: anyone who can reach the port "
            "can read, take and inject tuples"
        )
    return (
        f"{where} with no --token: anyone who can reach the port can read, take and write "
        "tuples through the API"
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a wildcard ("") or a host name: it may be reachable from anywhere
        return False


async def _until_stopped(start: Awaitable[None], stop: asyncio.Event) -> bool:
    """Run ``start`` unless ``stop`` is set first (a repair waiting for peers
    must not outlast a SIGTERM); ``False`` if it was stopped."""
    starting = asyncio.ensure_future(start)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if starting.done():
        await starting
        return True
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    return False


def _stop_on_signal(stop: asyncio.Event, signum: int) -> None:
    log.info("received %s", signal.Signals(signum).name)
    stop.set()


def _bound_url(runner: web.AppRunner, config: NodeConfig) -> str:
    """The URL of the socket actually bound (``listen`` may have asked for port 0)."""
    addresses = runner.addresses
    port = addresses[0][1] if addresses else config.port
    host = config.host or "0.0.0.0"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"
