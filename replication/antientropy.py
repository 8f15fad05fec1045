"""Anti-entropy: a node sends a peer its version vector and pulls what it lacks.

Scuttlebutt-style, one exchange per page::

    A -> B  pull {A's vector, origins A is fetching elsewhere, A's members, limits}
    B -> A  page {entries A lacks: per origin oldest first, only from B's gap-free
                  prefix, so A ends without a new gap; B's vector; more?; B's members}
    A       applies the page (durable before visible), learns members,
            and asks again at once while ``more`` (large catch-ups stream in pages)

Each node runs this with every peer every ``anti_entropy_interval`` seconds
(jittered), and at once when a peer comes back, when a push to it was
dropped, and when a peer's request shows it holds what we lack. That last
rule makes the exchange symmetric: B, seeing A's vector ahead of its own,
pulls from A after ``settle_delay`` (pushes in flight have landed by then).

Entries learned here are not pushed on: every node pulls from every peer,
so forwarding them would only send them twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Sequence

from node.backoff import Backoff
from node.entries import Entry
from node.strand import Strand
from replication.auth import ANYONE
from replication.config import ReplicationConfig
from replication.errors import BadMessage, BadSignature, PeerError
from replication.membership import Membership, Peer
from replication.messages import (
    PULL_PATH,
    Member,
    PullPage,
    PullRequest,
    decode_page,
    encode,
)
from replication.metrics import ReplicationMetrics
from replication.push import entry_size, report_failure
from replication.transport import PeerTransport
from replication.vector import VersionVector

log = logging.getLogger(__name__)

#: Entries read from the Strand at a time while filling a page.
_READ_CHUNK = 512

#: ``apply(entries)``: store entries pulled from a peer; returns the new ones.
Apply = Callable[[Sequence[Entry]], Awaitable[list[Entry]]]


async def fill_page(
    strand: Strand, asked: VersionVector, exclude: frozenset[str], limit: int, max_bytes: int
) -> tuple[list[Entry], bool]:
    """The entries ``asked`` lacks, oldest first per origin, within the bounds.

    Only seqs in this node's own gap-free prefix of each origin are served, so
    the asker never gets a gap. Returns the entries and whether more remain.
    """
    entries: list[Entry] = []
    size = 0
    for origin, held in sorted(strand.vector().items()):
        if origin in exclude:
            continue
        for start, end in asked.missing(origin, upto=held):
            seq = start
            while seq <= end:
                room = limit - len(entries)
                if room <= 0:
                    return entries, True
                chunk = await strand.read_range(
                    origin, seq - 1, min(room, end - seq + 1, _READ_CHUNK)
                )
                if not chunk:
                    break
                for entry in chunk:
                    entry_bytes = entry_size(entry)
                    if entries and size + entry_bytes > max_bytes:
                        return entries, True
                    entries.append(entry)
                    size += entry_bytes
                seq += len(chunk)
    return entries, False


class Fetching:
    """Which origins each peer is streaming to us right now.

    A catch-up from one peer leaves those origins out of the pulls to other
    peers meanwhile, so the same entries are not fetched twice.
    """

    def __init__(self) -> None:
        self._by_origin: dict[str, str] = {}

    def claim(self, url: str, origins: set[str]) -> None:
        for origin in origins:
            self._by_origin.setdefault(origin, url)

    def elsewhere(self, url: str) -> frozenset[str]:
        return frozenset(o for o, u in self._by_origin.items() if u != url)

    def release(self, url: str) -> None:
        self._by_origin = {o: u for o, u in self._by_origin.items() if u != url}


class Syncer:
    """Runs anti-entropy with one peer: periodically, and at once when kicked."""

    def __init__(
        self,
        *,
        peer: Peer,
        strand: Strand,
        apply: Apply,
        me: Member,
        transport: PeerTransport,
        membership: Membership,
        fetching: Fetching,
        metrics: ReplicationMetrics,
        config: ReplicationConfig,
        rng: random.Random | None = None,
    ) -> None:
        self._peer = peer
        self._strand = strand
        self._apply = apply
        self._me = me
        self._transport = transport
        self._membership = membership
        self._fetching = fetching
        self._metrics = metrics
        self._config = config
        self._rng = rng or random.Random()
        self._backoff = Backoff(config.backoff_base, config.anti_entropy_interval)
        self._kicked = asyncio.Event()
        self._kick_delay = 0.0
        self._kick_checks = False

    def kick(self, delay: float = 0.0, unless_caught_up: bool = False) -> None:
        """Run a round after ``delay`` seconds (or sooner if already asked).

        ``unless_caught_up``: skip it if by then we hold all the peer was known to hold.
        """
        if not self._kicked.is_set():
            self._kick_delay = delay
            self._kick_checks = unless_caught_up
        else:
            self._kick_delay = min(delay, self._kick_delay)
            self._kick_checks = self._kick_checks and unless_caught_up
        self._kicked.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        due = loop.time()  # a new peer: catch up with it at once
        while True:
            if not await self._wait(due):
                continue  # a kick found nothing to fetch: the periodic round stays due
            try:
                await self.sync()
            except (PeerError, BadMessage, BadSignature) as exc:
                self._metrics.round(self._peer.url, ok=False)
                report_failure(self._membership, self._peer, exc)
                failures += 1
                due = loop.time() + self._backoff.delay(failures, self._rng)
                log.debug("anti-entropy with %s failed: %s", self._peer.url, exc)
            else:
                failures = 0
                interval = self._config.anti_entropy_interval
                due = loop.time() + interval * self._rng.uniform(0.8, 1.2)

    async def _wait(self, due: float) -> bool:
        """Until ``due`` or a kick (plus its delay); ``False``: a kick that may be skipped."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(due):
                await self._kicked.wait()
        if not self._kicked.is_set():
            return True
        if self._kick_delay:
            await asyncio.sleep(self._kick_delay)
        self._kicked.clear()
        if self._kick_checks and asyncio.get_running_loop().time() < due:
            return VersionVector.of(self._strand).lacks(self._peer.vector) > 0
        return True

    async def sync(self) -> None:
        """Pull pages until the peer has nothing more we lack."""
        peer = self._peer
        config = self._config
        mine = VersionVector.of(self._strand)
        # Claim up front what the peer is known to hold beyond us.
        self._fetching.claim(
            peer.url, {o for o in peer.vector.origins if _ahead(peer.vector, mine, o)}
        )
        try:
            while True:
                request = PullRequest(
                    self._me,
                    mine,
                    self._fetching.elsewhere(peer.url),
                    self._membership.members(),
                    config.page_entries,
                    config.page_bytes,
                )
                body = encode(request)
                self._metrics.sent_bytes(peer.url, "pull", len(body))
                # For anyone: how a seed's origin (or a wiped peer's new one) is learned.
                answer = await self._transport.call(peer.url, "POST", PULL_PATH, body, to=ANYONE)
                page = decode_page(answer)
                if await self._take(page, len(answer)) is None:
                    return
                if not page.more:
                    self._metrics.round(peer.url, ok=True)
                    return
                self._fetching.claim(peer.url, {e.id.origin for e in page.entries})
                mine = VersionVector.of(self._strand)
        finally:
            self._fetching.release(peer.url)

    async def _take(self, page: PullPage, answer_bytes: int) -> Peer | None:
        peer = self._membership.contacted(self._peer.url, page.sender)
        if peer is None:
            return None
        new = await self._apply(page.entries) if page.entries else []
        self._metrics.received(peer.url, "page", len(page.entries), len(new), answer_bytes)
        self._membership.acknowledged(peer, page.vector, full=True)
        self._membership.learn(page.members)
        return peer


def _ahead(theirs: VersionVector, mine: VersionVector, origin: str) -> bool:
    return theirs.contiguous.get(origin, 0) > mine.contiguous.get(origin, 0)
