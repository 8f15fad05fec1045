"""``forum dead list`` and ``forum dead requeue``: the jobs parked after their
last attempt (:mod:`forum.coordinator.deadletter`), read and put back through a node.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from forum.cli_args import EXIT_NO_MATCH, EXIT_OK, NONEMPTY, UsageError, node_options
from forum.coordinator.deadletter import DEFAULT_DEAD_PREFIX, DeadLetter, dead_letters, requeue
from forum.node.client.remote import ForumClient


def dead_letter_options(parser: argparse.ArgumentParser) -> None:
    """``--node``, ``--token`` and ``--dead-prefix``: where the dead letters are
    (``forum worker`` parks them there)."""
    node_options(parser)
    parser.add_argument(
        "--dead-prefix",
        metavar="PREFIX",
        type=NONEMPTY,
        default=DEFAULT_DEAD_PREFIX.decode(),
        help=f"where dead letters are parked (default {DEFAULT_DEAD_PREFIX.decode()})",
    )


def add_dead(parser: argparse.ArgumentParser) -> None:
    """The actions of ``forum dead`` and their options."""
    parser.description = (
        "Jobs that failed --max-attempts times are parked under the dead "
        "prefix with their last error. 'list' shows them; 'requeue' puts them back to "
        "work (prefix removed, attempts from 1, same claim key)."
    )
    parser.epilog = (
        "example:\n  forum dead list\n  forum dead requeue --all\n"
        "  forum dead requeue a-1f3c:17 a-1f3c:18"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="show dead letters, oldest first")
    dead_letter_options(listing)
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(func=list_dead)
    again = actions.add_parser("requeue", help="put dead letters back to work")
    dead_letter_options(again)
    again.add_argument("ids", metavar="ID", nargs="*", help="entry ids of the dead letters")
    again.add_argument("--all", action="store_true", help="requeue every dead letter")
    again.set_defaults(func=requeue_dead)


async def list_dead(args: argparse.Namespace) -> int:
    """``forum dead list``."""
    async with ForumClient(args.node, args.token) as space:
        async for letter in dead_letters(space, os.fsencode(args.dead_prefix)):
            print(_describe(letter, as_json=args.json))
    return EXIT_OK


def _describe(letter: DeadLetter, *, as_json: bool) -> str:
    envelope = letter.envelope
    if as_json:
        return json.dumps(
            {
                "id": str(letter.id),
                "key": envelope.key,
                "attempts": envelope.attempt,
                "error": envelope.error,
                "payload": envelope.payload.decode(errors="backslashreplace"),
            }
        )
    payload = envelope.payload[:60].decode(errors="backslashreplace")
    return (
        f"{letter.id}  key={envelope.key}  attempts={envelope.attempt}  "
        f"error={envelope.error!r}  payload={payload!r}"
    )


async def requeue_dead(args: argparse.Namespace) -> int:
    """``forum dead requeue (--all | ID...)``."""
    if bool(args.all) == bool(args.ids):
        raise UsageError("give entry ids, or --all")
    wanted = set(args.ids)
    requeued = 0
    async with ForumClient(args.node, args.token) as space:
        # Collected first: requeueing while paging would move the cursor's ground.
        letters = [
            letter
            async for letter in dead_letters(space, os.fsencode(args.dead_prefix))
            if args.all or str(letter.id) in wanted
        ]
        for letter in letters:
            if await requeue(space, letter) is not None:
                requeued += 1
                wanted.discard(str(letter.id))
    for missing in sorted(wanted):
        print(f"forum dead requeue: no dead letter {missing}", file=sys.stderr)
    print(f"requeued {requeued}")
    return EXIT_OK if not wanted else EXIT_NO_MATCH
