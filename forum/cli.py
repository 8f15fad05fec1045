"""The ``forum`` command: one subcommand per module, each loaded when it runs.

::

    forum serve                         forum.cli_serve    a node, replication wired in
    forum write|take|read|count|status|compact|pause|resume|map
                                        forum.cli_client   a cluster's API from the shell
    forum watch                         forum.cli_watch    a cluster's events, as they happen
    forum worker                        forum.cli_worker   workers (the Lens: Redis)
    forum jobs list|show|cancel|retry|purge
                                        forum.cli_jobs     a task app's jobs
    forum dead                          forum.cli_dead     moved: forum jobs list/retry --raw
    forum cluster up|demo               forum.cli_cluster  a local cluster of processes

argparse picks the subcommand; only then is that subcommand's module imported
and its options added (:class:`Commands`). So ``forum serve`` never imports
Redis or the worker runtime, and ``forum --help`` imports none of them.

Exit codes are in :mod:`forum.cli_args`; the options ``worker`` and ``jobs``
share (``--app`` and where a command points) in :mod:`forum.cli_app`. Every
error a user can cause is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import uvloop

from forum.cli_args import EXIT_NODE, EXIT_USAGE, OneLineParser, UsageError
from forum.node.core.errors import ClientError, ClusterMapError
from forum.node.core.version import installed_version

if TYPE_CHECKING:
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsers = argparse._SubParsersAction

#: Every subcommand, in the order ``forum --help`` lists them: its one-line
#: summary, and the ``module:function`` that adds its options to its parser.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("run a node", "forum.cli_serve:add_serve"),
    "write": ("write a tuple and print its entry id", "forum.cli_client:add_write"),
    "take": (
        "take the oldest tuple that starts with PREFIX and print it (exit 1 when nothing matched)",
        "forum.cli_client:add_take",
    ),
    "read": (
        "print the oldest tuple that starts with PREFIX, leaving it live "
        "(exit 1 when nothing matched)",
        "forum.cli_client:add_read",
    ),
    "count": ("print how many live tuples start with PREFIX", "forum.cli_client:add_count"),
    "status": (
        "show a node's identity, contents and peers, and its cluster map's groups, as tables",
        "forum.cli_client:add_status",
    ),
    "map": (
        "print the cluster map a node serves, as a map file",
        "forum.cli_client:add_map",
    ),
    "compact": (
        "have a node run one compaction pass now and print what it dropped",
        "forum.cli_client:add_compact",
    ),
    "watch": (
        "print the writes, takes and expiries of PREFIX as they happen, until Ctrl-C",
        "forum.cli_watch:add_watch",
    ),
    "pause": (
        "pause the takes and reserves of PREFIX on every node (writes go on)",
        "forum.cli_client:add_pause",
    ),
    "resume": ("end the pauses of PREFIX", "forum.cli_client:add_resume"),
    "worker": (
        "run workers that take jobs from a node and claim them in Redis",
        "forum.cli_worker:add_worker",
    ),
    "jobs": (
        "list, show, cancel, retry or purge a task app's jobs",
        "forum.cli_jobs:add_jobs",
    ),
    "dead": ("moved: forum jobs list --raw, forum jobs retry --raw", "forum.cli_dead:add_dead"),
    "cluster": (
        "run a local cluster of real processes (nodes, Redis, workers)",
        "forum.cli_cluster:add_cluster",
    ),
}


class Unavailable(Exception):
    """A subcommand's module cannot be imported here (e.g. redis is not installed)."""

    def __init__(self, command: str, reason: ImportError) -> None:
        super().__init__(f"forum {command}: not available here: {reason}")


class Commands(_SubParsers):
    """The subcommands' action: each parser starts with its summary alone, and
    gets its options from :data:`COMMANDS` when argparse picks it (or when
    :meth:`build` asks), so only the chosen command's module is imported."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._builders: dict[str, str] = {}

    def add_command(self, name: str, summary: str, builder: str) -> None:
        self.add_parser(name, help=summary, description=f"{summary[0].upper()}{summary[1:]}.")
        self._builders[name] = builder

    def build(self, name: str) -> None:
        """Add ``name``'s options, once; :class:`Unavailable` if its module cannot load."""
        builder = self._builders.pop(name, None)
        if builder is None:  # built already, or not a command (argparse says so)
            return
        module, _, function = builder.partition(":")
        try:
            add: Callable[[argparse.ArgumentParser], None] = getattr(
                importlib.import_module(module), function
            )
        except ImportError as exc:
            raise Unavailable(name, exc) from None
        add(self.choices[name])

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if values:
            self.build(values[0])
        super().__call__(parser, namespace, values, option_string)


def build_parser(eager: bool = False) -> argparse.ArgumentParser:
    """The ``forum`` parser. ``eager=True`` adds every command's options now
    (importing every command's module), for tools that walk all of them."""
    parser: argparse.ArgumentParser = OneLineParser(
        prog="forum",
        description="Forum: a replicated tuple space run as a multi-machine work queue.",
        epilog="example:\n  forum serve &\n  forum write job-1\n  forum take job-\n\n"
        "Run 'forum COMMAND --help' for each command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"forum {installed_version()}")
    commands = cast(
        Commands,
        parser.add_subparsers(action=Commands, dest="command", metavar="COMMAND", required=True),
    )
    for name, (summary, builder) in COMMANDS.items():
        commands.add_command(name, summary, builder)
        if eager:
            commands.build(name)
    return parser


#: The event loop every command runs on: ``FORUM_EVENT_LOOP`` names it.
EVENT_LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop] | None] = {
    # uvloop: the node answers about twice the requests per core (bench/http_bench.py).
    "uvloop": uvloop.new_event_loop,
    # asyncio's own: to rule uvloop out, or where it does not build.
    "asyncio": None,
}


def event_loop(environ: Mapping[str, str] = os.environ) -> str:
    """The event loop ``FORUM_EVENT_LOOP`` names (default ``uvloop``); a
    :class:`UsageError` for another name."""
    name = environ.get("FORUM_EVENT_LOOP", "uvloop") or "uvloop"
    if name not in EVENT_LOOPS:
        raise UsageError(f"FORUM_EVENT_LOOP is {' or '.join(EVENT_LOOPS)}, not {name!r:.40}")
    return name


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        loop = event_loop()
    except Unavailable as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"forum: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with asyncio.Runner(loop_factory=EVENT_LOOPS[loop]) as runner:
            code: int = runner.run(args.func(args))
    except UsageError as exc:
        # One line, whatever the message: a user's module may raise anything.
        name = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        print(f"forum {name}: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return EXIT_USAGE
    except (ClientError, ClusterMapError) as exc:  # a node's map it cannot use: the node's
        print(f"forum {args.command}: {exc}", file=sys.stderr)
        return EXIT_NODE
    except KeyboardInterrupt:
        return 130
    return code
