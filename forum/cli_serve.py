"""``forum serve``: one node, with replication plugged in.

This is the composition root of a node: :func:`node_extensions` is where the
``forum.replication`` and ``forum.dashboard`` packages are wired into the
``forum.node`` package's app (``forum.node`` itself knows nothing of either).
Neither imports Redis or the worker runtime, so a node runs without them
installed; the dashboard loads the task layer only when given ``--lens-url``
(its Jobs and Workers panels).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys

from forum.cli_args import EXIT_NODE, UsageError
from forum.dashboard import dashboard
from forum.node.config.node import DEFAULT_LISTEN, REPEATED_FLAGS, NodeConfig
from forum.node.core.errors import DataDirLocked, ForumError
from forum.node.http.keys import Extension
from forum.node.serve import configure_logging, serve
from forum.replication import ReplicationConfig
from forum.replication.extension import configured


def node_extensions(config: NodeConfig) -> list[Extension]:
    """What ``forum serve`` adds to the node's app: replication, tuned from
    ``FORUM_REPL_*`` (read now, so a misspelt variable is a ``ValueError``
    before anything, the data directory, is created), and the dashboard at
    ``/ui`` (after replication: it shows the peers replication knows)."""
    return [configured(ReplicationConfig.from_env()), dashboard(lens_url=config.lens_url)]


def serve_flags(args: argparse.Namespace) -> dict[str, object]:
    """The ``NodeConfig`` keys that ``forum serve``'s flags set (the top layer
    over the file and the environment; see :mod:`forum.node.config.node`)."""
    flags: dict[str, object] = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(NodeConfig)
        if getattr(args, f.name, None) is not None
    }
    for key, flag in REPEATED_FLAGS.items():
        given = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if given:
            flags[key] = given
    return flags


async def run_serve(args: argparse.Namespace) -> int:
    """``forum serve``: run the node until SIGTERM/SIGINT; exit 0."""
    flags = serve_flags(args)
    try:
        config = await asyncio.to_thread(NodeConfig.load, args.config, os.environ, flags)
        extensions = node_extensions(config)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    configure_logging(config)

    def announce(url: str) -> None:
        print(f"forum: node listening on {url} (data in {config.data_dir})", flush=True)

    try:
        return await serve(config, extensions, on_listening=announce, repair=args.repair)
    except OSError as exc:
        raise UsageError(f"cannot listen on {config.listen}: {exc.strerror}") from None
    except DataDirLocked as exc:  # another node runs on it: a configuration mistake
        raise UsageError(str(exc)) from None
    except ForumError as exc:
        print(f"forum serve: {exc}", file=sys.stderr)
        return EXIT_NODE


def _add_watch_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--watch-buffer",
        metavar="N",
        help="latest events kept for watchers that resume (default 10000)",
    )
    add(
        "--watch-queue",
        metavar="N",
        help="events a watcher may fall behind before it is cut off (default 10000)",
    )
    add(
        "--watch-heartbeat",
        metavar="SECONDS",
        help="seconds between keep-alive comments on an idle watch (default 5)",
    )


def add_serve(parser: argparse.ArgumentParser) -> None:
    """The options of ``forum serve``."""
    parser.description = (
        "Run one Forum node: its Strand (log) in --data-dir and the HTTP API "
        "on --listen. Each option may also be set in the TOML file given to --config "
        "(same key, with underscores) or as FORUM_<KEY> in the environment; flags win. "
        "SIGTERM or SIGINT drains in-flight requests and exits 0."
    )
    parser.epilog = (
        "example:\n  forum serve --listen 127.0.0.1:7070 --data-dir ./forum-data "
        "--node-id a\n  FORUM_TOKEN=s3cret forum serve --fsync interval"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add = parser.add_argument
    add("--config", metavar="FILE", help="a TOML file of options (or $FORUM_CONFIG)")
    add("--listen", metavar="HOST:PORT", help=f"where to listen (default {DEFAULT_LISTEN})")
    add("--data-dir", metavar="PATH", help="where the Strand lives (default ./forum-data)")
    add("--node-id", metavar="NAME", help="the node's name (default: the host name)")
    add("--peer", metavar="URL", action="append", help="a seed peer's URL (repeatable)")
    add("--advertise", metavar="URL", help="the URL peers should use to reach this node")
    add(
        "--fsync",
        choices=("always", "interval", "never"),
        help="when appends reach the disk (default always: no acknowledged write lost)",
    )
    add(
        "--fsync-interval",
        metavar="SECONDS",
        help="with --fsync interval, seconds between fsyncs (default 0.05)",
    )
    add("--segment-bytes", metavar="BYTES", help="size of a Strand segment file (default 64MiB)")
    add("--token", metavar="SECRET", help="clients must send 'Authorization: Bearer SECRET'")
    add(
        "--read-token",
        metavar="SECRET",
        help="a second token that may only read (GET: the dashboard, status); needs --token",
    )
    add("--cluster-secret", metavar="SECRET", help="peers must present this secret")
    add(
        "--allow-origin",
        metavar="ORIGIN",
        action="append",
        help="an origin (scheme://host[:port]) besides the node's own whose pages may call it "
        "from a browser, e.g. a proxy's https://forum.example.com (repeatable)",
    )
    add(
        "--allow-host",
        metavar="NAME",
        action="append",
        help="a host name besides its own (loopback, listen, advertise, peers) that a node "
        "without a token answers to (repeatable)",
    )
    add(
        "--lens-url",
        metavar="URL",
        help="the Lens's Redis (redis://HOST:PORT/DB) the dashboard shows jobs and workers "
        "from; the node itself does not use it (default: none)",
    )
    add("--max-payload", metavar="BYTES", help="largest tuple (default 1MiB)")
    add("--max-batch", metavar="N", help="most tuples in one batch (default 10000)")
    add("--max-batch-bytes", metavar="BYTES", help="largest batch body (default 64MiB)")
    add(
        "--body-budget",
        metavar="BYTES",
        help="most bytes of request bodies held at once; past it requests wait, "
        "then get 503 (default 256MiB)",
    )
    add(
        "--body-budget-wait",
        metavar="SECONDS",
        help="how long a request over --body-budget waits for room (default 5)",
    )
    add("--max-wait", metavar="SECONDS", help="longest long-poll wait (default 60)")
    add("--max-waiters", metavar="N", help="most requests waiting at once (default 10000)")
    add(
        "--remote-delay",
        metavar="SECONDS",
        help="a peer's tuple waits this times the node's turn for it before it can be "
        "taken here (default 0.01)",
    )
    add(
        "--remote-hold",
        metavar="SECONDS",
        help="a peer's tuple no taker here wanted at its turn is held back this long, "
        "taken only when nothing live matches (default 2)",
    )
    add(
        "--shutdown-timeout",
        metavar="SECONDS",
        help="how long in-flight requests get on shutdown (default 10)",
    )
    add(
        "--idle-timeout",
        metavar="SECONDS",
        help="close a connection that sends no whole request head this long (default 30)",
    )
    add("--body-timeout", metavar="SECONDS", help="longest a request body may take (default 60)")
    add(
        "--forget-after",
        metavar="SECONDS",
        help="a member unheard this long stops holding compaction back (default 86400)",
    )
    add(
        "--compact-interval",
        metavar="SECONDS",
        help="seconds between looks of the background compactor; 0 turns it off (default 10)",
    )
    add(
        "--compact-dead-ratio",
        metavar="SHARE",
        help="dead share of the Strand's entries that starts a compaction (default 0.5)",
    )
    add(
        "--max-connections",
        metavar="N",
        help="most client connections at once (default: the open-file limit less 64)",
    )
    _add_watch_options(parser)
    add(
        "--limits",
        metavar="PREFIX=N,...",
        help="the most live tuples each prefix may hold here; writes past it get 429 "
        "(default: none)",
    )
    add(
        "--repair",
        action="store_true",
        default=False,
        help="open a damaged data directory anyway (the damaged files are set aside) and "
        "fetch what it lost from the peers before serving; see docs/operations.md",
    )
    add("--log-format", choices=("text", "json"), help="log lines as text or JSON")
    add("--log-level", metavar="LEVEL", help="DEBUG, INFO (default), WARNING, ERROR")
    parser.set_defaults(func=run_serve)
