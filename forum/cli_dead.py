"""``forum dead``: a pointer to ``forum jobs``, which does what it did.

``forum dead list`` and ``forum dead requeue`` overlapped ``forum jobs``
(a dead task job was in both, under two names); one command now looks after
every job: ``forum jobs list --raw`` lists every dead letter by entry id, a
raw worker's (``forum worker --handler``) too, with its traceback on lines
of its own, and ``forum jobs retry --raw ID... | --all`` requeues them
(:mod:`forum.cli_jobs`). The name stays as this one line, rather than
argparse's "invalid choice", so a script or a runbook that used it says
where to go. ``forum worker`` takes its ``--dead-prefix`` from here still.
"""

from __future__ import annotations

import argparse

from forum.cli_args import NONEMPTY, UsageError, node_options
from forum.coordinator.deadletter import DEFAULT_DEAD_PREFIX

#: What ``forum dead`` says, whatever follows it.
MOVED = (
    "moved to forum jobs: 'forum jobs list --raw' lists dead letters, "
    "'forum jobs retry --raw ID...|--all' requeues them (--node and --dead-prefix as before)"
)


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
    """``forum dead ...``: whatever follows, the pointer."""
    parser.description = f"Dead letters: {MOVED}."
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(func=_moved)


async def _moved(args: argparse.Namespace) -> int:
    raise UsageError(MOVED)
