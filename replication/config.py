"""Replication's tuning knobs: one frozen value, from defaults and ``FORUM_REPL_*``.

Every field can be set in the environment as ``FORUM_REPL_<FIELD>`` (upper
case), e.g. ``FORUM_REPL_ANTI_ENTROPY_INTERVAL=0.2``; tests and the benchmark
use that to run with short intervals. An unknown ``FORUM_REPL_*`` variable or
a value of the wrong type is a ``ValueError``: no option is silently ignored.

The defaults suit a LAN cluster of a handful of nodes: pushes leave within a
couple of milliseconds, a missed push is healed within about a second, and a
dead peer costs each node at most ``queue_entries`` queued entries.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENV_PREFIX = "FORUM_REPL_"
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """How often, how much and how patiently a node talks to its peers."""

    #: Seconds a push on a busy link waits for more entries before it leaves (a few
    #: ms, not seconds); on an idle link a new entry leaves at once.
    batch_delay: float = 0.002
    #: The most entries in one push.
    max_batch: int = 512
    #: Pushes to one peer in flight at once. Entries apply in any order, so more
    #: than one is safe; it helps on links with a long round trip, and costs
    #: smaller batches (more requests, more bytes per entry) on a LAN.
    max_in_flight: int = 1
    #: The most entry bytes in one push (one larger entry still goes alone).
    max_batch_bytes: int = 1 * MiB
    #: Per-peer push queue bounds; past either, new entries are dropped for that
    #: peer and anti-entropy brings them over instead.
    queue_entries: int = 20_000
    queue_bytes: int = 64 * MiB
    #: Seconds between anti-entropy rounds with each peer (jittered by +-20%).
    anti_entropy_interval: float = 1.0
    #: Seconds to let in-flight pushes land before pulling what a peer's
    #: vector says we lack (avoids fetching the same entries twice).
    settle_delay: float = 0.05
    #: The most entries / entry bytes in one anti-entropy page.
    page_entries: int = 2_000
    page_bytes: int = 4 * MiB
    #: Seconds to open a connection to a peer, and for a whole call.
    connect_timeout: float = 1.0
    request_timeout: float = 10.0
    #: Attempts per call (1 = no retry), and the jittered exponential backoff
    #: between them (:class:`node.backoff.Backoff`, equal jitter): the wait
    #: after the n-th failure is uniform in [c/2, c] where
    #: c = min(backoff_max, backoff_base * 2**(n-1)).
    attempts: int = 3
    backoff_base: float = 0.05
    backoff_max: float = 1.0
    #: A peer failing for this many seconds goes from suspect to dead.
    dead_after: float = 5.0
    #: A learned (not configured) peer dead this long is forgotten.
    forget_after: float = 300.0
    #: Signed requests older or newer than this many seconds are refused.
    max_clock_skew: float = 60.0
    #: A pushed entry may be at most this far past the highest seq held of its
    #: origin; further ones are refused as forged (they would make the Strand
    #: reserve room for the gap). Anti-entropy never needs more than 1.
    max_seq_gap: int = 1_000_000

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int":
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ValueError(f"{f.name} must be a positive integer, not {value!r}")
            elif not (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and math.isfinite(value)
                and value >= 0
            ):
                raise ValueError(f"{f.name} must be a finite number of seconds >= 0")
        for name in ("anti_entropy_interval", "connect_timeout", "request_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.backoff_max < self.backoff_base:
            raise ValueError("backoff_max must be at least backoff_base")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReplicationConfig:
        """The defaults, overridden by ``FORUM_REPL_<FIELD>`` in ``env`` (or ``os.environ``)."""
        env = os.environ if env is None else env
        fields = {f.name: f for f in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}
        for name, text in env.items():
            if not name.startswith(ENV_PREFIX):
                continue
            key = name[len(ENV_PREFIX) :].lower()
            if key not in fields:
                raise ValueError(f"{name}: unknown replication setting")
            try:
                changes[key] = int(text) if fields[key].type == "int" else float(text)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from exc
        try:
            return cls(**changes)
        except ValueError as exc:
            raise ValueError(f"{ENV_PREFIX}*: {exc}") from exc
