"""What a consumer needs to know to steal work: each group's backlog of a queue.

A **queue** is a prefix up to and including its first ``/`` (``thumbnails/``
for ``thumbnails/16x16/``); a prefix without one is the whole space's
queue, ``b""``. A :class:`Directory` says, per group, how many tuples of a
queue are live there and how old its oldest is, as of a moment ago. It is
published a few times a second per queue per group, never per job
(forum.coordinator.directory keeps it in the Lens's Redis), so it is
cheap, and a little stale: a consumer uses it to choose where to look
(power of two choices), never to decide that a tuple exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Depth:
    """A queue's backlog in one group: live tuples, and seconds since its
    oldest live tuple arrived (0 when none)."""

    live: int
    oldest_age: float


def queue_of(prefix: bytes) -> bytes:
    """The queue ``prefix`` is in: up to its first ``/``, or ``b""``."""
    cut = prefix.find(b"/")
    return b"" if cut < 0 else prefix[: cut + 1]


class Directory(Protocol):
    """Where each group's backlog of a queue is published (see the module docstring)."""

    async def depths(self, queue: bytes) -> Mapping[str, Depth]:
        """Per group id, the queue's :class:`Depth` there (groups with none left out)."""
        ...
