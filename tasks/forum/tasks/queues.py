"""Queues: the prefix a job is written under, and the ones a worker serves.

A task's jobs go to its queue (``@app.task(queue="emails")``; ``None`` is
:data:`DEFAULT_QUEUE`), or to the enqueue's ``_queue=``. Each queue is a
prefix under the app's (:func:`queue_prefix`, ``task/emails/``: the byte
layout is :mod:`forum.tasks.message`'s), so a worker serves a queue by
reserving its prefix, and every queue of an app by reserving the app's.

Which queues a worker serves (:func:`lanes`):

* none given (the default): every queue of the app, as one lane on the app
  prefix, each job in the space's order (the highest priority first, then
  the oldest) whatever its queue: one request per reserve, as without
  queues, and jobs written under a queue no task names (``_queue=``) or by
  a release before queues are served too;
* ``{"emails": 3, "default": 1}`` (``--queues emails:3,default:1``): those
  queues only, one lane each, tried in an order drawn by weight at each
  reserve (:mod:`forum.coordinator.lanes`); a name without a weight
  (``["emails", "default"]``, ``--queues emails,default``) weighs 1.

A queue's name is 1 to 64 of ``A-Z a-z 0-9 _ . -``: it is part of every
job's bytes, and of the ``name:weight`` list ``forum worker --queues`` reads.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from forum.coordinator.lanes import Lane, Lanes
from forum.node.core.space import Pattern
from forum.tasks.errors import InvalidJob

if TYPE_CHECKING:
    from forum.tasks.app import App

log = logging.getLogger(__name__)

#: The queue of a task given none.
DEFAULT_QUEUE = "default"
#: What a queue name may be made of.
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: What a worker is told to serve: names with weights, or names (each weighing 1).
Served = Mapping[str, int] | Iterable[str]


def check_queue(name: object) -> str:
    """``name`` if it is a valid queue name; :class:`InvalidJob` otherwise."""
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidJob(f"{name!r} is not a queue name: 1 to 64 of A-Z a-z 0-9 _ . -")
    return name


def queue_prefix(prefix: bytes, queue: str) -> bytes:
    """The prefix of queue ``queue``'s jobs under the app prefix ``prefix``."""
    return prefix + queue.encode() + b"/"


def queues_of(app: App) -> list[str]:
    """The default queue and those the app's tasks name, sorted: where a
    status looks for a key's tuple (an app without tasks, as ``forum jobs``
    and the dashboard make when not given ``--app``, knows the default)."""
    return sorted({DEFAULT_QUEUE, *(task.options.queue or DEFAULT_QUEUE
                                    for task in app.tasks.values())})  # fmt: skip


def weights(served: Served) -> dict[str, int]:
    """``served`` as queue names and their weights, checked: one-line
    :class:`InvalidJob` for a bad name, a weight that is not a whole number
    from 1, or no queue at all."""
    if isinstance(served, str):  # a name alone is not a list of its letters
        served = [served]
    pairs = served.items() if isinstance(served, Mapping) else ((name, 1) for name in served)
    found: dict[str, int] = {}
    for name, weight in pairs:
        check_queue(name)
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise InvalidJob(f"queue {name}'s weight is a whole number from 1, not {weight!r}")
        found[name] = weight
    if not found:
        raise InvalidJob("a worker serves at least one queue")
    return found


def parse_weights(text: str) -> dict[str, int]:
    """``emails:3,default:1`` (``forum worker --queues``) as names and
    weights; a name without ``:weight`` weighs 1. One-line :class:`InvalidJob`
    for anything else."""
    found: dict[str, int] = {}
    for item in text.split(","):
        name, colon, weight = item.strip().partition(":")
        if colon and not weight.strip().isdigit():
            raise InvalidJob(f"queue {name}'s weight is a whole number from 1, not {weight!r}")
        if name in found:
            raise InvalidJob(f"queue {name!r} is given twice")
        found[name] = int(weight) if colon else 1
    return weights(found)


def lanes(app: App, served: Served | None) -> Lanes:
    """What a worker of ``app`` reserves from: every queue (``served`` is
    ``None``: the app prefix, one lane), or the queues ``served`` by weight."""
    if served is None:
        return Lanes.of(Pattern(app.prefix))
    given = weights(served)
    unnamed = sorted(set(given) - set(queues_of(app)))
    if unnamed:  # a typo, or a queue only enqueues name (_queue=): said, not refused
        log.warning("no task of the app names queue %s: only jobs enqueued with _queue= "
                    "go there", ", ".join(unnamed))  # fmt: skip
    return Lanes(
        [Lane(Pattern(queue_prefix(app.prefix, name)), weight) for name, weight in given.items()]
    )
