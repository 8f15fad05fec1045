"""Coordination for Forum workers: the Redis-backed Lens and the worker runtime."""

from forum.coordinator.authority import ClaimAuthority, Failed, HeldClaim
from forum.coordinator.claim import Claim
from forum.coordinator.deadletter import DeadLetter
from forum.coordinator.errors import (
    AlreadyClaimed,
    AlreadyDone,
    AttemptsSpent,
    ClaimLost,
    LensError,
    LensStateLost,
    LensUnavailable,
    NotDue,
)
from forum.coordinator.job import Backoff, GiveUp, Handler, Job, RetryAfter
from forum.coordinator.lanes import Lane, Lanes
from forum.coordinator.lens import Lens
from forum.coordinator.presence import WorkerPresence
from forum.coordinator.reaper import Reaper
from forum.coordinator.records import CancelOutcome, HistoryEvent, Holder, KeyState
from forum.coordinator.settings import LensConfig
from forum.coordinator.spaces import TakeOnly, WorkSpace
from forum.coordinator.stats import WorkerStats
from forum.coordinator.worker import Worker

__all__ = [
    "AlreadyClaimed",
    "AlreadyDone",
    "AttemptsSpent",
    "Backoff",
    "CancelOutcome",
    "Claim",
    "ClaimAuthority",
    "ClaimLost",
    "DeadLetter",
    "Failed",
    "GiveUp",
    "Handler",
    "HeldClaim",
    "HistoryEvent",
    "Holder",
    "Job",
    "KeyState",
    "Lane",
    "Lanes",
    "Lens",
    "LensConfig",
    "LensError",
    "LensStateLost",
    "LensUnavailable",
    "NotDue",
    "Reaper",
    "RetryAfter",
    "TakeOnly",
    "WorkSpace",
    "Worker",
    "WorkerPresence",
    "WorkerStats",
]
