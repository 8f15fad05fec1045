"""A job's timeline: its attempts, read from the Lens's history of its key.

The Lens pushes one :class:`~forum.coordinator.HistoryEvent` per change of a
key's claim (forum.coordinator.records): ``claimed`` opens an attempt, and
one of :data:`ENDS` closes it. An attempt is the claim of one fencing
token, so an end closes the open attempt of its token (a ``reoffered`` of
nobody's claim has token 0 and closes none; an ``expired`` is dated by
whoever saw the lease over, the next claim or cancel). What closes nothing
(a cancel of a job nobody held, a re-offer of a record nobody handed back)
is kept beside the attempts as it is. The history keeps the last
``HISTORY_LENGTH`` events: an end whose claim is no longer there is kept
beside the attempts too, and an attempt whose end is not there, and which
is not the live claim, says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from forum.coordinator import HistoryEvent

__all__ = ["ENDS", "Attempt", "Timeline", "timeline_of"]

#: The events that end an attempt, as the page words them.
ENDS = {
    "completed": "completed",
    "released": "failed (released)",
    "handed_back": "handed back (a retry later)",
    "expired": "lease expired (its worker stopped beating)",
    "reoffered": "re-offered (its worker was lost)",
    "cancelled": "cancelled",
}


@dataclass(frozen=True, slots=True)
class Attempt:
    """One claim of the job: by ``worker``, under ``token``, from
    ``started`` to ``ended`` (Unix seconds, Redis's clock; ``ended`` is
    ``None`` while it runs, or when the history no longer holds its end),
    closed by ``outcome`` (one of :data:`ENDS`' keys, ``None`` without an end)."""

    number: int
    worker: str
    token: int
    started: float
    ended: float | None = None
    outcome: str | None = None

    @property
    def duration(self) -> float | None:
        """Seconds from its start to its end; ``None`` without an end."""
        return None if self.ended is None else max(0.0, self.ended - self.started)

    @property
    def said(self) -> str:
        """Its outcome in words."""
        return "—" if self.outcome is None else ENDS.get(self.outcome, self.outcome)


@dataclass(frozen=True, slots=True)
class Timeline:
    """A job's attempts, oldest first, and the events no attempt holds."""

    attempts: tuple[Attempt, ...]
    others: tuple[HistoryEvent, ...]

    def running(self, token: int | None) -> Attempt | None:
        """The open attempt of the live claim's ``token``, if it is there."""
        if token is None:
            return None
        return next((a for a in self.attempts if a.token == token and a.ended is None), None)


def timeline_of(history: Sequence[HistoryEvent]) -> Timeline:
    """The attempts ``history`` (oldest first) tells of (see the module docstring)."""
    attempts: list[Attempt] = []
    others: list[HistoryEvent] = []
    open_at: dict[int, int] = {}  # token -> index of its open attempt
    for event in history:
        if event.event == "claimed":
            open_at[event.token] = len(attempts)
            attempts.append(Attempt(event.attempt, event.owner, event.token, event.at))
            continue
        index = open_at.pop(event.token, None) if event.token else None
        if index is None:
            others.append(event)
            continue
        attempts[index] = Attempt(
            attempts[index].number, attempts[index].worker, event.token,
            attempts[index].started, event.at, event.event,
        )  # fmt: skip
    return Timeline(tuple(attempts), tuple(others))
