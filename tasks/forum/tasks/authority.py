"""What the task layer needs of the Lens: the worker's claims
(:class:`forum.coordinator.ClaimAuthority`) and the job records beside them
(:mod:`forum.coordinator.records`).

``forum.coordinator.Lens`` (Redis) and ``forum.coordinator.memory.MemoryAuthority`` are
both one; the coordinator's contract test runs the same checks on the two
(tests/coordinator/test_authority_contract.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

from forum.coordinator import ClaimAuthority, HeldClaim
from forum.coordinator.jobindex import JobCounts, JobFound, JobQuery
from forum.coordinator.records import (
    CancelOutcome,
    FieldValue,
    HistoryEvent,
    KeyState,
    NewRecord,
    ScanKind,
)

#: A record field's value as the Lens takes it.
Field = FieldValue

__all__ = ["CancelOutcome", "Field", "HistoryEvent", "KeyState", "TaskAuthority"]


class TaskAuthority(ClaimAuthority, Protocol):
    """A claim authority that also keeps job records (forum.coordinator.records)."""

    async def record(self, claim: HeldClaim, fields: Mapping[str, Field], ttl: float) -> None:
        """Write ``fields`` into the key's record while ``claim`` is live;
        ``ClaimLost`` otherwise (fenced)."""
        ...

    async def record_enqueued(self, key: str, fields: Mapping[str, Field], ttl: float) -> bool:
        """Write the record only if the key has none (unfenced, for producers)."""
        ...

    async def record_enqueued_many(self, records: Sequence[NewRecord]) -> list[bool]:
        """:meth:`record_enqueued` of each, in one round trip."""
        ...

    async def forget_record(self, key: str) -> bool:
        """Drop the key's record unless a claim on it is live (``AlreadyClaimed``)."""
        ...

    async def inspect(self, key: str) -> KeyState:
        """The key's claim, done marker and record, in one round trip."""
        ...

    async def inspect_many(self, keys: Sequence[str]) -> list[KeyState]:
        """:meth:`inspect` of each key, in one round trip."""
        ...

    async def history(self, key: str) -> list[HistoryEvent]:
        """The key's claim events, oldest first."""
        ...

    async def cancel(self, key: str) -> CancelOutcome: ...

    async def job_counts(self) -> JobCounts:
        """The job index's counts, per task and state (forum.coordinator.jobindex)."""
        ...

    async def find_jobs(self, query: JobQuery) -> JobFound:
        """A page of the job index (forum.coordinator.jobindex)."""
        ...

    async def requeued(self, key: str) -> bool:
        """A dead job's letter was put back to work: the index has it queued."""
        ...

    def scan(self, kind: ScanKind, count: int = 100) -> AsyncIterator[str]:
        """Every key with a record (``"task"``) or a live claim (``"claim"``)."""
        ...
