"""How far each peer's wall clock is from ours, and a warning when too far.

Delayed and expiring tuples carry wall-clock times that every node applies
with its own clock (docs/replication.md "Clocks"), so a peer out of step
shows its tuples due, and expired, that much apart from us. Every
replication request and every answer carries its sender's clock::

    X-Forum-Clock: <unix time in seconds, e.g. 1764629400.123>

and each one is a sample of the peer's offset (its clock minus ours),
NTP-style but simpler (one stamp per message, not four)::

    caller, reading an answer   offset = T - (t0 + t3) / 2
                                (t0 sent, t3 answered, here; T stamped there
                                when it answered: off by at most half the
                                round trip, the peer's own work included)
    receiver, reading a request offset = T - t
                                (t the request came in: off by its one-way
                                delay, which only lowers the estimate)

A peer's offset is the **median of its last** :data:`SAMPLES` samples, not
the latest one: a single message held up (a busy event loop, a slow body, a
retried call) does not move it, so the warning does not flap, while a real
step of the peer's clock shows after three samples (a second or so: a
round of anti-entropy runs every ``anti_entropy_interval``, and pushes go
between).

When a peer's offset goes past ``warn_clock_skew``, one WARNING names it
(once per crossing, not every message); when it comes back, one INFO line.

The stamp is a header, outside the signed body and signature, so that nodes
of the previous release (which refuse unknown keys in a body, and check the
signature as it is) ignore it and keep replicating with newer ones. It only
feeds a gauge and a warning, never a decision; and signing it would not make
the estimate trustworthy anyway: whoever can alter traffic between two
nodes can skew it by delaying one direction only. A stamp that is not a
number is refused (400) with the request, and then nothing of it applies;
only requests with valid proof of the cluster key are read for it.
"""

from __future__ import annotations

import logging
import re
import statistics
from collections import deque
from collections.abc import Mapping
from typing import Protocol

from replication.errors import BadMessage

log = logging.getLogger(__name__)

CLOCK_HEADER = "X-Forum-Clock"
#: Samples a peer's offset is the median of.
SAMPLES = 5
#: Digits, an optional fraction: no sign, exponent, ``nan`` or ``inf``.
_STAMP = re.compile(r"\d{1,15}(\.\d{1,9})?")


def stamp(now: float) -> dict[str, str]:
    """The header carrying our clock ``now``, in milliseconds (31 bytes on the
    wire per message; finer would be noise under the round trip)."""
    return {CLOCK_HEADER: f"{now:.3f}"}


def read_stamp(headers: Mapping[str, str]) -> float | None:
    """The sender's clock in ``headers``; ``None`` without one (an older
    node); ``BadMessage`` if it is not a unix time in seconds."""
    text = headers.get(CLOCK_HEADER)
    if text is None:
        return None
    if not _STAMP.fullmatch(text):
        example = "e.g. 1764629400.123"
        raise BadMessage(
            f"{CLOCK_HEADER} must be a unix time in seconds ({example}), not {text[:40]!r}"
        )
    return float(text)


class ClockSamples(Protocol):
    """Where a transport reports what an answer said of its peer's clock."""

    def sample(self, peer: str, offset: float) -> None: ...


class ClockWatch:
    """Per peer (by the URL we dial it at), its clock offset: the median of
    its last :data:`SAMPLES` samples; warns when it crosses ``max_skew``.

    Only peers being watched (from :meth:`watch` to :meth:`forget`) are
    sampled, so an answer that comes back after its peer left the table
    leaves nothing behind, and says nothing.
    """

    def __init__(self, max_skew: float) -> None:
        if not max_skew > 0:
            raise ValueError("max_skew must be positive")
        self.max_skew = max_skew
        self._samples: dict[str, deque[float]] = {}
        self._out: set[str] = set()

    def watch(self, peer: str) -> None:
        """Sample ``peer`` from now on (it joined the table)."""
        self._samples.setdefault(peer, deque(maxlen=SAMPLES))

    def sample(self, peer: str, offset: float) -> None:
        """One sample of ``peer``'s offset (seconds, its clock minus ours)."""
        samples = self._samples.get(peer)
        if samples is None:
            return
        samples.append(offset)
        median = statistics.median(samples)
        if abs(median) > self.max_skew and peer not in self._out:
            self._out.add(peer)
            log.warning(
                "peer %s: its clock is %+.3f s from ours, more than warn_clock_skew "
                "(%g s): delayed and expiring tuples fall due and expire that much "
                "apart on the two nodes; run NTP (chrony) on both",
                peer,
                median,
                self.max_skew,
            )
        elif abs(median) <= self.max_skew and peer in self._out:
            self._out.discard(peer)
            log.info(
                "peer %s: its clock is back within warn_clock_skew (%g s) of ours (%+.3f s)",
                peer,
                self.max_skew,
                median,
            )

    def offset(self, peer: str) -> float | None:
        """``peer``'s offset in seconds (ms precision); ``None`` before any sample."""
        samples = self._samples.get(peer)
        return None if not samples else round(statistics.median(samples), 3)

    def offsets(self) -> dict[str, float]:
        """Every known offset, by peer URL."""
        return {peer: value for peer in self._samples if (value := self.offset(peer)) is not None}

    def forget(self, peer: str) -> None:
        """``peer`` left the table: its samples go, and later ones are ignored."""
        self._samples.pop(peer, None)
        self._out.discard(peer)
