"""What every ``forum`` subcommand shares: exit codes, argument checks, the one usage error.

Exit codes: 0 done; 1 nothing matched (``take``, ``read``) or not everything
asked for was there (``dead requeue``); 2 bad usage or configuration; 3 the
node could not be reached or refused the request.

A bad value is reported in one of two ways, both one line on stderr and exit
code 2 (:data:`EXIT_USAGE`), never a traceback:

* what can be judged from the text alone is an argparse ``type=``
  (:func:`checked` turns a ``ValueError`` into the parser's error, which
  :class:`OneLineParser` prints as one line);
* what needs the world (a port in use, a module that fails to import, a Redis
  database that does not exist) raises :class:`UsageError` from the command,
  which ``forum``'s ``main`` prints as ``forum COMMAND: message``.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from typing import NoReturn, TypeVar

from forum.node.config.node import DEFAULT_NODE
from forum.node.core.urls import node_url

T = TypeVar("T")

EXIT_OK = 0
EXIT_NO_MATCH = 1
#: The command ran and its work failed (a worker whose startup hook failed).
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NODE = 3


class UsageError(Exception):
    """A command was given an argument or setting it cannot work with."""


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line, like every other
    ``forum`` error (argparse's own print the whole usage first). Subparsers
    are made of the parent's class, so every subcommand's parser is one too."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def checked(parse: Callable[[str], T], name: str) -> Callable[[str], T]:
    """``parse`` as an argparse ``type=``: its ``ValueError`` becomes the one line."""

    def check(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    check.__name__ = name  # argparse names the type in some messages
    return check


def _seconds(text: str, *, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(
            f"must be a finite number of seconds {'> 0' if positive else '>= 0'}, not {text}"
        )
    return value


def _whole(text: str, *, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if value < least:
        raise ValueError(f"must be at least {least}, not {text}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise ValueError(f"a port is 0 to 65535, not {text}")
    return value


def _nonempty(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text


#: ``type=`` values: a node's base URL, seconds (> 0 or >= 0), a count >= 1
#: (or >= 0), a TCP port (0 = any free port), a non-empty string.
NODE_URL = checked(node_url, "URL")
SECONDS = checked(lambda text: _seconds(text, positive=True), "seconds")
SECONDS_OR_ZERO = checked(lambda text: _seconds(text, positive=False), "seconds")
COUNT = checked(lambda text: _whole(text, least=1), "count")
COUNT_OR_ZERO = checked(lambda text: _whole(text, least=0), "count")
PORT = checked(_port, "port")
NONEMPTY = checked(_nonempty, "text")


def node_options(parser: argparse.ArgumentParser) -> None:
    """``--node`` and ``--token``: which node a command talks to, for every
    command but ``serve`` and ``cluster``."""
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
