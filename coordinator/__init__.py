"""Coordination for Forum workers: the Redis-backed Lens and the worker runtime."""

from coordinator.authority import ClaimAuthority, HeldClaim
from coordinator.deadletter import DeadLetter
from coordinator.errors import (
    AlreadyClaimed,
    AlreadyDone,
    ClaimLost,
    LensError,
    LensStateLost,
    LensUnavailable,
)
from coordinator.job import Backoff, GiveUp, Handler, Job, RetryAfter
from coordinator.lens import Claim, Lens, LensConfig
from coordinator.presence import WorkerPresence
from coordinator.reaper import Reaper
from coordinator.records import CancelOutcome, HistoryEvent, Holder, KeyState
from coordinator.spaces import TakeOnly, WorkSpace
from coordinator.worker import Worker, WorkerStats

__all__ = [
    "AlreadyClaimed",
    "AlreadyDone",
    "Backoff",
    "CancelOutcome",
    "Claim",
    "ClaimAuthority",
    "ClaimLost",
    "DeadLetter",
    "GiveUp",
    "Handler",
    "HeldClaim",
    "HistoryEvent",
    "Holder",
    "Job",
    "KeyState",
    "Lens",
    "LensConfig",
    "LensError",
    "LensStateLost",
    "LensUnavailable",
    "Reaper",
    "RetryAfter",
    "TakeOnly",
    "WorkSpace",
    "Worker",
    "WorkerPresence",
    "WorkerStats",
]
