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
from forum.cli_otel import add_otel, otel_export
from forum.dashboard import dashboard
from forum.node.config.node import DEFAULT_LISTEN, REPEATED_FLAGS, NodeConfig
from forum.node.core.errors import ClusterMapError, DataDirLocked, ForumError
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
        async with otel_export(args, "forum-node"):  # before the app: its middleware
            return await serve(config, extensions, on_listening=announce, repair=args.repair)
    except OSError as exc:
        raise UsageError(f"cannot listen on {config.listen}: {exc.strerror}") from None
    except (DataDirLocked, ClusterMapError) as exc:  # a configuration mistake
        raise UsageError(str(exc)) from None
    except ForumError as exc:
        print(f"forum serve: {exc}", file=sys.stderr)
        return EXIT_NODE


#: The options of ``forum serve``, in ``--help``'s order: the flag, its metavar
#: (a tuple: the values it may take; ``None``: a switch) and its help. A flag
#: of ``REPEATED_FLAGS`` may be given more than once.
OPTIONS: tuple[tuple[str, str | tuple[str, ...] | None, str], ...] = (
    ("--config", "FILE",
     "a TOML file of options (or $FORUM_CONFIG)"),
    ("--listen", "HOST:PORT",
     f"where to listen (default {DEFAULT_LISTEN})"),
    ("--data-dir", "PATH",
     "where the Strand lives (default ./forum-data)"),
    ("--node-id", "NAME",
     "the node's name (default: the host name)"),
    ("--peer", "URL",
     "a seed peer's URL (repeatable)"),
    ("--advertise", "URL",
     "the URL peers should use to reach this node"),
    ("--cluster-map", "FILE",
     "the cluster map (TOML or JSON) of a scaled-out cluster: its replica groups "
     "(docs/scaling.md); without --peer, this node's group's other members are its peers"),
    ("--group", "ID",
     "this node's replica group in the cluster map (default: the group listing --advertise)"),
    ("--fsync", ("always", "interval", "never"),
     "when appends reach the disk (default always: no acknowledged write lost)"),
    ("--fsync-interval", "SECONDS",
     "with --fsync interval, seconds between fsyncs (default 0.05)"),
    ("--segment-bytes", "BYTES",
     "size of a Strand segment file (default 64MiB)"),
    ("--token", "SECRET",
     "clients must send 'Authorization: Bearer SECRET'"),
    ("--read-token", "SECRET",
     "a second token that may only read (GET: the dashboard, status); needs --token"),
    ("--cluster-secret", "SECRET",
     "peers must present this secret"),
    ("--allow-origin", "ORIGIN",
     "an origin (scheme://host[:port]) besides the node's own whose pages may call it from a "
     "browser, e.g. a proxy's https://forum.example.com (repeatable)"),
    ("--allow-host", "NAME",
     "a host name besides its own (loopback, listen, advertise, peers) that a node without a "
     "token answers to (repeatable)"),
    ("--lens-url", "URL",
     "the Lens's Redis (redis://HOST:PORT/DB) the dashboard shows jobs and workers from; the "
     "node itself does not use it (default: none)"),
    ("--max-payload", "BYTES",
     "largest tuple (default 1MiB)"),
    ("--max-batch", "N",
     "most tuples in one batch (default 10000)"),
    ("--max-batch-bytes", "BYTES",
     "largest batch body (default 64MiB)"),
    ("--body-budget", "BYTES",
     "most bytes of request bodies held at once; past it requests wait, then get 503 (default "
     "256MiB)"),
    ("--body-budget-wait", "SECONDS",
     "how long a request over --body-budget waits for room (default 5)"),
    ("--max-wait", "SECONDS",
     "longest long-poll wait (default 60)"),
    ("--max-waiters", "N",
     "most requests waiting at once (default 10000)"),
    ("--remote-delay", "SECONDS",
     "a peer's tuple waits this times the node's turn for it before it can be taken here "
     "(default 0.01)"),
    ("--remote-hold", "SECONDS",
     "a peer's tuple no taker here wanted at its turn is held back this long, taken only when "
     "nothing live matches (default 2)"),
    ("--ack-copies", "N",
     "members (this node one) that must hold a write durably before it is acknowledged, when "
     "the write gives no copies (default 1: this node's fsync alone)"),
    ("--copies-timeout", "SECONDS",
     "how long a write waits for its copies before answering how many hold it (default 5)"),
    ("--shutdown-timeout", "SECONDS",
     "how long in-flight requests get on shutdown (default 10)"),
    ("--idle-timeout", "SECONDS",
     "close a connection that sends no whole request head this long (default 30)"),
    ("--body-timeout", "SECONDS",
     "longest a request body may take (default 60)"),
    ("--forget-after", "SECONDS",
     "a member unheard this long stops holding compaction back (default 86400)"),
    ("--compact-interval", "SECONDS",
     "seconds between looks of the background compactor; 0 turns it off (default 10)"),
    ("--compact-dead-ratio", "SHARE",
     "dead share of the Strand's entries that starts a compaction (default 0.5)"),
    ("--max-connections", "N",
     "most client connections at once (default: the open-file limit less 64)"),
    ("--watch-buffer", "N",
     "latest events kept for watchers that resume (default 10000)"),
    ("--watch-queue", "N",
     "events a watcher may fall behind before it is cut off (default 10000)"),
    ("--watch-heartbeat", "SECONDS",
     "seconds between keep-alive comments on an idle watch (default 5)"),
    ("--limits", "PREFIX=N,...",
     "the most live tuples each prefix may hold here; writes past it get 429 (default: none)"),
    ("--repair", None,
     "open a damaged data directory anyway (the damaged files are set aside) and fetch what it "
     "lost from the peers before serving; see docs/operations.md"),
    ("--log-format", ("text", "json"),
     "log lines as text or JSON"),
    ("--log-level", "LEVEL",
     "DEBUG, INFO (default), WARNING, ERROR"),
)  # fmt: skip


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
    for flag, metavar, text in OPTIONS:
        if isinstance(metavar, tuple):
            parser.add_argument(flag, choices=metavar, help=text)
        elif flag in REPEATED_FLAGS.values():
            parser.add_argument(flag, metavar=metavar, action="append", help=text)
        elif metavar is None:
            parser.add_argument(flag, action="store_true", default=False, help=text)
        else:
            parser.add_argument(flag, metavar=metavar, help=text)
    add_otel(parser)
    parser.set_defaults(func=run_serve)
