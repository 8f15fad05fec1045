"""What each panel shows, as plain values the templates lay out.

Every figure comes from what the API serves: the status document
(:class:`~forum.node.api.status.NodeStatus`, this node's and each peer's, through
the sampler's rings) and ``GET /v1/prefixes`` (:meth:`forum.node.http.ops.Space.prefixes`,
called as the route calls it); the Prefixes panel adds what only the
dashboard counts (forum.dashboard.throughput), the dead letters per group, and
the workers' presence records. Nothing here changes anything.
"""

from __future__ import annotations

import base64
import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from msgspec import UnsetType, structs

from forum.dashboard.sampler import NodeHistory
from forum.dashboard.throughput import Rate
from forum.node.api.model import PrefixBody
from forum.node.api.status import NodeStatus, PeerStatus

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


#: Seconds an alive peer may lag (:attr:`PeerStatus.lag_seconds`: the age of
#: the oldest entry here it lacks) and still count as converging, not as a
#: concern. A peer that takes every write is behind by the writes of the last
#: moment whenever writes flow: its vector reaches this node with gossip (each
#: anti-entropy round, a second by default) and the lag is measured to half
#: a second; five seconds is over two of the dashboard's samples (each 2 s)
#: and a few rounds, so only a peer that stays behind raises the attention.
LAG_THRESHOLD = 5.0


def health(status: NodeStatus) -> tuple[bool, str]:
    """The cluster's health in one line, as this node sees it, and whether
    all is well: peers behind by at most :data:`LAG_THRESHOLD` seconds are
    converging (well); further behind, or behind by an unknown age, not
    converged (attention)."""
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
    lagging = [p for p in peers if peer_state(p) == "alive" and (p.behind or 0)]
    lags = [p.lag_seconds for p in lagging if p.lag_seconds is not None]
    # Behind, but by no entry older than the threshold: catching up as usual.
    converging = len(lags) == len(lagging) and max(lags, default=0.0) <= LAG_THRESHOLD
    most = f" (up to {max(lags):.1f} s old)" if lags else ""
    if behind == 0 and unknown == 0:
        parts.append("converged")
    elif behind and converging:
        parts.append(f"converging: {behind} entries behind{most}, within {LAG_THRESHOLD:g} s")
    elif behind:
        parts.append(f"not converged: {behind} entries behind{most}")
    else:
        parts.append("convergence unknown")
    ok = alive == len(peers) and unknown == 0 and (behind == 0 or converging)
    return ok, ", ".join(parts)


#: Where the task layer and the workers put dead letters, by default:
#: ``forum.coordinator.deadletter.DEFAULT_DEAD_PREFIX``, the ``dead_prefix`` of the
#: ``forum.App`` the Jobs panel opens (a test holds them equal). Not imported:
#: a node-only install has no coordinator (no Redis client).
DEAD_PREFIX = b"dead/"


class Present(Protocol):
    """What the Prefixes panel reads of a worker's presence record
    (``forum.coordinator.presence.WorkerPresence``)."""

    @property
    def heads(self) -> tuple[bytes, ...]: ...
    @property
    def retrying(self) -> tuple[bytes, ...]: ...
    def alive(self, now: float | None = None) -> bool: ...


def group_of(head: bytes, separator: bytes) -> bytes | None:
    """The group of a payload known by its first bytes: up to and including
    its first separator; ``None`` when there is none in them (a payload
    without one is a group of its own, which they cannot name for sure)."""
    cut = head.find(separator)
    return None if cut < 0 else head[: cut + len(separator)]


@dataclass(frozen=True, slots=True)
class LensGroups:
    """Per group, the jobs the workers run now and the retries they hold
    parked (waiting out a backoff), as their presence records said at their
    last beats (dead workers left out: their jobs come back to the space)."""

    in_flight: Counter[bytes]
    retrying: Counter[bytes]

    @classmethod
    def of(cls, workers: Iterable[Present], separator: bytes, now: float) -> LensGroups:
        in_flight: Counter[bytes] = Counter()
        retrying: Counter[bytes] = Counter()
        for worker in workers:
            if not worker.alive(now):
                continue
            for heads, counter in ((worker.heads, in_flight), (worker.retrying, retrying)):
                counter.update(g for g in (group_of(h, separator) for h in heads) if g is not None)
        return cls(in_flight, retrying)


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
    #: Seconds since this node came to hold its oldest live tuple (none: no
    #: live tuple, or not dated cheaply).
    oldest_age: float | None = None
    #: Dead letters of the group: live tuples under the dead prefix + it.
    dead: int = 0
    #: Jobs running and retries waiting, from the Lens (``None``: no Lens,
    #: or it did not answer).
    in_flight: int | None = None
    retrying: int | None = None
    #: Its writes and takes per second here (``None``: no figure yet).
    rate: Rate | None = None
    #: Tuples of the group handed out here that a peer took too (``None``:
    #: grouped at another separator than the node counts them at).
    double_takes: int | None = None

    @property
    def fill(self) -> float | None:
        """How full its limit is (0 to 1), when it has one."""
        if self.limit is None or self.held is None:
            return None
        return min(1.0, self.held / self.limit) if self.limit else 1.0

    @classmethod
    def of(cls, body: PrefixBody) -> PrefixRow:
        text = body.prefix if isinstance(body.prefix, str) else None
        age = body.oldest_age
        return cls(
            prefix=text if text is not None else f"base64:{body.prefix_b64}",
            pausable=text,
            live=_count(body.live),
            delayed=_count(body.delayed),
            reserved=_count(body.reserved),
            paused=body.paused,
            held=body.held,
            limit=body.limit,
            oldest_age=None if isinstance(age, UnsetType) else age,
        )

    @classmethod
    def empty(cls, prefix: bytes) -> PrefixRow:
        """The row of a group with nothing here but dead letters, jobs in
        the Lens or double takes."""
        try:
            text: str | None = prefix.decode()
        except UnicodeDecodeError:
            text = None
        shown = text if text is not None else f"base64:{base64.b64encode(prefix).decode()}"
        return cls(shown, text, 0, 0, 0, paused=False, held=None, limit=None)


def _count(figure: int | UnsetType) -> int:
    return 0 if isinstance(figure, UnsetType) else figure


def _key(body: PrefixBody) -> bytes:
    """A row's prefix as bytes (the JSON document spells it text or base64)."""
    if isinstance(body.prefix, str):
        return body.prefix.encode()
    return base64.b64decode(body.prefix_b64 if isinstance(body.prefix_b64, str) else "")


def merged_prefixes(
    here: Sequence[PrefixBody], elsewhere: Iterable[Sequence[PrefixBody]]
) -> list[PrefixBody]:
    """This group's rows of ``GET /v1/prefixes?separator=`` with the other
    groups' added in: per prefix, live, delayed and reserved summed over the
    groups (a tuple is in one group), the oldest age the greatest, paused if
    paused anywhere; a limit's fill is this node's (limits are per node)."""
    rows = {_key(body): body for body in here}
    for bodies in elsewhere:
        for body in bodies:
            key = _key(body)
            mine = rows.get(key)
            if mine is None:
                rows[key] = structs.replace(body, held=None, limit=None)
                continue
            ages = [a for a in (mine.oldest_age, body.oldest_age) if isinstance(a, float | int)]
            rows[key] = structs.replace(
                mine,
                live=_count(mine.live) + _count(body.live),
                delayed=_count(mine.delayed) + _count(body.delayed),
                reserved=_count(mine.reserved) + _count(body.reserved),
                paused=mine.paused or body.paused,
                oldest_age=max(ages) if ages else mine.oldest_age,
            )
    return [rows[key] for key in sorted(rows)]


def prefix_rows(
    bodies: Sequence[PrefixBody],
    dead: Mapping[bytes, int],
    rates: Mapping[bytes, Rate] | None,
    lens: LensGroups | None,
    most: int,
    *,
    double_takes: Mapping[bytes, int] | None = None,
) -> list[PrefixRow]:
    """The panel's rows: the node's (``GET /v1/prefixes?separator=``), with
    each group's dead letters, rates, jobs in the Lens and double takes
    (``Forum.double_takes_by_prefix``; ``None`` when not grouped as the node
    counts them); then a row for each group that has only dead letters, jobs
    in the Lens or double takes here, while there are fewer than ``most``
    rows. Sorted by prefix. The node's groups under :data:`DEAD_PREFIX` are
    no rows of their own: they are the dead letters, counted in ``dead`` in
    their own group's row."""
    rows = {
        key: PrefixRow.of(body)
        for body in bodies
        if not (key := _key(body)).startswith(DEAD_PREFIX)
    }
    extra = set(dead) | (set() if lens is None else set(lens.in_flight) | set(lens.retrying))
    extra |= set(double_takes or ())
    for group in sorted(extra - rows.keys()):
        if len(rows) >= most:
            break
        rows[group] = PrefixRow.empty(group)
    return [
        dataclasses.replace(
            row,
            dead=dead.get(group, 0),
            rate=None if rates is None else rates.get(group, Rate(0.0, 0.0)),
            in_flight=None if lens is None else lens.in_flight[group],
            retrying=None if lens is None else lens.retrying[group],
            double_takes=None if double_takes is None else double_takes.get(group, 0),
        )
        for group, row in sorted(rows.items())
    ]


def size(n: float) -> str:
    """Bytes for people: 1.5 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float | None) -> str:
    """An age for people: 0.4 s, 12 s, 3 min, 2.5 h, or — for none."""
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def per_second(rate: float) -> str:
    """A rate for people: 0.05, 2.3, 140."""
    if rate == 0:
        return "0"
    return f"{rate:.2f}" if rate < 10 else f"{rate:.0f}"


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
