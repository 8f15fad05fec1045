"""Every dead letter under an app's dead prefix, whatever parked it: what
``forum jobs list --raw`` and ``forum jobs retry --raw`` do (they replaced
``forum dead``).

A task job's letter is a job too (``forum jobs list --state dead``, ``forum
jobs retry KEY``); a raw :class:`forum.coordinator.Worker`'s (``forum worker
--handler``) has no task and no job record, so it is found and requeued here
by its entry id, as :mod:`forum.coordinator.deadletter` keeps it. The space is
read through the app's cluster, group after group
(:func:`forum.tasks.admin.tuples`), oldest first in each.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Collection
from typing import TYPE_CHECKING

from forum.coordinator.deadletter import DeadLetter, requeue
from forum.tasks.admin import tuples

if TYPE_CHECKING:
    from forum.tasks.app import App


async def dead_letters(app: App, dead_prefix: bytes | None = None) -> AsyncIterator[DeadLetter]:
    """Every dead letter under ``dead_prefix`` (default ``app.dead_prefix``),
    each group's oldest first."""
    prefix = app.dead_prefix if dead_prefix is None else dead_prefix
    async for item in tuples(app, prefix):
        yield DeadLetter.parse(item, prefix)


async def requeue_letters(
    app: App, ids: Collection[str] | None, dead_prefix: bytes | None = None
) -> list[str]:
    """Put the dead letters with entry ids ``ids`` (every one: ``None``) back
    to work (prefix off, attempt 1, same claim key); the ids requeued. A
    letter gone meanwhile (requeued by another) is not among them."""
    # Collected first: requeueing while paging would move the cursor's ground.
    letters = [
        letter
        async for letter in dead_letters(app, dead_prefix)
        if ids is None or str(letter.id) in ids
    ]
    done: list[str] = []
    for letter in letters:
        if await app.on_node(functools.partial(requeue, letter=letter)) is not None:
            done.append(str(letter.id))
    return done
