"""``forum write``, ``take``, ``read``, ``count``, ``status``, ``compact``,
``pause`` and ``resume``: a node's API from the shell, through
:class:`~forum.node.client.remote.ForumClient`.

``take`` and ``read`` write the tuple's bytes as they are to stdout (a
newline after them only on a terminal) and exit 1 when nothing matched.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
from collections.abc import Awaitable, Callable, Sequence

from forum.cli_args import (
    EXIT_NO_MATCH,
    EXIT_OK,
    SECONDS,
    SECONDS_OR_ZERO,
    UsageError,
    node_options,
)
from forum.node.api.status import PeerStatus
from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern

Command = Callable[[argparse.Namespace], Awaitable[int]]


def _client_options(parser: argparse.ArgumentParser, example: str, func: Command) -> None:
    """What every client command has: its example, ``--node`` and ``--token``."""
    parser.epilog = f"example:\n  {example}"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    node_options(parser)
    parser.set_defaults(func=func)


def _prefix(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prefix", metavar="PREFIX", help="a byte prefix ('' matches all)")


def _wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait",
        metavar="SECONDS",
        type=SECONDS_OR_ZERO,
        default=None,
        help="wait up to this long for a match (default: answer at once)",
    )


# -- the commands' options ---------------------------------------------------------


def add_write(parser: argparse.ArgumentParser) -> None:
    example = (
        "forum write 'job-42 resize photo.jpg'\n  cat job.bin | forum write -\n"
        "  forum write job/7 --delay 60 --ttl 3600 --priority 5 --key job/7"
    )
    _client_options(parser, example, _write)
    parser.add_argument("payload", metavar="PAYLOAD", help="the tuple's bytes, or - for stdin")
    _write_options(parser)


def _write_options(parser: argparse.ArgumentParser) -> None:
    """The options of a write (docs/scheduling.md); the node judges their values."""
    add = parser.add_argument
    add("--delay", metavar="SECONDS", type=SECONDS_OR_ZERO, help="due this long from now")
    add("--not-before", metavar="UNIX_SECONDS", type=float, help="due at this time")
    add("--ttl", metavar="SECONDS", type=SECONDS, help="gone this long after it is due")
    add("--priority", metavar="N", type=int, default=0, help="-128 to 127, higher first")
    add("--key", metavar="KEY", help="the write's key (its dedup and claim key)")
    add("--dedup-window", metavar="SECONDS", type=SECONDS, help="with --key: dedup this long")
    add("--wait", metavar="SECONDS", type=SECONDS_OR_ZERO, help="wait for room under a limit")
    add("--copies", metavar="N", type=int, help="answer once N nodes hold it (default: the node's)")


def add_take(parser: argparse.ArgumentParser) -> None:
    _client_options(parser, "forum take job- --wait 30", _take_or_read)
    _prefix(parser)
    _wait(parser)


def add_read(parser: argparse.ArgumentParser) -> None:
    _client_options(parser, "forum read job-", _take_or_read)
    _prefix(parser)
    _wait(parser)


def add_count(parser: argparse.ArgumentParser) -> None:
    _client_options(parser, "forum count job-", _count)
    _prefix(parser)


def add_status(parser: argparse.ArgumentParser) -> None:
    _client_options(parser, "forum status --node http://10.0.0.5:7070", _status)


def add_compact(parser: argparse.ArgumentParser) -> None:
    _client_options(parser, "forum compact --node http://10.0.0.5:7070", _compact)


def add_pause(parser: argparse.ArgumentParser) -> None:
    _client_options(parser, "forum pause job/", _pause_or_resume)
    parser.add_argument("prefix", metavar="PREFIX", help="the byte prefix to pause (not empty)")


def add_resume(parser: argparse.ArgumentParser) -> None:
    _client_options(parser, "forum resume job/", _pause_or_resume)
    parser.add_argument("prefix", metavar="PREFIX", help="the byte prefix to resume")


# -- running them ------------------------------------------------------------------


def _pattern(args: argparse.Namespace) -> Pattern:
    return Pattern(os.fsencode(args.prefix))


async def _write(args: argparse.Namespace) -> int:
    if args.payload == "-":
        payload = await asyncio.to_thread(sys.stdin.buffer.read)
    else:
        payload = os.fsencode(args.payload)
    async with ForumClient(args.node, args.token) as space:
        written = await space.write(
            payload,
            delay=args.delay,
            not_before=args.not_before,
            ttl=args.ttl,
            priority=args.priority,
            key=None if args.key is None else os.fsencode(args.key),
            dedup_window=args.dedup_window,
            wait=args.wait,
            copies=args.copies,
        )
        print(written)
    return EXIT_OK


async def _pause_or_resume(args: argparse.Namespace) -> int:
    prefix = os.fsencode(args.prefix)
    if not prefix:
        raise UsageError("PREFIX must not be empty")
    async with ForumClient(args.node, args.token) as space:
        if args.command == "pause":
            print(f"paused {args.prefix} (marker {await space.pause(prefix)})")
        else:
            print(f"resumed {args.prefix} ({await space.resume(prefix)} pause(s) ended)")
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
        (
            "compaction",
            f"{status.compactions} passes, {_size(status.bytes_reclaimed)} reclaimed, "
            f"{status.entries_dropped} entries dropped",
        ),
        ("delayed / expired", f"{status.delayed} / {status.expired}"),
        ("paused", ", ".join(status.paused) or "none"),
        *_fill_rows(status.limits),
        ("peers", str(len(status.peers)) if status.peers else "none"),
    ]
    print(_table(rows))
    if status.peers:
        columns = sorted(field.name for field in dataclasses.fields(PeerStatus))
        print()
        cells = [tuple(str(getattr(peer, c)) for c in columns) for peer in status.peers]
        print(_table([tuple(columns), *cells]))
    return EXIT_OK


def _fill_rows(limits: dict[str, list[int]]) -> list[tuple[str, str]]:
    """One row per limited prefix: how full it is here."""
    return [
        (f"limit {prefix}", f"{held} / {limit} ({held / limit:.0%})")
        for prefix, (held, limit) in sorted(limits.items())
    ]


async def _compact(args: argparse.Namespace) -> int:
    async with ForumClient(args.node, args.token) as space:
        report = await space.compact()
    print(
        f"dropped {report.entries_dropped} entries: {_size(report.bytes_before)} -> "
        f"{_size(report.bytes_after)} in {report.seconds:.1f} s"
    )
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
