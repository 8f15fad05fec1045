"""What each panel shows, as plain values the templates lay out.

Every figure comes from what the API serves: the status document
(:class:`~node.web_status.NodeStatus`, this node's and each peer's, through
the sampler's rings) and ``GET /v1/prefixes`` (:meth:`node.web_ops.Space.prefixes`,
called as the route calls it). Nothing here changes anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from msgspec import UnsetType

from dashboard.sampler import NodeHistory
from node.web_model import PrefixBody
from node.web_status import NodeStatus, PeerStatus

#: A sparkline's size in the page, in CSS pixels.
SPARK_WIDTH, SPARK_HEIGHT = 160, 28


@dataclass(frozen=True, slots=True)
class Sparkline:
    """A rate over the kept samples: its SVG polyline, and its latest value."""

    points: str
    latest: float
    peak: float

    @classmethod
    def of(cls, rates: Sequence[float], keep: int) -> Sparkline:
        peak = max(rates, default=0.0)
        step = SPARK_WIDTH / max(1, keep - 1)
        # Right-aligned: the newest sample at the right edge, however few there are.
        start = SPARK_WIDTH - step * (len(rates) - 1)
        points = " ".join(
            f"{start + i * step:.1f},{SPARK_HEIGHT - 1 - (SPARK_HEIGHT - 2) * r / (peak or 1):.1f}"
            for i, r in enumerate(rates)
        )
        return cls(points, rates[-1] if rates else 0.0, peak)


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node of the Overview (and of Guarantees)."""

    url: str
    name: str
    here: bool
    error: str | None
    status: NodeStatus | None
    writes: Sparkline
    takes: Sparkline
    double_takes_last_minute: int

    @property
    def held_back(self) -> int:
        """Seqs this node holds that compaction may not drop yet (some member
        lacks them): its vector above its horizon, summed over origins."""
        s = self.status
        if s is None:
            return 0
        return sum(max(0, seq - s.horizon.get(origin, 0)) for origin, seq in s.vector.items())


def node_rows(histories: Sequence[NodeHistory], here: str, keep: int) -> list[NodeRow]:
    """The Overview's rows: this node first, then its peers by name."""
    ordered = sorted(
        histories, key=lambda h: (h.url != here, h.latest.node_id if h.latest else h.url)
    )
    return [
        NodeRow(
            url=h.url,
            name=h.latest.node_id if h.latest is not None else h.url,
            here=h.url == here,
            error=h.error,
            status=h.latest,
            writes=Sparkline.of(h.rates(lambda s: s.writes), keep),
            takes=Sparkline.of(h.rates(lambda s: s.takes), keep),
            double_takes_last_minute=h.per_minute(lambda s: s.double_takes),
        )
        for h in ordered
    ]


def peer_state(peer: PeerStatus) -> str:
    """alive, suspect, dead, or forgotten (a dead peer past ``forget_after``)."""
    return "forgotten" if peer.forgotten else peer.state


def health(status: NodeStatus) -> tuple[bool, str]:
    """The cluster's health in one line, as this node sees it, and whether all is well."""
    peers = status.peers
    if not peers:
        return True, "a single node: no peers configured"
    states = [peer_state(p) for p in peers]
    alive = states.count("alive")
    behind = sum(p.behind or 0 for p in peers if peer_state(p) == "alive")
    unknown = sum(1 for p in peers if p.behind is None and peer_state(p) == "alive")
    parts = [
        f"all {len(peers)} peers alive"
        if alive == len(peers)
        else f"{alive} of {len(peers)} peers alive ("
        + ", ".join(
            f"{states.count(s)} {s}" for s in ("suspect", "dead", "forgotten") if s in states
        )
        + ")"
    ]
    lags = [p.lag_seconds for p in peers if peer_state(p) == "alive" and p.lag_seconds]
    if behind == 0 and unknown == 0:
        parts.append("converged")
    elif behind:
        most = f" (up to {max(lags):.1f} s old)" if lags else ""
        parts.append(f"not converged: {behind} entries behind{most}")
    else:
        parts.append("convergence unknown")
    ok = alive == len(peers) and behind == 0 and unknown == 0
    return ok, ", ".join(parts)


@dataclass(frozen=True, slots=True)
class PrefixRow:
    """One row of the Prefixes panel: a group of tuples, or a paused or limited prefix."""

    prefix: str
    #: The prefix as the pause route takes it in its path (text; ``None``: not
    #: UTF-8, shown base64, and not pausable from the page).
    pausable: str | None
    live: int
    delayed: int
    reserved: int
    paused: bool
    held: int | None
    limit: int | None

    @property
    def fill(self) -> float | None:
        """How full its limit is (0 to 1), when it has one."""
        if self.limit is None or self.held is None:
            return None
        return min(1.0, self.held / self.limit) if self.limit else 1.0

    @classmethod
    def of(cls, body: PrefixBody) -> PrefixRow:
        text = body.prefix if isinstance(body.prefix, str) else None
        return cls(
            prefix=text if text is not None else f"base64:{body.prefix_b64}",
            pausable=text,
            live=_count(body.live),
            delayed=_count(body.delayed),
            reserved=_count(body.reserved),
            paused=body.paused,
            held=body.held,
            limit=body.limit,
        )


def _count(figure: int | UnsetType) -> int:
    return 0 if isinstance(figure, UnsetType) else figure


def size(n: float) -> str:
    """Bytes for people: 1.5 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def ago(seconds: float | None) -> str:
    """Seconds for people: 3 s ago, 2 min ago, never."""
    if seconds is None:
        return "never"
    if seconds < 90:
        return f"{seconds:.1f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def stamp(unix: float) -> str:
    """A Unix time for people, in UTC: 2026-12-02 02:45:07 UTC."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
