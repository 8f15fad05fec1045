"""Who this node's peers are, and how each one is doing.

Peers come from two places: **seeds** (``--peer`` and the config), kept for
good, and **learned** peers, from the member lists peers exchange during
anti-entropy and from the ``from`` of requests they send us. A peer's URL is
always the one it advertises (``--advertise``), never an address read off a
connection.

A peer is dialled by URL and known by origin once it answered (or, if
learned, from the member list that named it); pushes wait for the origin,
since a push is signed for its receiver's origin (:mod:`forum.replication.auth`).
Rules:

* never ourselves: a URL that answers with our origin (or is our advertised
  URL) is dropped for good;
* one peer per origin: a learned URL for an origin we already reach is
  ignored, and when a seed turns out to be a node we had learned under
  another URL, the seed wins (so a proxied seed URL is what is used, e.g.
  Toxiproxy links in tests);
* a node whose data was wiped comes back under a new origin at the same URL:
  the peer's origin is updated;
* a peer not heard from (no good call to it, no request from it) for
  ``forget_after`` seconds is *forgotten*: it no longer holds compaction
  back (:mod:`forum.replication.horizon`), and a learned one is dropped from the
  table at its next failed call (a seed stays: it is configured, and dialled
  on; heard again, it counts again).

States::

    suspect --ok--> alive --call fails--> suspect --failing for dead_after s--> dead
       ^ (new peers start here)                 ^--------- any call ok: alive ----'

Only our own calls change a peer's state (a peer that can call us may still
be unreachable from here); a request from a peer we think is down makes us
try it at once (``on_heard``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from forum.node.api.status import PeerStatus
from forum.replication.horizon import holds_back
from forum.replication.messages import Member
from forum.replication.vector import VersionVector

log = logging.getLogger(__name__)


class PeerState(enum.Enum):
    ALIVE = "alive"
    SUSPECT = "suspect"
    DEAD = "dead"


@dataclass(slots=True, eq=False)
class Peer:
    """One peer's live record (mutable: it is state, owned by :class:`Membership`)."""

    #: The URL we dial (a seed as configured, or the URL the peer advertised).
    url: str
    seed: bool
    origin: str | None = None
    #: The URL the peer advertises itself (what we pass on in member lists).
    advertised: str | None = None
    state: PeerState = PeerState.SUSPECT
    #: Wall-clock time (for people) and monotonic time (for decisions) of the last good call.
    last_contact: float | None = None
    last_contact_mono: float | None = None
    failing_since: float | None = None
    failures: int = 0
    last_error: str | None = None
    added_mono: float = 0.0
    #: Monotonic time of the last sign of life: a good call to it, or a request from it.
    last_heard_mono: float | None = None
    #: What the peer holds, as of its last vector or acknowledgement ...
    vector: VersionVector = field(default_factory=VersionVector)
    #: ... heard at this monotonic time (``None``: never, so it may hold anything).
    vector_heard_mono: float | None = None
    #: Set once ``origin`` is known: what a push to the peer must be signed for.
    identified: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def __post_init__(self) -> None:
        if self.origin is not None:
            self.identified.set()

    def member(self) -> Member | None:
        """The peer as others should know it: by the URL it advertises, not ours for it
        (ours may be a proxy only this node goes through)."""
        if self.origin is None:
            return None
        return Member(self.origin, self.advertised or self.url)


class MembershipListener(Protocol):
    def peer_added(self, peer: Peer) -> None: ...

    def peer_removed(self, peer: Peer) -> None: ...

    def peer_returned(self, peer: Peer) -> None:
        """The peer answered after failing (or for the first time): sync with it now."""

    def peer_heard(self, peer: Peer) -> None:
        """The peer called us while we thought it down: try it now."""

    def peer_down(self, peer: Peer) -> None:
        """The peer was alive and a call to it failed: it is suspect now."""


class Membership:
    """The peer table of one node. Synchronous: used from one event loop."""

    def __init__(
        self,
        *,
        me: Member,
        seeds: Sequence[str],
        dead_after: float,
        forget_after: float,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.me = me
        self._dead_after = dead_after
        self._forget_after = forget_after
        self._clock = clock
        self._wall_clock = wall_clock
        self._peers: dict[str, Peer] = {}
        self._self_urls: set[str] = set() if me.url is None else {_norm(me.url)}
        self._listeners: list[MembershipListener] = []
        self._seeds = [_norm(url) for url in seeds]

    def start(self, listener: MembershipListener) -> None:
        """Add the seeds, reporting them (and later changes) to ``listener``."""
        self._listeners.append(listener)
        for url in self._seeds:
            if url not in self._self_urls and url not in self._peers:
                self._add(Peer(url, seed=True, added_mono=self._clock()))

    # -- reading ---------------------------------------------------------------

    def peers(self) -> list[Peer]:
        return list(self._peers.values())

    def get(self, url: str) -> Peer | None:
        return self._peers.get(_norm(url))

    def by_origin(self, origin: str) -> Peer | None:
        for peer in self._peers.values():
            if peer.origin == origin:
                return peer
        return None

    def members(self) -> tuple[Member, ...]:
        """What we tell others: ourselves and the peers we reached and that are not dead.

        (Not peers only heard of: an address is passed on once it was seen to work.)
        """
        known = [self.me] if self.me.url is not None else []
        for peer in self._peers.values():
            member = peer.member()
            reached = peer.last_contact_mono is not None
            if member is not None and reached and peer.state is not PeerState.DEAD:
                known.append(member)
        return tuple(known)

    def alive(self) -> frozenset[str]:
        """The origins of the peers alive now (answering our calls): whose
        turns count in the ranking of remote tuples (:mod:`forum.replication.ranking`)."""
        return frozenset(
            peer.origin
            for peer in self._peers.values()
            if peer.origin is not None and peer.state is PeerState.ALIVE
        )

    def forgotten(self, peer: Peer) -> bool:
        """Not heard from for ``forget_after`` (counted from when it was added
        if never): it no longer holds compaction back."""
        last = peer.last_heard_mono if peer.last_heard_mono is not None else peer.added_mono
        return self._clock() - last >= self._forget_after

    def holdings(self) -> list[Mapping[str, int] | None]:
        """What each member not forgotten holds without a gap, as last heard
        (``None``: never heard), for the compaction horizon."""
        return [
            None if peer.vector_heard_mono is None else peer.vector.contiguous
            for peer in self._peers.values()
            if not self.forgotten(peer)
        ]

    def snapshot(
        self,
        holdings: VersionVector | None = None,
        queued: Mapping[str, int] | None = None,
        clock_offsets: Mapping[str, float] | None = None,
        lags: Mapping[str, float] | None = None,
    ) -> list[PeerStatus]:
        """One row per peer, by URL, for ``forum status`` and the metrics;
        ``behind`` and ``holds_back`` need ``holdings`` (this node's vector);
        ``queued`` is each peer's push queue length, ``clock_offsets`` its
        clock's offset (:mod:`forum.replication.clocks`) and ``lags`` its lag in
        seconds (:mod:`forum.replication.lag`), by URL."""
        now = self._clock()
        queued = queued or {}
        clock_offsets = clock_offsets or {}
        lags = lags or {}
        return [
            PeerStatus(
                url=peer.url,
                advertised=peer.advertised,
                origin=peer.origin,
                seed=peer.seed,
                state=peer.state.value,
                last_contact=peer.last_contact,
                last_contact_age=None
                if peer.last_contact_mono is None
                else round(now - peer.last_contact_mono, 3),
                failures=peer.failures,
                last_error=peer.last_error,
                behind=None if holdings is None else peer.vector.lacks(holdings),
                lag_seconds=lags.get(peer.url),
                queued=queued.get(peer.url, 0),
                holds_back=self._holds_back(peer, holdings),
                forgotten=self.forgotten(peer),
                clock_offset=clock_offsets.get(peer.url),
            )
            for peer in sorted(self._peers.values(), key=lambda p: p.url)
        ]

    def _holds_back(self, peer: Peer, holdings: VersionVector | None) -> int:
        if holdings is None or self.forgotten(peer):
            return 0
        held = None if peer.vector_heard_mono is None else peer.vector.contiguous
        return holds_back(holdings.contiguous, held)

    # -- what calls tell us ------------------------------------------------------

    def contacted(self, url: str, answer_from: Member) -> Peer | None:
        """A call to ``url`` succeeded; ``answer_from`` is who answered.

        Returns the peer, or ``None`` when the URL turned out to be us or a
        duplicate of a peer we keep under another URL (it is dropped).
        """
        peer = self._peers.get(_norm(url))
        if peer is None:
            return None
        if answer_from.origin == self.me.origin:
            self.is_self(url)
            return None
        if peer.origin not in (None, answer_from.origin):
            log.info("peer %s has a new origin %s (was %s)", url, answer_from.origin, peer.origin)
            peer.vector = VersionVector()
            peer.vector_heard_mono = None
        peer.origin = answer_from.origin
        peer.identified.set()
        peer.advertised = answer_from.url
        twin = next(
            (p for p in self._peers.values() if p is not peer and p.origin == peer.origin), None
        )
        if twin is not None and not (twin.seed and peer.seed):
            loser = twin if peer.seed or not twin.seed else peer
            log.info(
                "dropping peer %s: it is %s, which is reached as %s",
                loser.url,
                peer.origin,
                (peer if loser is twin else twin).url,
            )
            self._remove(loser)
            if loser is peer:
                return None
        returned = peer.state is not PeerState.ALIVE
        peer.state = PeerState.ALIVE
        peer.failures = 0
        peer.failing_since = None
        peer.last_error = None
        peer.last_contact = self._wall_clock()
        peer.last_contact_mono = peer.last_heard_mono = self._clock()
        if returned:
            log.info("peer %s (%s) is alive", peer.url, peer.origin)
            for listener in self._listeners:
                listener.peer_returned(peer)
        return peer

    def failed(self, url: str, error: Exception) -> None:
        """A call to ``url`` failed (after its retries)."""
        peer = self._peers.get(_norm(url))
        if peer is None:
            return
        now = self._clock()
        peer.failures += 1
        peer.last_error = str(error)
        if peer.failing_since is None:
            peer.failing_since = now
        if peer.state is PeerState.ALIVE:
            log.warning("peer %s is suspect: %s", peer.url, error)
            peer.state = PeerState.SUSPECT
            for listener in self._listeners:
                listener.peer_down(peer)
        elif peer.state is PeerState.SUSPECT and now - peer.failing_since >= self._dead_after:
            log.warning(
                "peer %s is dead: failing for %.1fs (last: %s)",
                peer.url,
                now - peer.failing_since,
                error,
            )
            peer.state = PeerState.DEAD
        if not peer.seed and peer.state is PeerState.DEAD and self.forgotten(peer):
            log.info("forgetting peer %s: not heard from for %.0fs", peer.url, self._forget_after)
            self._remove(peer)

    def is_self(self, url: str) -> None:
        """``url`` leads back to this node: never dial it again."""
        norm = _norm(url)
        self._self_urls.add(norm)
        peer = self._peers.get(norm)
        if peer is not None:
            log.info("peer %s is this node: dropping it", url)
            self._remove(peer)

    def heard_from(self, sender: Member) -> Peer | None:
        """A peer called us. Learn it if it is new; prod the link if we think it down."""
        if sender.origin == self.me.origin:
            return None
        peer = self.by_origin(sender.origin)
        if peer is None and sender.url is not None:
            peer = self._peers.get(_norm(sender.url))
        if peer is None:
            self.learn([sender])
            return None
        peer.last_heard_mono = self._clock()
        if peer.state is not PeerState.ALIVE:
            for listener in self._listeners:
                listener.peer_heard(peer)
        return peer

    def learn(self, members: Sequence[Member]) -> None:
        """Add the members we do not know yet (from a peer's member list)."""
        for member in members:
            if member.url is None or member.origin == self.me.origin:
                continue
            url = _norm(member.url)
            if url in self._self_urls or url in self._peers or self.by_origin(member.origin):
                continue
            log.info("learned peer %s (%s)", url, member.origin)
            self._add(
                Peer(
                    url,
                    seed=False,
                    origin=member.origin,
                    advertised=url,
                    added_mono=self._clock(),
                )
            )

    def acknowledged(self, peer: Peer, holdings: VersionVector, full: bool) -> None:
        """The peer told us what it holds: all of it (``full``), or for some
        origins. A full vector replaces the last one, even an older one come
        late: the horizon may then stand lower than it could, never higher."""
        peer.vector = holdings if full else peer.vector.merge(holdings)
        peer.vector_heard_mono = peer.last_heard_mono = self._clock()

    # -- internals -------------------------------------------------------------------

    def _add(self, peer: Peer) -> None:
        self._peers[peer.url] = peer
        for listener in self._listeners:
            listener.peer_added(peer)

    def _remove(self, peer: Peer) -> None:
        if self._peers.get(peer.url) is peer:
            del self._peers[peer.url]
            for listener in self._listeners:
                listener.peer_removed(peer)


def _norm(url: str) -> str:
    return url.rstrip("/")
