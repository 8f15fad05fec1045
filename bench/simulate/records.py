"""What the simulated processes pass around, and the run's counters."""

from __future__ import annotations

from dataclasses import dataclass, field

from forum.deploy.history import History


@dataclass(slots=True, eq=False)
class Job:
    """One job: its name is its key (the Lens's claim key) and the
    history's name for it."""

    name: str
    slot: int
    queue: int
    written: float
    not_before: float = 0.0
    group: int = -1
    writer: str = ""
    misplaced: bool = False
    by: int = -1
    owner: int = -1


@dataclass(frozen=True, slots=True)
class Entry:
    """One Strand entry: a job's Write, or its Take, by ``origin``."""

    origin: str
    seq: int
    take: bool
    job: Job


@dataclass(slots=True)
class Stats:
    """The run's counters, in one place (the processes add to them)."""

    history: History = field(default_factory=History)
    takes: int = 0
    claims_refused: int = 0
    claim_latency: list[float] = field(default_factory=list)
    done_at: list[float] = field(default_factory=list)
    steals: int = 0
    reserves: int = 0
    borrows: int = 0
    misplaced: int = 0
    directory_reads: int = 0
    directory_writes: int = 0
    first_claim: set[str] = field(default_factory=set)
