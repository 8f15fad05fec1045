"""A reserved tuple as a worker offers it to the Lens (:class:`Offer`), and
the Lens's answers to a batch of offers sorted by what the worker does with
each (:class:`Answers`):

* granted: run, as the attempt the Lens counts (``HeldClaim.attempt``),
  whatever the copy's trailer says;
* a copy of a job done (``AlreadyDone``) or buried (``AttemptsSpent``):
  taken away (acked); the done marker or the dead letter stands for it;
* a copy of a job another holder runs (``AlreadyClaimed``): parked until
  that holder's lease can first end (done by then, or its holder dead),
  then offered again: not released (it would come straight back), not
  acked, and not left to run out (forum.coordinator.holding ``Parked``);
* a copy met after an attempt failed, before the next is due (``NotDue``):
  deferred until it is due, as a retry whose trailer says so.

All but the granted and the deferred are double takes (the worker counts
them, forum.coordinator.doubletakes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from forum.coordinator.authority import HeldClaim
from forum.coordinator.envelope import Envelope
from forum.coordinator.errors import AlreadyClaimed, AlreadyDone, AttemptsSpent, LensError, NotDue
from forum.node.core.entries import EntryId, Reserved

#: The shortest a copy of a job that another holder runs is parked.
MIN_HOLD = 0.1


@dataclass(frozen=True, slots=True)
class Offer:
    """A reserved tuple, its envelope (with its claim key), counted as the
    attempt its copy says it is (forum.coordinator.worker, "The job killed
    its worker"); the Lens may count it higher."""

    item: Reserved
    key: str
    envelope: Envelope


@dataclass(frozen=True, slots=True)
class Answers:
    """The Lens's answers to offers, sorted (see the module docstring)."""

    granted: list[tuple[Offer, HeldClaim]] = field(default_factory=list)
    #: Copies to take away: their jobs are done or buried.
    gone: list[EntryId] = field(default_factory=list)
    #: Copies to park, each for its hold in seconds.
    held: list[tuple[EntryId, float]] = field(default_factory=list)
    #: Copies to defer, each until its next attempt is due (seconds).
    not_due: list[tuple[Offer, float]] = field(default_factory=list)
    #: The double takes: each copy turned away, and why.
    doubles: list[tuple[Offer, LensError]] = field(default_factory=list)

    @classmethod
    def sort(
        cls, offers: Sequence[Offer], outcomes: Sequence[HeldClaim | LensError], lease: float
    ) -> Answers:
        """``outcomes`` (``claim_many``'s, one per offer) sorted; ``lease``
        is the worker's, a third of which a copy of a held job is parked
        when the Lens did not say what the holder's lease had left."""
        answers = cls()
        for offer, outcome in zip(offers, outcomes, strict=True):
            if isinstance(outcome, NotDue):
                answers.not_due.append((offer, outcome.remaining))
                continue
            if not isinstance(outcome, LensError):
                answers.granted.append((offer, outcome))
                continue
            answers.doubles.append((offer, outcome))
            if isinstance(outcome, AlreadyDone | AttemptsSpent):
                answers.gone.append(offer.item.id)
            elif isinstance(outcome, AlreadyClaimed):
                answers.held.append((offer.item.id, _held_for(outcome, lease)))
        return answers


def _held_for(held: AlreadyClaimed, lease: float) -> float:
    """How long to park a copy of a job that ``held``'s holder runs: what
    its lease had left (a third of ``lease`` when the Lens did not say), and
    never so little that the copy spins between the node and the Lens."""
    remaining = lease / 3 if held.remaining is None else held.remaining
    return max(remaining, MIN_HOLD)
