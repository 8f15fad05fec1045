"""Replication's tuning knobs: one frozen value, from defaults and ``FORUM_REPL_*``.

Every field can be set in the environment as ``FORUM_REPL_<FIELD>`` (upper
case), e.g. ``FORUM_REPL_ANTI_ENTROPY_INTERVAL=0.2``; tests and the benchmark
use that to run with short intervals. Sizes take a unit (``64MiB``), times
are seconds. An unknown ``FORUM_REPL_*`` variable or a bad value is a
one-line ``ValueError`` naming the variable: no option is silently ignored.
The loader is the node's (:mod:`forum.node.config.settings`); the fields' annotations say
what each accepts.

The defaults suit a LAN cluster of a handful of nodes: pushes leave within a
couple of milliseconds, a missed push is healed within about a second, and a
dead peer costs each node at most ``queue_entries`` queued entries.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from forum.node.config.settings import (
    Layer,
    PositiveInt,
    PositiveSeconds,
    Seconds,
    SettingError,
    Size,
    build,
    check_fields,
)

ENV_PREFIX = "FORUM_REPL_"
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """How often, how much and how patiently a node talks to its peers."""

    #: Seconds a push on a busy link waits for more entries before it leaves (a few
    #: ms, not seconds); on an idle link a new entry leaves at once.
    batch_delay: Seconds = 0.002
    #: The most entries in one push.
    max_batch: PositiveInt = 512
    #: Pushes to one peer in flight at once. Entries apply in any order, so more
    #: than one is safe; it helps on links with a long round trip, and costs
    #: smaller batches (more requests, more bytes per entry) on a LAN.
    max_in_flight: PositiveInt = 1
    #: The most entry bytes in one push (one larger entry still goes alone).
    max_batch_bytes: Size = 1 * MiB
    #: Per-peer push queue bounds; past either, new entries are dropped for that
    #: peer and anti-entropy brings them over instead.
    queue_entries: PositiveInt = 20_000
    queue_bytes: Size = 64 * MiB
    #: Seconds between anti-entropy rounds with each peer (jittered by +-20%).
    anti_entropy_interval: PositiveSeconds = 1.0
    #: Seconds to let in-flight pushes land before pulling what a peer's
    #: vector says we lack (avoids fetching the same entries twice).
    settle_delay: Seconds = 0.05
    #: The most entries / entry bytes in one anti-entropy page.
    page_entries: PositiveInt = 2_000
    page_bytes: Size = 4 * MiB
    #: Seconds to open a connection to a peer, and for a whole call.
    connect_timeout: PositiveSeconds = 1.0
    request_timeout: PositiveSeconds = 10.0
    #: Attempts per call (1 = no retry), and the jittered exponential backoff
    #: between them (:class:`forum.node.core.backoff.Backoff`, equal jitter): the wait
    #: after the n-th failure is uniform in [c/2, c] where
    #: c = min(backoff_max, backoff_base * 2**(n-1)).
    attempts: PositiveInt = 3
    backoff_base: Seconds = 0.05
    backoff_max: Seconds = 1.0
    #: A peer failing for this many seconds goes from suspect to dead.
    dead_after: Seconds = 5.0
    #: Signed requests older or newer than this many seconds are refused.
    max_clock_skew: Seconds = 60.0
    #: A peer whose wall clock is further than this many seconds from ours is
    #: warned about: delayed and expiring tuples fall due and expire that much
    #: apart on the two nodes (:mod:`forum.replication.clocks`).
    warn_clock_skew: PositiveSeconds = 1.0
    #: A pushed entry may be at most this far past the highest seq held of its
    #: origin; further ones are refused as forged (they would make the Strand
    #: reserve room for the gap). Anti-entropy never needs more than 1.
    max_seq_gap: PositiveInt = 1_000_000
    #: How a tuple written on a peer is ranked for its turn here (its remote
    #: delay is the node's ``remote_delay`` times the rank): ``members``, among
    #: the members alive, the writer first (:mod:`forum.replication.ranking`);
    #: ``slots``, 1 to 4 by a hash, as a node alone does (kept to compare).
    ranking: Literal["members", "slots"] = "members"
    #: Whether a tuple's writer, while alive, is the only node that hands it
    #: out: the others ask it to lend them its tuples (:mod:`forum.replication.lending`).
    #: Off: each node hands out the tuples it holds at their turns (kept to compare).
    lending: bool = True
    #: Seconds a node waits for a writer to lend before it takes the tuple
    #: itself (a writer that slow is as good as unreachable for a taker).
    lend_timeout: PositiveSeconds = 0.2
    #: ``forum serve --repair``: seconds a repair waits for every peer before
    #: it settles for those that answered (at least one) (:mod:`forum.replication.repair`).
    repair_wait: PositiveSeconds = 30.0

    def __post_init__(self) -> None:
        check_fields(self)
        if self.backoff_max < self.backoff_base:
            raise SettingError(
                "backoff_max must be at least backoff_base", "backoff_max", "backoff_base"
            )
        if self.warn_clock_skew >= self.max_clock_skew:
            # Past max_clock_skew signed requests are refused: the warning would never come.
            raise SettingError(
                "warn_clock_skew must be less than max_clock_skew",
                "warn_clock_skew",
                "max_clock_skew",
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReplicationConfig:
        """The defaults, overridden by ``FORUM_REPL_<FIELD>`` in ``env`` (or ``os.environ``)."""
        return build(cls, [Layer.environment(os.environ if env is None else env, ENV_PREFIX)])
