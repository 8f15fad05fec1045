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

**Refused for skew.** Past ``max_clock_skew`` the two nodes refuse each
other's signed requests (:mod:`forum.replication.auth`), so no message between
them is accepted and none would be a sample. The refusal itself is one: a
node that refuses a request whose signature is good (only its time is off)
answers ``401 clock_skew`` with its clock in the body, and signs that answer
for the request, as it signs any answer; the caller checks the signature and
samples the offset from it (:meth:`ClockWatch.refused`). Each of the two
calls the other (anti-entropy runs both ways), so both measure it. The peer
is then *refused*: one WARNING with the offset (once, on the change, not per
call), ``clock_refused`` in its status row, until an answer is accepted
again (one INFO line).

**Whose clock is wrong.** Two nodes alone cannot tell; more can vote.
:meth:`ClockWatch.readiness` counts this node among the clocks that agree
with it: when the peers refusing it for skew outnumber the ones in step
with it plus itself (2 of 2 peers, 3 of 4), this node's clock is the odd one
out, and it is **not ready** (``/readyz`` 503): every write it takes stays
here while the others cannot hear it, and a load balancer should send them
elsewhere. Otherwise (the healthy majority, or one node of two) it stays
ready and says it is degraded: taking both nodes of two out of a load
balancer for one bad clock would stop the whole service, and the writes
each takes are still kept and replicate once the clocks agree.

The stamp is a header, outside the signed body and signature, so that nodes
of the previous release (which refuse unknown keys in a body, and check the
signature as it is) ignore it and keep replicating with newer ones. The
header only feeds a gauge and a warning, never a decision (the refusal's
clock, which decides readiness, is in its signed body); and signing it
would not make the estimate trustworthy anyway: whoever can alter traffic
between two nodes can skew it by delaying one direction only. A stamp that
is not a number is refused (400) with the request, and then nothing of it
applies; only requests with valid proof of the cluster key are read for it.
"""

from __future__ import annotations

import logging
import re
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from forum.node.api.status import PeerStatus, Readiness
from forum.replication.errors import BadMessage

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

    def refused(self, peer: str, offset: float) -> None: ...


class ClockWatch:
    """Per peer (by the URL we dial it at), its clock offset: the median of
    its last :data:`SAMPLES` samples; warns when it crosses ``max_skew``,
    and says when the peer refuses us, or we it, for skew (:meth:`refused`).

    Only peers being watched (from :meth:`watch` to :meth:`forget`) are
    sampled, so an answer that comes back after its peer left the table
    leaves nothing behind, and says nothing.
    """

    def __init__(self, max_skew: float, refuse_skew: float | None = None) -> None:
        """``max_skew``: the warning's bound (``warn_clock_skew``);
        ``refuse_skew``: the signatures' (``max_clock_skew``), for the words."""
        if not max_skew > 0:
            raise ValueError("max_skew must be positive")
        self.max_skew = max_skew
        self.refuse_skew = refuse_skew
        self._samples: dict[str, deque[float]] = {}
        self._out: set[str] = set()
        self._refused: set[str] = set()

    def watch(self, peer: str) -> None:
        """Sample ``peer`` from now on (it joined the table)."""
        self._samples.setdefault(peer, deque(maxlen=SAMPLES))

    def sample(self, peer: str, offset: float) -> None:
        """One sample of ``peer``'s offset (seconds, its clock minus ours),
        from a message that was accepted."""
        samples = self._samples.get(peer)
        if samples is None:
            return
        if peer in self._refused:
            # Accepted again: the refused samples say nothing of the clock now.
            self._refused.discard(peer)
            self._out.discard(peer)
            samples.clear()
            log.info(
                "peer %s: replication requests are accepted again both ways; its clock "
                "is %+.3f s from ours",
                peer,
                offset,
            )
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

    def refused(self, peer: str, offset: float) -> None:
        """``peer`` refused our request for clock skew, its clock ``offset``
        seconds from ours (from its signed answer): one WARNING when it starts."""
        samples = self._samples.get(peer)
        if samples is None:
            return
        if peer not in self._refused:
            self._refused.add(peer)
            self._out.add(peer)  # past any warning: no second line for it
            samples.clear()
            bound = "" if self.refuse_skew is None else f" ({self.refuse_skew:g} s)"
            log.warning(
                "peer %s: its clock is %+.3f s from ours, more than max_clock_skew%s: "
                "each node refuses the other's replication requests, so nothing written "
                "on one reaches the other until the clocks agree; run NTP (chrony) on both",
                peer,
                offset,
                bound,
            )
        samples.append(offset)

    def offset(self, peer: str) -> float | None:
        """``peer``'s offset in seconds (ms precision); ``None`` before any sample."""
        samples = self._samples.get(peer)
        return None if not samples else round(statistics.median(samples), 3)

    def offsets(self) -> dict[str, float]:
        """Every known offset, by peer URL."""
        return {peer: value for peer in self._samples if (value := self.offset(peer)) is not None}

    def refusing(self) -> dict[str, float]:
        """The peers refused for skew (both ways), and their offsets."""
        return {peer: value for peer, value in self.offsets().items() if peer in self._refused}

    def annotate(self, rows: Sequence[PeerStatus]) -> list[PeerStatus]:
        """The status ``rows`` with each peer's ``clock_refused`` said."""
        return [replace(row, clock_refused=row.url in self._refused) for row in rows]

    def readiness(self) -> Readiness:
        """Not ready when the peers refusing this node for skew outnumber the
        ones in step with it, itself counted (its clock is the odd one out);
        degraded while any peer is refused (module docstring)."""
        refusing = self.refusing()
        if not refusing:
            return Readiness()
        in_step = len(self.offsets()) - len(refusing)
        median = statistics.median(refusing.values())
        # Their clocks minus ours: ours is off by the opposite.
        ours = f"{-median:+.3f} s"
        if len(refusing) > in_step + 1:
            return Readiness(
                not_ready=(
                    f"this node's clock is {ours} from {len(refusing)} of its "
                    f"{len(refusing) + in_step} peers, which refuse its replication "
                    "requests for clock skew: writes here would not reach them; fix "
                    "its clock (NTP)"
                )
            )
        return Readiness(
            degraded=tuple(
                f"peer {peer}: its clock is {offset:+.3f} s from ours; replication "
                "with it is refused both ways for clock skew"
                for peer, offset in sorted(refusing.items())
            )
        )

    def forget(self, peer: str) -> None:
        """``peer`` left the table: its samples go, and later ones are ignored."""
        self._samples.pop(peer, None)
        self._out.discard(peer)
        self._refused.discard(peer)
