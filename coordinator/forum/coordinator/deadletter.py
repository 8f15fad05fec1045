"""Dead letters: jobs that failed ``max_attempts`` times, parked under a prefix.

A dead letter is the tuple ``dead_prefix + payload + trailer`` (the trailer
of :mod:`forum.coordinator.envelope`, carrying the claim key, the attempts made and
the last error). Parked under their own prefix, dead letters match no
worker's pattern, stay visible to ``forum jobs list --raw``, and go back to
work with ``forum jobs retry --raw``: the prefix comes off and the attempts start
again, under the same claim key (the Lens counts them afresh: the trailer
names the dead letter it was revived from).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from forum.coordinator.envelope import Envelope
from forum.node.core.entries import EntryId, Tuple
from forum.node.core.space import ListPage, Pattern, TupleSpace

DEFAULT_DEAD_PREFIX = b"dead/"


def bury(envelope: Envelope, dead_prefix: bytes = DEFAULT_DEAD_PREFIX) -> bytes:
    """The dead letter of ``envelope`` (its attempts and error as they are)."""
    return dead_prefix + envelope.seal()


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One parked job as found in the space."""

    id: EntryId
    raw: bytes
    envelope: Envelope

    @classmethod
    def parse(cls, item: Tuple, dead_prefix: bytes = DEFAULT_DEAD_PREFIX) -> DeadLetter:
        """Read a tuple under ``dead_prefix``; ``ValueError`` if it is not under it."""
        if not item.payload.startswith(dead_prefix):
            raise ValueError(f"{item.id} is not a dead letter (no {dead_prefix!r} prefix)")
        return cls(item.id, item.payload, Envelope.open(item.payload[len(dead_prefix) :]))

    @property
    def payload(self) -> bytes:
        return self.envelope.payload

    def revived(self) -> bytes:
        """The job as it goes back to work: same payload and claim key, attempt
        1, revived from this letter (so the Lens, which remembers the job
        buried, counts its attempts afresh: forum.coordinator.envelope)."""
        return Envelope(self.envelope.payload, key=self.envelope.key, revived=str(self.id)).seal()


async def requeue(space: TupleSpace, letter: DeadLetter) -> EntryId | None:
    """Put ``letter``'s job back to work; return the new job's id, or ``None``
    if the dead letter was already gone (someone else requeued it).

    The job is written first and the dead letter taken second, so a crash in
    between leaves a duplicate dead letter to clean up, never a lost job.
    """
    new_id = await space.write(letter.revived())
    # Taken by its exact bytes: only this letter (or an identical copy) matches.
    if await space.take(Pattern(letter.raw)) is None:
        await space.take(Pattern(letter.revived()))
        return None
    return new_id


class ListingSpace(Protocol):
    """A space that pages through its live tuples (``node.ForumClient``)."""

    async def list(self, pattern: Pattern, cursor: int = 0, limit: int = 100) -> ListPage: ...


async def dead_letters(
    space: ListingSpace, dead_prefix: bytes = DEFAULT_DEAD_PREFIX, page: int = 100
) -> AsyncIterator[DeadLetter]:
    """Every dead letter in ``space``, oldest first."""
    cursor: int | None = 0
    while cursor is not None:
        found = await space.list(Pattern(dead_prefix), cursor, page)
        for item in found.tuples:
            yield DeadLetter.parse(item, dead_prefix)
        cursor = found.next_cursor
