"""``forum write``, ``take``, ``read``, ``count``, ``status``, ``compact``,
``pause``, ``resume`` and ``map``: a cluster's API from the shell (docs/cli.md).

Given any node's URL, the tuple commands work on the node's whole cluster
through :class:`~forum.node.client.cluster.ClusterClient` (:func:`cluster_space`):
a node started with a cluster map names its replica groups, and a keyed
write goes to its slot's group, ``take`` and ``read`` look in every group,
``count`` sums over them, ``pause`` and ``resume`` reach each. A node
without a map is its cluster's one group, so there they act on it as they
always did. ``status`` shows the node, then each group of its map and each
member's figures; ``compact`` is the node's own; ``map`` prints the map.

``take`` and ``read`` write the tuple's bytes as they are to stdout (a
newline after them only on a terminal) and exit 1 when nothing matched.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from forum.cli_args import (
    EXIT_NO_MATCH,
    EXIT_OK,
    SECONDS,
    SECONDS_OR_ZERO,
    UsageError,
    node_options,
)
from forum.node.api.model import ClusterMapBody, GroupBody
from forum.node.api.status import NodeStatus, PeerStatus
from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.core.errors import ClientError
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


def add_map(parser: argparse.ArgumentParser) -> None:
    _client_options(parser, "forum map --node http://10.0.0.5:7070 > cluster-map.toml", _map)


def add_pause(parser: argparse.ArgumentParser) -> None:
    _client_options(parser, "forum pause job/", _pause_or_resume)
    parser.add_argument("prefix", metavar="PREFIX", help="the byte prefix to pause (not empty)")


def add_resume(parser: argparse.ArgumentParser) -> None:
    _client_options(parser, "forum resume job/", _pause_or_resume)
    parser.add_argument("prefix", metavar="PREFIX", help="the byte prefix to resume")


# -- running them ------------------------------------------------------------------


def _pattern(args: argparse.Namespace) -> Pattern:
    return Pattern(os.fsencode(args.prefix))


@contextlib.asynccontextmanager
async def cluster_space(args: argparse.Namespace) -> AsyncIterator[ClusterClient]:
    """The tuple space of the cluster ``--node`` is in: the groups of the map
    it serves, or the node alone when it has none (its cluster is one group)."""
    # A group or node that does not answer is the command's one-line error, or
    # passed over for the next (a write falling through): not a log line too.
    logging.getLogger("forum.node.client").setLevel(logging.ERROR)
    async with await ClusterClient.discover(args.node, args.token) as space:
        yield space


async def _write(args: argparse.Namespace) -> int:
    if args.payload == "-":
        payload = await asyncio.to_thread(sys.stdin.buffer.read)
    else:
        payload = os.fsencode(args.payload)
    async with cluster_space(args) as space:
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
    async with cluster_space(args) as space:
        if args.command == "pause":
            print(f"paused {args.prefix} (marker {await space.pause(prefix)})")
        else:
            print(f"resumed {args.prefix} ({await space.resume(prefix)} pause(s) ended)")
    return EXIT_OK


async def _take_or_read(args: argparse.Namespace) -> int:
    async with cluster_space(args) as space:
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
    async with cluster_space(args) as space:
        print(await space.count(_pattern(args)))
    return EXIT_OK


async def _status(args: argparse.Namespace) -> int:
    async with ForumClient(args.node, args.token) as space:
        status = await space.status()
        cluster = None if status.group is None else await space.cluster_map()
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
    if cluster is not None:
        rows += [
            ("group", cluster.group),
            ("map epoch", str(cluster.epoch)),
            ("misplaced writes", f"{status.misplaced_writes} (keyed, their slot's group another)"),
        ]
    print(_table(rows))
    if status.peers:
        columns = sorted(field.name for field in dataclasses.fields(PeerStatus))
        print()
        cells = [tuple(str(getattr(peer, c)) for c in columns) for peer in status.peers]
        print(_table([tuple(columns), *cells]))
    if cluster is not None:
        print()
        print(_table(await _group_rows(cluster, args.token)))
    return EXIT_OK


#: Seconds ``forum status`` waits for a member of a group to answer.
MEMBER_TIMEOUT = 5.0


async def _group_rows(cluster: ClusterMapBody, token: str | None) -> list[tuple[str, ...]]:
    """One row per member of each group of the map, with what it says of
    itself, asked of all at once (one that does not answer is unreachable)."""
    # A retired group may list no members: a row of its own all the same.
    members = [(group, url) for group in cluster.groups for url in group.members or ("-",)]
    answers = await asyncio.gather(*(_member_status(url, token) for _, url in members))
    header = ("group", "state", "weight", "member", "node", "live", "reserved", "converged")
    rows: list[tuple[str, ...]] = [header]
    for (group, url), answer in zip(members, answers, strict=True):
        rows.append(_member_row(group, url, answer))
    return rows


async def _member_status(url: str, token: str | None) -> NodeStatus | str:
    """The member's status, or why it gave none."""
    if url == "-":
        return "no members"  # a retired group's
    try:
        async with asyncio.timeout(MEMBER_TIMEOUT), ForumClient(url, token) as member:
            return await member.status()
    except ClientError as exc:
        return str(exc)
    except TimeoutError:
        return f"no answer in {MEMBER_TIMEOUT:.0f} s"


def _member_row(group: GroupBody, url: str, answer: NodeStatus | str) -> tuple[str, ...]:
    named = (group.id, group.state, f"{group.weight:g}", url)
    if url == "-":
        return (*named, "-", "-", "-", "no members")
    if isinstance(answer, str):
        return (*named, "unreachable", "-", "-", answer)
    return (*named, answer.node_id, str(answer.live), str(answer.reserved), converged(answer))


def converged(status: NodeStatus) -> str:
    """Whether the node and its peers (its group's other members) hold the
    same entries, as its replication last heard: ``yes``, ``alone`` (no
    peers), or ``no`` with why."""
    if not status.peers:
        return "alone"
    alive = [p for p in status.peers if p.state == "alive"]
    behind = sum(p.behind or 0 for p in alive)
    if len(alive) == len(status.peers) and behind == 0 and all(p.behind is not None for p in alive):
        return "yes"
    return f"no ({len(alive)} of {len(status.peers)} peers alive, {behind} entries behind)"


async def _map(args: argparse.Namespace) -> int:
    """Print the node's cluster map as a map file (TOML) that ``--cluster-map`` takes."""
    async with ForumClient(args.node, args.token) as space:
        cluster = await space.cluster_map()
    signed = "signed" if cluster.signature else "not signed (no cluster secret)"
    lines = [
        f"# the cluster map {args.node} serves ({signed}); it is in group {cluster.group}",
        f"epoch = {cluster.epoch}",
    ]
    for group in cluster.groups:
        members = ", ".join(json.dumps(url) for url in group.members)
        lines += [
            "",
            "[[groups]]",
            f"id = {json.dumps(group.id)}",
            f"weight = {group.weight!r}",
            f"state = {json.dumps(group.state)}",
            f"members = [{members}]",
        ]
    print("\n".join(lines))
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
