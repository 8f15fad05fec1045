"""Anti-entropy: a node sends a peer its version vector and pulls what it lacks.

Scuttlebutt-style, one exchange per page::

    A -> B  pull {A's vector, origins A is fetching elsewhere, A's members, limits}
    B -> A  page {entries A lacks: per origin oldest first, only from B's gap-free
                  prefix, so A ends without a new gap; the dead ranges among them
                  (seqs B dropped by compaction) and B's floors; B's vector;
                  more?; B's members}
    A       applies the page (durable before visible), then its dead ranges
            (A's vector passes them; a copy A holds live of one dies), learns
            members, and asks again at once while ``more`` (large catch-ups
            stream in pages)

A page with dead ranges means A lacked seqs B dropped: A was behind B's
floor (new, wiped, or forgotten while cut off). A may then hold live a Write
whose Take B dropped along with it, which no page can name as a Take any
more; so before applying that page, A *rechecks*: it pulls again, one origin
at a time, every seq it held at or below B's floors, and the dead ranges of
those pages kill its stale copies (a snapshot of B's survivors, in pages).

Each node runs this with every peer every ``anti_entropy_interval`` seconds
(jittered), and at once when a peer comes back, when a push to it was
dropped, and when a peer's request shows it holds what we lack. That last
rule makes the exchange symmetric: B, seeing A's vector ahead of its own,
pulls from A after ``settle_delay`` (pushes in flight have landed by then).

Entries learned here are not pushed on: every node pulls from every peer,
so forwarding them would only send them twice.

Content, not only vectors (docs/replication.md "Divergence"): the first pull
of a round carries A's digest of B's own origin above both floors, in its
``X-Forum-Digest`` header (:mod:`forum.replication.digest`, :mod:`forum.replication.messages`).
B is the authority for its own seqs: when the digest differs from its own,
its page lists its per-block digests, and A rechecks the blocks that differ
(the ``recheck`` pull above, for those seqs) and puts B's entry in place of
each copy it holds that differs (``heal``, :meth:`forum.node.space.forum.Forum.replace`).
A digest that differed with no entry to blame (nothing differs once
rechecked) is not sent again until it changes: a round costs one digest,
never a recheck per round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from forum.node.core.backoff import Backoff
from forum.node.core.entries import Entry
from forum.node.storage.strand import Strand
from forum.replication.auth import ANYONE
from forum.replication.config import ReplicationConfig
from forum.replication.digest import BLOCK, Digests, RangeDigest
from forum.replication.errors import BadMessage, BadSignature, PeerError
from forum.replication.membership import Membership, Peer
from forum.replication.messages import (
    MAX_BLOCKS,
    PULL_PATH,
    Member,
    PageDigest,
    PullPage,
    PullRequest,
    SeqRange,
    decode_page,
    digest_header,
    encode,
)
from forum.replication.metrics import ReplicationMetrics
from forum.replication.push import entry_size, report_failure
from forum.replication.transport import PeerTransport
from forum.replication.vector import VersionVector

log = logging.getLogger(__name__)

#: Entries read from the Strand at a time while filling a page.
_READ_CHUNK = 512

#: ``apply(page)``: check a page from a peer, then store its entries and
#: apply its dead ranges; returns the new entries. ``BadMessage`` (nothing
#: applied) for a page no honest peer sends.
Apply = Callable[[PullPage], Awaitable[list[Entry]]]
#: ``heal(url, pairs)``: ``(held, real)`` pairs, the copies held here that
#: differ from their origin's (the peer at ``url``): put the real ones in.
Heal = Callable[[str, list[tuple[Entry, Entry]]], Awaitable[None]]
#: Blocks that differ rechecked per round at most (the rest in the next rounds).
_RECHECK_BLOCKS = 8


@dataclass(frozen=True, slots=True)
class Filled:
    """What a page serves: entries oldest first per origin, the dead ranges
    among the seqs it covers (per origin), and whether more remain."""

    entries: list[Entry]
    dead: dict[str, list[SeqRange]]
    more: bool


class _Filler:
    """Fills one page from the Strand, within its bounds."""

    def __init__(self, strand: Strand, limit: int, max_bytes: int) -> None:
        self._strand = strand
        self._limit = limit
        self._max_bytes = max_bytes
        self._size = 0
        self.entries: list[Entry] = []
        self.dead: dict[str, list[SeqRange]] = {}

    async def serve(self, origin: str, start: int, end: int) -> bool:
        """Add what is held of ``origin`` in ``start..end`` (from this node's
        gap-free prefix: it stops at the first seq not held); ``False`` once
        the page is full."""
        seq = start
        while seq <= end:
            room = self._limit - len(self.entries)
            if room <= 0:
                return False
            asked = min(room, _READ_CHUNK, end - seq + 1)
            page = await self._strand.read_page(origin, seq - 1, asked)
            covered = min(page.upto, end)
            full = False
            for entry in page.entries:
                if entry.id.seq > end:
                    break
                entry_bytes = entry_size(entry)
                if self.entries and self._size + entry_bytes > self._max_bytes:
                    covered, full = entry.id.seq - 1, True
                    break
                self.entries.append(entry)
                self._size += entry_bytes
            self._add_dead(origin, page.dead, covered)
            if full:
                return False
            if covered < seq or len(page.entries) < asked:
                return True  # nothing more held here: the rest is not ours to serve
            seq = covered + 1
        return True

    def _add_dead(self, origin: str, ranges: Sequence[SeqRange], upto: int) -> None:
        mine = self.dead.setdefault(origin, [])
        for first, last in ranges:
            if first > upto:
                break
            end = min(last, upto)
            if mine and mine[-1][1] + 1 >= first:
                mine[-1] = (mine[-1][0], max(mine[-1][1], end))
            else:
                mine.append((first, end))
        if not mine:
            del self.dead[origin]

    def done(self, more: bool) -> Filled:
        return Filled(self.entries, self.dead, more)


async def fill_page(
    strand: Strand, asked: VersionVector, exclude: frozenset[str], limit: int, max_bytes: int
) -> Filled:
    """The entries ``asked`` lacks, oldest first per origin, within the bounds,
    and the dead (compacted) ranges among the seqs served.

    Only seqs in this node's own gap-free prefix of each origin are served, so
    the asker never gets a gap: a dead seq counts as served (the asker notes
    it dead), so its vector passes it.
    """
    filler = _Filler(strand, limit, max_bytes)
    for origin, held in sorted(strand.vector().items()):
        if origin in exclude:
            continue
        for start, end in asked.missing(origin, upto=held):
            if not await filler.serve(origin, start, end):
                return filler.done(more=True)
    return filler.done(more=False)


async def fill_recheck(
    strand: Strand, recheck: tuple[str, int, int], limit: int, max_bytes: int
) -> Filled:
    """One origin's seqs ``first..last`` again, held by the asker or not: the
    entries held here and the ranges dropped (see :meth:`Syncer.recheck`)."""
    origin, first, last = recheck
    filler = _Filler(strand, limit, max_bytes)
    held = strand.vector().get(origin, 0)
    full = not await filler.serve(origin, first, min(last, held))
    return filler.done(more=full)


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
        digests: Digests | None = None,
        heal: Heal | None = None,
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
        self._digests = digests
        self._heal = heal
        #: The peer's floor of its own origin, as its last digest answer said.
        self._their_floor = 0
        #: A digest that differed from the peer's with no entry to blame.
        self._unexplained: RangeDigest | None = None

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
        """Pull pages until the peer has nothing more we lack.

        The first page of a round that holds dead ranges (the peer dropped
        seqs we lack: we were behind its floor, forgotten or new) is applied
        only after :meth:`recheck`, so that a crash in between leaves us still
        lacking them, and the next round rechecks again.
        """
        peer = self._peer
        mine = VersionVector.of(self._strand)
        held_before = mine
        rechecked = False
        # Claim up front what the peer is known to hold beyond us.
        self._fetching.claim(
            peer.url, {o for o in peer.vector.origins if _ahead(peer.vector, mine, o)}
        )
        digest = self._digest()
        try:
            while True:
                pulled = await self._pull(mine, None, digest)
                if pulled is None:
                    return
                page, answer_bytes = pulled
                if page.digest is not None and digest is not None:
                    await self._compare(digest, page.digest)
                digest = None
                if page.dead and not rechecked:
                    await self.recheck(held_before, page.floors)
                    rechecked = True
                await self._take(page, answer_bytes)
                if not page.more:
                    self._metrics.round(peer.url, ok=True)
                    return
                self._fetching.claim(peer.url, {e.id.origin for e in page.entries})
                mine = VersionVector.of(self._strand)
        finally:
            self._fetching.release(peer.url)

    async def recheck(self, held: VersionVector, floors: Mapping[str, int]) -> None:
        """Ask the peer again for every seq we held (``held``) at or below its
        floors, one origin at a time, and apply the pages: their dead ranges
        kill each copy we hold live of what the peer dropped (a Write taken
        while we were cut off, whose Take was dropped with it, so that we
        could never learn it from the Take)."""
        for origin, floor in sorted(floors.items()):
            runs = held.held(origin)
            top = min(floor, runs[-1][1] if runs else 0)
            first = 1
            while first <= top:
                pulled = await self._pull(VersionVector.of(self._strand), (origin, first, top))
                if pulled is None:
                    return
                page, answer_bytes = pulled
                await self._take(page, answer_bytes)
                covered = max(
                    (
                        *(e.id.seq for e in page.entries if e.id.origin == origin),
                        *(last for _, last in page.dead.get(origin, ())),
                    ),
                    default=first - 1,
                )
                if not page.more or covered < first:
                    break
                first = covered + 1

    def _digest(self) -> RangeDigest | None:
        """Our digest of the peer's own origin above both floors, if there is
        one to compare (and it is not the one that differed unexplained)."""
        origin, digests = self._peer.origin, self._digests
        if origin is None or digests is None or not digests.ready or self._heal is None:
            return None
        lo = max(digests.floor(origin), self._their_floor)
        upto = self._strand.vector().get(origin, 0)
        if upto <= lo:
            return None
        digest = digests.range(origin, lo, upto)
        return None if digest == self._unexplained else digest

    async def _compare(self, sent: RangeDigest, theirs: PageDigest) -> None:
        """The peer's blocks of its own origin differ from our ``sent`` digest:
        recheck the blocks that differ and put its entries in place of ours
        that differ."""
        origin, digests, heal = self._peer.origin, self._digests, self._heal
        if origin is None or digests is None or heal is None:
            return
        lo, upto, blocks = theirs
        self._their_floor = lo
        if lo != sent.lo:
            return  # its floor is higher: the next round compares above it
        if len(blocks) == MAX_BLOCKS:  # a long range: the rest in later rounds
            upto = min(upto, (blocks[-1][0] + 1) * BLOCK)
        mine = {number: (count, xor) for number, count, xor in digests.blocks(origin, lo, upto)}
        listed = {number: (count, xor) for number, count, xor in blocks}
        differ = sorted(n for n in mine.keys() | listed.keys() if mine.get(n) != listed.get(n))
        pairs: list[tuple[Entry, Entry]] = []
        for number in differ[:_RECHECK_BLOCKS]:
            first, last = max(lo, number * BLOCK) + 1, min(upto, (number + 1) * BLOCK)
            pairs += await self._differing(origin, first, last)
        if pairs:
            await heal(self._peer.url, pairs)
        elif len(differ) <= _RECHECK_BLOCKS and upto == sent.upto:
            # Compared over the very seqs we sent, and no entry differs:
            # not again until ours change (the origin's never do up there).
            self._unexplained = sent

    async def _differing(self, origin: str, first: int, last: int) -> list[tuple[Entry, Entry]]:
        """Pull the peer's entries of its own ``first..last`` again; the
        ``(ours, theirs)`` pairs that differ. Our copies are hashed again on
        the way (a hash we missed would make the block differ for ever)."""
        digests = self._digests
        theirs: dict[int, Entry] = {}
        seq = first
        while seq <= last:
            pulled = await self._pull(VersionVector.of(self._strand), (origin, seq, last))
            if pulled is None:
                return []
            page, answer_bytes = pulled
            await self._take(page, answer_bytes)
            got = [e.id.seq for e in page.entries if e.id.origin == origin]
            theirs.update((e.id.seq, e) for e in page.entries if e.id.origin == origin)
            covered = max((*got, *(end for _, end in page.dead.get(origin, ()))), default=seq - 1)
            if not page.more or covered < seq:
                break
            seq = covered + 1
        ours = (await self._strand.read_page(origin, first - 1, last - first + 1)).entries
        if digests is not None:
            digests.add(ours)
        return [
            (entry, real)
            for entry in ours
            if (real := theirs.get(entry.id.seq)) is not None and real != entry
        ]

    async def _pull(
        self,
        mine: VersionVector,
        recheck: tuple[str, int, int] | None,
        digest: RangeDigest | None = None,
    ) -> tuple[PullPage, int] | None:
        """One pull: the page and its size, or ``None`` if the URL turned out
        not to be this peer."""
        peer = self._peer
        request = PullRequest(
            self._me,
            mine,
            self._fetching.elsewhere(peer.url),
            self._membership.members(),
            self._config.page_entries,
            self._config.page_bytes,
            recheck,
            digest,
        )
        body = encode(request)
        self._metrics.sent_bytes(peer.url, "pull", len(body))
        # For anyone: how a seed's origin (or a wiped peer's new one) is learned.
        headers = digest_header(digest) if digest is not None else None
        answer = await self._transport.call(
            peer.url, "POST", PULL_PATH, body, to=ANYONE, headers=headers
        )
        page = decode_page(answer)
        found = self._membership.contacted(peer.url, page.sender)
        if found is None:
            return None
        self._membership.acknowledged(found, page.vector, full=True)
        self._membership.learn(page.members)
        return page, len(answer)

    async def _take(self, page: PullPage, answer_bytes: int) -> None:
        """Apply a page: its entries, then its dead ranges."""
        new = await self._apply(page) if page.entries or page.dead else []
        self._metrics.received(self._peer.url, "page", len(page.entries), len(new), answer_bytes)


def _ahead(theirs: VersionVector, mine: VersionVector, origin: str) -> bool:
    return theirs.contiguous.get(origin, 0) > mine.contiguous.get(origin, 0)
