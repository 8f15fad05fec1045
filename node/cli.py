"""The ``forum`` command: the composition root that wires node, replication and workers.

This is the only module in ``node/`` that may import ``replication`` or
``coordinator``; it does so inside functions, so ``forum serve`` does not
import Redis and a node runs without the worker runtime installed.

Exit codes: 0 done; 1 nothing matched (``take``, ``read``); 2 bad usage or
configuration; 3 the node could not be reached or refused the request.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import uvloop

from node.cli_args import EXIT_USAGE, NODE_URL, SECONDS_OR_ZERO, OneLineParser, UsageError
from node.client import ForumClient
from node.config import DEFAULT_LISTEN, NodeConfig
from node.errors import ClientError, DataDirLocked, ForumError
from node.serve import configure_logging, serve
from node.space import Pattern
from node.web_keys import Extension
from node.web_status import PeerStatus

EXIT_OK = 0
EXIT_NO_MATCH = 1
EXIT_NODE = 3

DEFAULT_NODE = f"http://{DEFAULT_LISTEN}"
#: Subcommands other packages add, by the module whose ``register`` adds them.
#: They are imported only when run (they need Redis), never for ``forum serve``.
LAZY_COMMANDS = {
    "worker": ("coordinator.cli", "run workers that take jobs from a node and claim them in Redis"),
    "dead": ("coordinator.cli", "list or requeue dead-lettered jobs"),
    "cluster": ("deploy.cluster", "run a local cluster of real processes (nodes, Redis, workers)"),
}

Command = Callable[[argparse.Namespace], Awaitable[int]]


def node_extensions(config: NodeConfig) -> list[Extension]:
    """What ``forum serve`` adds to the node's app. Replication plugs in here,
    tuned from ``FORUM_REPL_*``: read now, so a misspelt variable is a
    ``ValueError`` before anything (the data directory) is created."""
    from replication import ReplicationConfig  # noqa: PLC0415 - only `forum serve` needs it
    from replication.extension import configured  # noqa: PLC0415

    return [configured(ReplicationConfig.from_env())]


# -- serve -------------------------------------------------------------------------


def serve_flags(args: argparse.Namespace) -> dict[str, object]:
    """The ``NodeConfig`` keys that ``forum serve``'s flags set (the top layer
    over the file and the environment; see :mod:`node.config`)."""
    flags: dict[str, object] = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(NodeConfig)
        if getattr(args, f.name, None) is not None
    }
    if args.peer:
        flags["peers"] = args.peer
    return flags


async def _serve(args: argparse.Namespace) -> int:
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
        return await serve(config, extensions, on_listening=announce)
    except OSError as exc:
        raise UsageError(f"cannot listen on {config.listen}: {exc.strerror}") from None
    except DataDirLocked as exc:  # another node runs on it: a configuration mistake
        raise UsageError(str(exc)) from None
    except ForumError as exc:
        print(f"forum serve: {exc}", file=sys.stderr)
        return EXIT_NODE


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "serve",
        help="run a node",
        description="Run one Forum node: its Strand (log) in --data-dir and the HTTP API "
        "on --listen. Each option may also be set in the TOML file given to --config "
        "(same key, with underscores) or as FORUM_<KEY> in the environment; flags win. "
        "SIGTERM or SIGINT drains in-flight requests and exits 0.",
        epilog="example:\n  forum serve --listen 127.0.0.1:7070 --data-dir ./forum-data "
        "--node-id a\n  FORUM_TOKEN=s3cret forum serve --fsync interval",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    add("--cluster-secret", metavar="SECRET", help="peers must present this secret")
    add("--max-payload", metavar="BYTES", help="largest tuple (default 1MiB)")
    add("--max-batch", metavar="N", help="most tuples in one batch (default 10000)")
    add("--max-batch-bytes", metavar="BYTES", help="largest batch body (default 64MiB)")
    add("--max-wait", metavar="SECONDS", help="longest long-poll wait (default 60)")
    add("--max-waiters", metavar="N", help="most requests waiting at once (default 10000)")
    add(
        "--remote-delay",
        metavar="SECONDS",
        help="a peer's tuple waits 1-4x this before it can be taken here (default 0.01)",
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
        "--max-connections",
        metavar="N",
        help="most client connections at once (default: the open-file limit less 64)",
    )
    add("--log-format", choices=("text", "json"), help="log lines as text or JSON")
    add("--log-level", metavar="LEVEL", help="DEBUG, INFO (default), WARNING, ERROR")
    parser.set_defaults(func=_serve)


# -- client commands ---------------------------------------------------------------


def _client_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    example: str,
    func: Command,
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}.",
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--node",
        metavar="URL",
        type=NODE_URL,
        default=os.environ.get("FORUM_NODE", DEFAULT_NODE),
        help=f"the node's URL (default $FORUM_NODE or {DEFAULT_NODE})",
    )
    parser.add_argument(
        "--token",
        metavar="SECRET",
        default=os.environ.get("FORUM_TOKEN"),
        help="the node's token (default $FORUM_TOKEN)",
    )
    parser.set_defaults(func=func)
    return parser


def _pattern(args: argparse.Namespace) -> Pattern:
    return Pattern(os.fsencode(args.prefix))


async def _write(args: argparse.Namespace) -> int:
    if args.payload == "-":
        payload = await asyncio.to_thread(sys.stdin.buffer.read)
    else:
        payload = os.fsencode(args.payload)
    async with ForumClient(args.node, args.token) as space:
        print(await space.write(payload))
    return EXIT_OK


async def _take_or_read(args: argparse.Namespace) -> int:
    async with ForumClient(args.node, args.token) as space:
        if args.command == "take":
            found = await space.take_entry(_pattern(args), timeout=args.wait)
        else:
            found = await space.read_entry(_pattern(args), timeout=args.wait)
    if found is None:
        return EXIT_NO_MATCH
    out = sys.stdout.buffer
    out.write(found.payload)
    if out.isatty():
        out.write(b"\n")
    out.flush()
    return EXIT_OK


async def _count(args: argparse.Namespace) -> int:
    async with ForumClient(args.node, args.token) as space:
        print(await space.count(_pattern(args)))
    return EXIT_OK


async def _status(args: argparse.Namespace) -> int:
    async with ForumClient(args.node, args.token) as space:
        status = await space.status()
    rows = [
        ("node", status.node_id),
        ("origin", status.origin),
        ("url", status.advertise),
        ("version", status.version),
        ("uptime", f"{status.uptime_seconds:.0f} s"),
        ("live tuples", str(status.live)),
        ("entries", str(status.entries)),
        ("strand", f"{_size(status.strand_bytes)} in {status.segments} segment(s)"),
        ("fsync", status.fsync),
        ("writes / takes", f"{status.writes} / {status.takes}"),
        ("double takes", str(status.double_takes)),
        ("waiting", f"{status.waiting_takers} takers, {status.long_polls} long polls"),
        ("reserved", f"{status.reserved} tuples"),
        ("torn tails cut", str(status.tails_cut)),
        ("peers", str(len(status.peers)) if status.peers else "none"),
    ]
    print(_table(rows))
    if status.peers:
        columns = sorted(field.name for field in dataclasses.fields(PeerStatus))
        print()
        cells = [tuple(str(getattr(peer, c)) for c in columns) for peer in status.peers]
        print(_table([tuple(columns), *cells]))
    return EXIT_OK


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


def _add_client_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    write = _client_parser(
        commands,
        "write",
        "write a tuple and print its entry id",
        "forum write 'job-42 resize photo.jpg'\n  cat job.bin | forum write -",
        _write,
    )
    write.add_argument("payload", metavar="PAYLOAD", help="the tuple's bytes, or - for stdin")
    for name, summary, example in (
        (
            "take",
            "take the oldest tuple that starts with PREFIX and print it "
            "(exit 1 when nothing matched)",
            "forum take job- --wait 30",
        ),
        (
            "read",
            "print the oldest tuple that starts with PREFIX, leaving it live "
            "(exit 1 when nothing matched)",
            "forum read job-",
        ),
    ):
        parser = _client_parser(commands, name, summary, example, _take_or_read)
        parser.add_argument("prefix", metavar="PREFIX", help="a byte prefix ('' matches all)")
        parser.add_argument(
            "--wait",
            metavar="SECONDS",
            type=SECONDS_OR_ZERO,
            default=None,
            help="wait up to this long for a match (default: answer at once)",
        )
    count = _client_parser(
        commands,
        "count",
        "print how many live tuples start with PREFIX",
        "forum count job-",
        _count,
    )
    count.add_argument("prefix", metavar="PREFIX", help="a byte prefix ('' matches all)")
    _client_parser(
        commands,
        "status",
        "show a node's identity, contents and peers as a table",
        "forum status --node http://10.0.0.5:7070",
        _status,
    )


# -- the parser and main -------------------------------------------------------------


def _add_lazy_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], load: str | None
) -> None:
    """The commands of :data:`LAZY_COMMANDS`: for real for module ``load``
    (imported here, not at the top: it imports redis), stand-ins for the rest."""
    registered: set[str] = set()
    for name, (module, summary) in LAZY_COMMANDS.items():
        if module == load:
            if module not in registered:
                importlib.import_module(module).register(commands)
                registered.add(module)
        else:
            # A stand-in for `forum --help`; the real parser is built when it is run.
            commands.add_parser(name, help=summary)


def build_parser(coordinator: bool = False, load: str | None = None) -> argparse.ArgumentParser:
    """The ``forum`` parser. ``load`` names the module of :data:`LAZY_COMMANDS`
    whose commands are built for real; ``coordinator=True`` means the worker's."""
    parser: argparse.ArgumentParser = OneLineParser(
        prog="forum",
        description="Forum: a replicated tuple space run as a multi-machine work queue.",
        epilog="example:\n  forum serve &\n  forum write job-1\n  forum take job-\n\n"
        "Run 'forum COMMAND --help' for each command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_serve(commands)
    _add_client_commands(commands)
    _add_lazy_commands(commands, "coordinator.cli" if coordinator else load)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The top-level parser takes no option values, so the first word is the command.
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        lazy = LAZY_COMMANDS.get(command or "")
        parser = build_parser(load=lazy[0] if lazy else None)
    except ImportError as exc:
        print(f"forum {command}: not available here: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    func: Any = getattr(args, "func", None)
    if func is None:
        parser.error(f"{command} is not available here")
    try:
        # uvloop: the node answers about twice the requests per core (bench/http_bench.py).
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            code: int = runner.run(func(args))
    except UsageError as exc:
        # One line, whatever the message: a user's module may raise anything.
        name = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        print(f"forum {name}: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return EXIT_USAGE
    except ClientError as exc:
        print(f"forum {args.command}: {exc}", file=sys.stderr)
        return EXIT_NODE
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
