"""``forum watch PREFIX``: print a cluster's writes, takes and expiries as they happen.

One line per event on stdout, until Ctrl-C (or SIGTERM), which exits 0::

    write n1-a1b2:7 job-7
    write n1-a1b2:8 job-8 [priority=5 expires=1764630000000]
    take n1-a1b2:9 n1-a1b2:7
    expire n1-a1b2:8

A payload is shown as UTF-8 text (other bytes as ``\\xNN``, line breaks as
``\\n``). What is about the watch itself goes to stderr: that it is live, that
events were missed (``gap``, ``reset``; the watch goes on), and an
``overflow`` (the node cut the watch off: exit 3; ``--last-event-id`` resumes).

A node of one group (a node without a cluster map is its cluster's one
group) has every event of its cluster: the watch follows that node, as it
always did. Given a node of a scaled-out cluster, it follows a member of
each group of the map at once, their events merged as they come (nothing
orders events of two groups); an event id is then one node's, so
``--last-event-id`` is refused there.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, aclosing

from forum.cli_args import EXIT_NODE, EXIT_OK, UsageError, node_options
from forum.cli_client import cluster_space
from forum.node.client.remote import ForumClient
from forum.node.client.watch import WatchEvent
from forum.node.core.space import Pattern

_LINE_BREAKS = str.maketrans({"\n": "\\n", "\r": "\\r"})


def add_watch(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "example:\n  forum watch job-\n  forum watch '' --node http://10.0.0.5:7070"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    node_options(parser)
    parser.add_argument("prefix", metavar="PREFIX", help="a byte prefix ('' watches all)")
    parser.add_argument(
        "--last-event-id",
        metavar="ID",
        default=None,
        help="resume after this event (an id the node gave, as ready or overflow say)",
    )
    parser.set_defaults(func=run_watch)


async def run_watch(args: argparse.Namespace) -> int:
    """Follow the watch until SIGINT/SIGTERM (exit 0) or an overflow (exit 3)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, interrupt)
    try:
        return await _follow(args)
    except asyncio.CancelledError:
        if not interrupted:
            raise
        task.uncancel()
        return EXIT_OK
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


async def _follow(args: argparse.Namespace) -> int:
    pattern = Pattern(os.fsencode(args.prefix))
    async with cluster_space(args) as cluster, AsyncExitStack() as stack:
        groups = len(cluster.map.served)
        events: AsyncGenerator[WatchEvent, None]
        if groups == 1:
            node = await stack.enter_async_context(ForumClient(args.node, args.token))
            events = node.watch(pattern, last_event_id=args.last_event_id)
            where = args.node
        elif args.last_event_id is not None:
            raise UsageError(
                f"--last-event-id resumes one node's watch, and this cluster has {groups} groups"
            )
        else:
            events = cluster.watch(pattern)
            where = f"a member of each of {groups} groups"
        await stack.enter_async_context(aclosing(events))
        async for event in events:
            if event.kind == "overflow":
                _note(f"{event.message} (the last event seen: {event.event_id})")
                return EXIT_NODE
            if event.kind == "ready":
                _note(f"watching {args.prefix!r} on {where} from {event.event_id}")
            elif event.kind in ("gap", "reset"):
                _note(f"{event.kind}: {event.message}")
            else:
                print(line(event), flush=True)
    return EXIT_OK


def line(event: WatchEvent) -> str:
    """An event of the node as one line of text."""
    if event.kind == "take":
        return f"take {event.id} {event.target}"
    if event.kind == "expire":
        return f"expire {event.id}"
    shown = (event.payload or b"").decode(errors="backslashreplace").translate(_LINE_BREAKS)
    props = [
        f"{name}={value}"
        for name, value in (
            ("priority", event.priority),
            ("due", event.due),
            ("expires", event.expires),
        )
        if value
    ]
    if event.key is not None:
        props.append(f"key={event.key.decode(errors='backslashreplace')}")
    return f"write {event.id} {shown}" + (f" [{' '.join(props)}]" if props else "")


def _note(text: str) -> None:
    print(f"forum watch: {text}", file=sys.stderr, flush=True)
