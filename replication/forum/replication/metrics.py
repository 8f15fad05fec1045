"""Replication's Prometheus metrics, in the node app's own registry.

Counters (``peer`` is the peer's URL; ``kind`` the message)::

    forum_replication_entries_sent_total{peer,kind}       entries we pushed / served in pages
    forum_replication_entries_received_total{peer,kind}   entries that came in (duplicates too)
    forum_replication_entries_applied_total{peer,kind}    ... of which were new here
    forum_replication_bytes_sent_total{peer,kind}         message bodies we sent
    forum_replication_bytes_received_total{peer,kind}     message bodies we received
    forum_replication_push_dropped_total{peer,reason}     entries not pushed, left to anti-entropy
                                                          (queue_full, peer_down, push_failed)
    forum_replication_anti_entropy_rounds_total{peer,result}
    forum_replication_requests_refused_total{reason}      unauthorized, clock_skew, bad_message,
                                                          self
    forum_replication_divergent_entries_total{peer}       entries held here that differed from
                                                          their origin's (that peer), replaced
    forum_replication_loans_total{peer,result}            asks to a writer to lend its tuples
                                                          (lent, empty, timeout, failed)
    forum_replication_lent_entries_total{peer}            tuples that writer lent us

Gauges, read from the peer table at each scrape::

    forum_replication_peers{state}                        how many peers are alive/suspect/dead
    forum_replication_peer_up{peer}                       1 if alive
    forum_replication_peer_behind_entries{peer}           entries we hold that it lacks
    forum_replication_peer_last_contact_age_seconds{peer}
    forum_replication_peer_queue_entries{peer}            entries waiting in its push queue
    forum_replication_peer_holds_back_entries{peer}       seqs held here it does not hold: how
                                                          far it keeps the compaction horizon
                                                          below this node's vector
    forum_replication_peer_forgotten{peer}                1 if not heard from for forget_after
                                                          (it no longer holds compaction back)
    forum_replication_peer_clock_offset_seconds{peer}     its wall clock minus ours, once
                                                          measured (forum.replication.clocks)
    forum_replication_peer_lag_seconds{peer}              how long ago it last held all we
                                                          held then, once heard
                                                          (forum.replication.lag)

Double takes are the node's own ``forum_double_takes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from forum.node.api.status import PeerStatus


class ReplicationMetrics:
    """The counters replication bumps, and the gauges it exposes."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Counter:
            return Counter(f"forum_replication_{name}", doc, labels, registry=registry)

        peer_kind = ("peer", "kind")
        self._entries_sent = counter("entries_sent", "Entries sent to peers.", peer_kind)
        self._entries_received = counter(
            "entries_received", "Entries received from peers, duplicates included.", peer_kind
        )
        self._entries_applied = counter(
            "entries_applied", "Entries received from peers that were new here.", peer_kind
        )
        self._bytes_sent = counter("bytes_sent", "Message body bytes sent.", peer_kind)
        self._bytes_received = counter("bytes_received", "Message body bytes received.", peer_kind)
        self._dropped = counter(
            "push_dropped",
            "Entries not pushed to a peer (left to anti-entropy).",
            ("peer", "reason"),
        )
        self._rounds = counter(
            "anti_entropy_rounds", "Anti-entropy exchanges with a peer.", ("peer", "result")
        )
        self._refused = counter("requests_refused", "Replication requests refused.", ("reason",))
        self._divergent = counter(
            "divergent_entries",
            "Entries held here that differed from their origin's copy, replaced by it.",
            ("peer",),
        )
        self._loans = counter(
            "loans", "Asks to a writer to lend its tuples, by result.", ("peer", "result")
        )
        self._lent = counter("lent_entries", "Tuples a writer lent this node.", ("peer",))
        self._registry = registry
        self._collector: Collector | None = None

    def sent_entries(self, peer: str, kind: str, entries: int) -> None:
        if entries:
            self._entries_sent.labels(peer, kind).inc(entries)

    def received(self, peer: str, kind: str, entries: int, applied: int, body_bytes: int) -> None:
        if entries:
            self._entries_received.labels(peer, kind).inc(entries)
        if applied:
            self._entries_applied.labels(peer, kind).inc(applied)
        self._bytes_received.labels(peer, kind).inc(body_bytes)

    def received_bytes(self, peer: str, kind: str, body_bytes: int) -> None:
        self._bytes_received.labels(peer, kind).inc(body_bytes)

    def sent_bytes(self, peer: str, kind: str, body_bytes: int) -> None:
        self._bytes_sent.labels(peer, kind).inc(body_bytes)

    def dropped(self, peer: str, reason: str, entries: int) -> None:
        if entries:
            self._dropped.labels(peer, reason).inc(entries)

    def round(self, peer: str, ok: bool) -> None:
        self._rounds.labels(peer, "ok" if ok else "failed").inc()

    def refused(self, reason: str) -> None:
        self._refused.labels(reason).inc()

    def divergent(self, peer: str, entries: int) -> None:
        self._divergent.labels(peer).inc(entries)

    def loan(self, peer: str, result: str, entries: int = 0) -> None:
        self._loans.labels(peer, result).inc()
        if entries:
            self._lent.labels(peer).inc(entries)

    def watch_peers(self, gauges: Callable[[], list[PeerStatus]]) -> None:
        """Expose the per-peer gauges that ``gauges()`` reads at each scrape."""
        self._collector = _PeerCollector(gauges)
        self._registry.register(self._collector)

    def close(self) -> None:
        if self._collector is not None:
            self._registry.unregister(self._collector)
            self._collector = None


class _PeerCollector(Collector):
    def __init__(self, gauges: Callable[[], list[PeerStatus]]) -> None:
        self._gauges = gauges

    def collect(self) -> Iterator[Metric]:
        peers = self._gauges()
        states = GaugeMetricFamily("forum_replication_peers", "Peers by state.", labels=["state"])
        for state in ("alive", "suspect", "dead"):
            states.add_metric([state], sum(p.state == state for p in peers))
        up = GaugeMetricFamily(
            "forum_replication_peer_up", "1 if the peer is alive.", labels=["peer"]
        )
        behind = GaugeMetricFamily(
            "forum_replication_peer_behind_entries",
            "Entries held here that the peer lacks, as of its last vector.",
            labels=["peer"],
        )
        age = GaugeMetricFamily(
            "forum_replication_peer_last_contact_age_seconds",
            "Seconds since the last successful call to the peer.",
            labels=["peer"],
        )
        queued = GaugeMetricFamily(
            "forum_replication_peer_queue_entries",
            "Entries waiting in the peer's push queue.",
            labels=["peer"],
        )
        holds_back = GaugeMetricFamily(
            "forum_replication_peer_holds_back_entries",
            "Seqs held here that the peer does not hold: how far it keeps the "
            "compaction horizon below this node's vector.",
            labels=["peer"],
        )
        forgotten = GaugeMetricFamily(
            "forum_replication_peer_forgotten",
            "1 if the peer was not heard from for forget_after: it no longer "
            "holds compaction back.",
            labels=["peer"],
        )
        offset = GaugeMetricFamily(
            "forum_replication_peer_clock_offset_seconds",
            "Seconds the peer's wall clock is ahead of this node's (negative: behind).",
            labels=["peer"],
        )
        lag = GaugeMetricFamily(
            "forum_replication_peer_lag_seconds",
            "Seconds since the peer last held every entry this node held then "
            "(the age of the oldest entry here it lacks), as of its last vector.",
            labels=["peer"],
        )
        for peer in peers:
            if peer.lag_seconds is not None:
                lag.add_metric([peer.url], peer.lag_seconds)
            if peer.clock_offset is not None:
                offset.add_metric([peer.url], peer.clock_offset)
            up.add_metric([peer.url], 1.0 if peer.state == "alive" else 0.0)
            queued.add_metric([peer.url], peer.queued)
            holds_back.add_metric([peer.url], peer.holds_back)
            forgotten.add_metric([peer.url], 1.0 if peer.forgotten else 0.0)
            if peer.behind is not None:
                behind.add_metric([peer.url], peer.behind)
            if peer.last_contact_age is not None:
                age.add_metric([peer.url], peer.last_contact_age)
        yield from (states, up, behind, age, queued, holds_back, forgotten, offset, lag)
