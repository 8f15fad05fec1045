"""The replicator: one node's replication, between its Forum and its peers.

It owns the peer table (:class:`~forum.replication.membership.Membership`) and, for
each peer, a *link*: an outbox with its :class:`~forum.replication.push.Pusher` and
a :class:`~forum.replication.antientropy.Syncer`, run as two tasks in the
replicator's task group (a peer that leaves has its link cancelled).

Entries flow through the Forum only::

    local write/take --> Forum --listener--> every live peer's outbox
    push from P      --> Forum.apply --listener--> outboxes of peers P did not cover
    page from P      --> Forum.apply --listener--> (not forwarded: see antientropy)

``Forum.apply`` makes entries durable before they are visible, skips what is
held, and hands the listener the :class:`~forum.node.space.listeners.Provenance` it was given:
the origins that hold the entries already. So pushed entries never go back to
their sender, nor to the peers the sender pushed them to itself (``covered``);
pulled ones (held by "everyone", ``None``) go to nobody.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from forum.node.api.status import PeerStatus
from forum.node.config.node import FORGET_AFTER
from forum.node.core.entries import Entry
from forum.node.core.resource import AsyncResource
from forum.node.space.forum import Forum
from forum.node.space.listeners import Provenance
from forum.replication.antientropy import Fetching, Syncer, fill_page, fill_recheck
from forum.replication.clocks import ClockWatch
from forum.replication.config import ReplicationConfig
from forum.replication.digest import Digests
from forum.replication.errors import BadMessage
from forum.replication.horizon import horizon
from forum.replication.lag import floors, lag
from forum.replication.lending import Lending, serve_lend, serve_lent
from forum.replication.membership import Membership, Peer, PeerState
from forum.replication.messages import (
    MAX_BLOCKS,
    LendRequest,
    LentNotice,
    Loan,
    Member,
    MemberList,
    PageDigest,
    PullPage,
    PullRequest,
    Push,
    PushAck,
    SeqRange,
)
from forum.replication.metrics import ReplicationMetrics
from forum.replication.push import Outbox, Pusher
from forum.replication.ranking import MemberRanking
from forum.replication.repair import Repair, RepairReport
from forum.replication.transport import PeerTransport
from forum.replication.vector import VersionVector

log = logging.getLogger(__name__)

#: After an unexpected error a link's loop starts again after this many seconds.
_RESTART_DELAY = 1.0


#: Entries pulled by anti-entropy are sent on to nobody: every node pulls for itself.
_PULLED = Provenance(held_by=None)


@dataclass(slots=True, eq=False)
class _Link:
    peer: Peer
    outbox: Outbox
    pusher: Pusher
    syncer: Syncer
    task: asyncio.Task[None] | None = None


class Replicator(AsyncResource):
    """Replicates ``forum`` with its peers while open (``async with``)."""

    def __init__(
        self,
        *,
        forum: Forum,
        me: Member,
        seeds: Sequence[str],
        transport: PeerTransport,
        metrics: ReplicationMetrics,
        config: ReplicationConfig,
        forget_after: float = FORGET_AFTER,
        clocks: ClockWatch | None = None,
    ) -> None:
        """``clocks``: the peers' clock offsets, shared with ``transport`` if
        it samples the answers too (else one of its own, fed by requests)."""
        if me.origin != forum.strand.origin:
            raise ValueError("me.origin must be the Forum's origin")
        self.forum = forum
        self.me = me
        self.config = config
        self.membership = Membership(
            me=me, seeds=seeds, dead_after=config.dead_after, forget_after=forget_after
        )
        self.clocks = clocks or ClockWatch(config.warn_clock_skew)
        self._transport = transport
        self._metrics = metrics
        self._fetching = Fetching()
        self._digests = Digests(forum.strand)
        # A damaged Strand: the repair is under way from the first page on
        # (the links' first rounds start before repair() is called).
        self._repair = (
            Repair(forum, self.membership, self._repair_pass)
            if forum.strand.damage is not None
            else None
        )
        self._links: dict[str, _Link] = {}
        self._group: asyncio.TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        # A writer alive hands out its own tuples, to peers too (forum.replication.lending).
        self.lending = Lending(
            me=me,
            membership=self.membership,
            transport=transport,
            config=config,
            apply=self._apply,
            spawn=self._spawn,
            metrics=metrics,
        )

    # -- running ---------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = task = asyncio.create_task(self._run(started), name="replication")
        await asyncio.wait([started, task], return_when=asyncio.FIRST_COMPLETED)
        if task.done():  # it failed before it was running: say why
            self._task = None
            await task
            raise RuntimeError("replication stopped at start")
        return self

    async def aclose(self) -> None:
        """Stop every link (in-flight calls are cancelled) and wait until they are gone."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def _run(self, started: asyncio.Future[None]) -> None:
        self.forum.add_listener(self._on_entries)
        if self.config.ranking == "members":
            self.forum.set_ranking(MemberRanking(self.me.origin, self.membership.alive))
        self.forum.copies.set_members(self._members)
        if self.config.lending:
            self.forum.set_lender(self.lending)
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                self.membership.start(self)
                # The Forum notes when it came to hold what; the lag needs the
                # marks of what some peer heard from lacks (forum.replication.lag).
                self.forum.need_arrivals(self._lag_floors)
                group.create_task(self._digests.build(), name="digests")
                started.set_result(None)
                await asyncio.Event().wait()  # until cancelled by aclose()
        finally:
            self._group = None
            self.forum.remove_listener(self._on_entries)
            self.forum.set_ranking(None)
            self.forum.copies.set_members(None)
            self.forum.set_lender(None)
            self.forum.need_arrivals(None)

    def _spawn(self, work: Awaitable[None], name: str) -> None:
        """Run ``work`` in the replicator's task group (dropped when it is not running)."""
        group = self._group
        if group is None:
            if asyncio.iscoroutine(work):
                work.close()
            return
        group.create_task(_quietly(work, name), name=name)

    def _lag_floors(self, held: Mapping[str, int]) -> dict[str, int]:
        """Per origin, what every peer heard from holds: the lag needs only
        the latest mark at or below it (forum.replication.lag)."""
        heard = [p.vector for p in self.membership.peers() if p.vector_heard_mono is not None]
        return floors(held, heard)

    # -- the membership listener ---------------------------------------------------------

    def peer_added(self, peer: Peer) -> None:
        config = self.config
        outbox = Outbox(config.queue_entries, config.queue_bytes)
        pusher = Pusher(
            peer=peer,
            outbox=outbox,
            me=self.me,
            covered=self._covered,
            transport=self._transport,
            membership=self.membership,
            metrics=self._metrics,
            config=config,
            on_dropped=self._push_dropped,
            on_acked=self._acked,
        )
        syncer = Syncer(
            peer=peer,
            strand=self.forum.strand,
            apply=self._apply_page,
            me=self.me,
            transport=self._transport,
            membership=self.membership,
            fetching=self._fetching,
            metrics=self._metrics,
            config=config,
            digests=self._digests,
            heal=self._heal,
        )
        link = _Link(peer, outbox, pusher, syncer)
        self._links[peer.url] = link
        self.clocks.watch(peer.url)
        if self._group is not None:
            link.task = self._group.create_task(self._run_link(link), name=f"peer {peer.url}")

    def peer_removed(self, peer: Peer) -> None:
        link = self._links.pop(peer.url, None)
        if link is not None and link.task is not None:
            link.task.cancel()
        self.clocks.forget(peer.url)
        self.forum.rerank()

    def peer_down(self, peer: Peer) -> None:
        # Tuples waiting for their turn behind it move up (forum.replication.ranking).
        self.forum.rerank()

    def peer_returned(self, peer: Peer) -> None:
        self._kick(peer, 0.0)

    def peer_heard(self, peer: Peer) -> None:
        self._kick(peer, 0.0)

    def _kick(self, peer: Peer, delay: float, unless_caught_up: bool = False) -> None:
        link = self._links.get(peer.url)
        if link is not None:
            link.syncer.kick(delay, unless_caught_up)

    def _members(self) -> int:
        """The cluster's size for writes with copies: this node and every
        peer in its table, whatever its state (forum.node.space.copies)."""
        return 1 + len(self.membership.peers())

    def _acked(self, origin: str, holdings: VersionVector) -> None:
        """The peer ``origin`` holds ``holdings`` durably (it answered a
        push, or pulled): the writes waiting for copies it makes whole wake."""
        self.forum.copies.held(origin, holdings.contiguous.get(self.me.origin, 0))

    def _push_dropped(self, peer: Peer) -> None:
        # The peer misses entries now: a round with it makes it pull them.
        self._kick(peer, 0.0)

    async def _run_link(self, link: _Link) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._supervise("push", link, link.pusher.run))
            group.create_task(self._supervise("anti-entropy", link, link.syncer.run))

    async def _supervise(self, what: str, link: _Link, run: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await run()
            except Exception:
                log.exception("%s with %s failed; restarting it", what, link.peer.url)
                await asyncio.sleep(_RESTART_DELAY)

    # -- the Forum's side ----------------------------------------------------------------

    def _on_entries(self, entries: Sequence[Entry], provenance: Provenance) -> None:
        """Listener: queue new entries for the peers that lack them. Never blocks."""
        self._digests.add(entries)
        held_by = provenance.held_by
        if held_by is None:
            return
        for link in self._links.values():
            peer = link.peer
            if peer.origin is not None and peer.origin in held_by:
                continue
            if peer.state is PeerState.DEAD:
                self._metrics.dropped(peer.url, "peer_down", len(entries) + link.outbox.clear())
                continue
            dropped = link.outbox.put(entries)
            if dropped:
                self._metrics.dropped(peer.url, "queue_full", dropped)
                link.syncer.kick(self.config.settle_delay)

    def _covered(self) -> frozenset[str]:
        """The origins we push to ourselves (and our own), for ``Push.covered``."""
        covered = {self.me.origin}
        for link in self._links.values():
            if link.peer.origin is not None and link.peer.state is not PeerState.DEAD:
                covered.add(link.peer.origin)
        return frozenset(covered)

    async def _apply(self, entries: Sequence[Entry], provenance: Provenance) -> list[Entry]:
        self._check(entries)
        return await self.forum.apply(entries, provenance)

    async def _apply_page(self, page: PullPage) -> list[Entry]:
        """A page pulled from a peer: checked whole, then its entries stored
        and its dead ranges applied (``Forum.apply_dead``)."""
        repair = self._repair
        if repair is not None and repair.running:
            self._reserve_own(page.vector)
        self._check(page.entries, page.dead)
        new = await self.forum.apply(page.entries, _PULLED) if page.entries else []
        for origin, ranges in sorted(page.dead.items()):
            await self.forum.apply_dead(origin, ranges)
        if repair is not None and repair.running:
            for entry in new:
                repair.count(entry.id.origin, 1)
        return new

    def _reserve_own(self, theirs: VersionVector) -> None:
        """A repairing node: a peer holds our own seqs up to here, so we
        issued them (the directory lost the tail that said so); never issue
        them again. Bounded by ``max_seq_gap``, as any seq a peer shows us."""
        strand, origin = self.forum.strand, self.me.origin
        runs = theirs.held(origin)
        top = runs[-1][1] if runs else 0
        if strand.own_seq_floor < top <= strand.own_seq_floor + self.config.max_seq_gap:
            strand.reserve_own(top)

    # -- repair from peers (forum.replication.repair) -------------------------------------------

    async def repair(self) -> RepairReport:
        """Rebuild what a damaged data directory lost, from the peers (see
        :mod:`forum.replication.repair`); the report says what came back."""
        if self._repair is None or not self._repair.running:
            self._repair = Repair(self.forum, self.membership, self._repair_pass)
        return await self._repair.run(self.config.repair_wait)

    def repair_report(self) -> RepairReport | None:
        """The last repair's report (while it runs: ``repairing``), or ``None``."""
        return None if self._repair is None else self._repair.report

    def repair_document(self) -> dict[str, Any] | None:
        """:meth:`repair_report` as ``/v1/status`` shows it."""
        report = self.repair_report()
        return None if report is None else report.to_document()

    async def _repair_pass(self, peer: Peer) -> None:
        """A round with ``peer`` (what we lack, our own entries among them),
        then a recheck of all we hold at or below what it holds (what it
        dropped, a Take among it, dies here)."""
        link = self._links.get(peer.url)
        if link is None:
            raise BadMessage(f"{peer.url} left the peer table")
        await link.syncer.sync()
        held = VersionVector.of(self.forum.strand)
        await link.syncer.recheck(held, dict(peer.vector.contiguous))

    async def _heal(self, url: str, pairs: list[tuple[Entry, Entry]]) -> None:
        """Put the origin's own entries (from the peer at ``url``) in place of
        the copies held here that differ, and say so once: healed, they
        differ no more."""
        done = await self.forum.replace(pairs)
        self._digests.add(done)
        if not done:
            return
        self._metrics.divergent(url, len(done))
        ids = ", ".join(str(entry.id) for entry in done[:5])
        more = f" and {len(done) - 5} more" if len(done) > 5 else ""
        log.warning(
            "divergence: %d entr%s held here differed from %s's own (%s%s); "
            "replaced by its entries (a forged or corrupted copy came from a peer)",
            len(done),
            "y" if len(done) == 1 else "ies",
            url,
            ids,
            more,
        )

    def _answer_digest(self, request: PullRequest) -> PageDigest | None:
        """Our blocks of our own origin, if the asker's digest of it differs
        from ours (over the same seqs, above both floors)."""
        asked, digests = request.digest, self._digests
        if asked is None or not digests.ready:
            return None
        origin = self.me.origin
        lo = max(asked.lo, digests.floor(origin))
        upto = min(asked.upto, self.forum.strand.vector().get(origin, 0))
        upto = max(upto, lo)
        if lo != asked.lo:
            return lo, upto, ()  # our floor is higher: compare above it next round
        mine = digests.range(origin, lo, upto)
        if (upto, mine.count, mine.xor) == (asked.upto, asked.count, asked.xor):
            return None
        return lo, upto, tuple(digests.blocks(origin, lo, upto)[:MAX_BLOCKS])

    def _check(
        self, entries: Sequence[Entry], dead: Mapping[str, Sequence[SeqRange]] | None = None
    ) -> None:
        """Refuse what no honest peer sends. ``BadMessage`` before anything is applied.

        Entries of our own origin past the highest seq we ever issued, or
        dead ranges of it past that, are forged. One at or below it that we
        do not hold is ours, lost with a damaged directory (a healthy node
        holds every seq it issued, or knows it dead): taken in, never blamed
        on the peer that kept it (docs/replication.md "Repair"). Past a gap, no seq may be more than
        ``max_seq_gap`` past the highest held (each seq past a gap takes
        room). What follows on from the gap-free prefix (as the page covers
        it, entries and dead ranges) leaves no gap, so a dead range there may
        span any number of seqs: a long history compacted away costs nothing.
        """
        strand = self.forum.strand
        highest, contiguous = strand.highest(), strand.vector()
        issued = strand.own_seq_floor
        covered: dict[str, list[SeqRange]] = {}
        for entry in entries:
            origin = entry.id.origin
            if origin == self.me.origin and entry.id.seq > issued:
                raise BadMessage(f"forged entry {entry.id}: this node never wrote it")
            covered.setdefault(origin, []).append((entry.id.seq, entry.id.seq))
        for origin, ranges in (dead or {}).items():
            if origin == self.me.origin and ranges and ranges[-1][1] > issued:
                raise BadMessage(f"forged dead range of {origin}: past what this node wrote")
            covered.setdefault(origin, []).extend(ranges)
        for origin, runs in covered.items():
            gap_free = contiguous.get(origin, 0)
            limit = highest.get(origin, 0) + self.config.max_seq_gap
            for first, last in sorted(runs):
                if first <= gap_free + 1:
                    gap_free = max(gap_free, last)
                elif last > limit:
                    raise BadMessage(
                        f"{origin}:{last} is more than {self.config.max_seq_gap} past "
                        f"the highest seq held of {origin}"
                    )

    def _label(self, sender: Member) -> str:
        """The metrics label of a sender: the URL we dial it at, if we do."""
        peer = self.membership.by_origin(sender.origin)
        if peer is not None:
            return peer.url
        return sender.url or sender.origin

    # -- serving peers (the routes) -----------------------------------------------------

    async def receive_push(self, push: Push, body_bytes: int) -> PushAck:
        """Apply a peer's push. ``BadMessage`` if it holds forged entries (nothing applied)."""
        self.membership.heard_from(push.sender)
        held_by = push.covered | {push.sender.origin}
        new = await self._apply(push.entries, Provenance(held_by))
        self._metrics.received(
            self._label(push.sender), "push", len(push.entries), len(new), body_bytes
        )
        held = self.forum.strand.vector()
        origins = {entry.id.origin for entry in push.entries}
        return PushAck(self.me, len(new), VersionVector({o: held.get(o, 0) for o in origins}))

    async def serve_pull(self, request: PullRequest) -> PullPage:
        """The page of entries the asker lacks; and, if it holds what we lack, pull soon."""
        config = self.config
        self.membership.heard_from(request.sender)
        self.membership.learn(request.members)
        strand = self.forum.strand
        limit = min(request.limit, config.page_entries)
        max_bytes = min(request.max_bytes, config.page_bytes)
        if request.recheck is None:
            filled = await fill_page(strand, request.vector, request.exclude, limit, max_bytes)
        else:
            filled = await fill_recheck(strand, request.recheck, limit, max_bytes)
        mine = VersionVector.of(strand)
        peer = self.membership.by_origin(request.sender.origin)
        if peer is not None:
            self.membership.acknowledged(peer, request.vector, full=True)
            self._acked(request.sender.origin, request.vector)
            if mine.lacks(request.vector):
                self._kick(peer, config.settle_delay, unless_caught_up=True)
        return PullPage(
            self.me,
            mine,
            tuple(filled.entries),
            filled.more,
            self.membership.members(),
            dead={origin: tuple(ranges) for origin, ranges in filled.dead.items()},
            floors=strand.floors() if filled.dead else {},
            digest=self._answer_digest(request),
        )

    def member_list(self) -> MemberList:
        return MemberList(self.me, self.membership.members())

    def serve_lend(self, request: LendRequest) -> Loan:
        """Lend the asker our own tuples (:mod:`forum.replication.lending`)."""
        self.membership.heard_from(request.sender)
        return serve_lend(self.forum, self.me, request)

    def receive_lent(self, notice: LentNotice) -> MemberList:
        """Our tuples lent to the sender: back, or kept longer."""
        self.membership.heard_from(notice.sender)
        serve_lent(self.forum, self.me, notice)
        return self.member_list()

    def note_sent(self, to: Member, kind: str, entries: int, body_bytes: int) -> None:
        """Count an answer we sent (the routes call these three)."""
        label = self._label(to)
        self._metrics.sent_entries(label, kind, entries)
        self._metrics.sent_bytes(label, kind, body_bytes)

    def note_received_pull(self, sender: Member, body_bytes: int) -> None:
        self._metrics.received_bytes(self._label(sender), "pull", body_bytes)

    def note_refused(self, reason: str) -> None:
        self._metrics.refused(reason)

    def note_clock(self, sender: Member, offset: float) -> None:
        """A request showed ``sender``'s clock ``offset`` seconds from ours."""
        peer = self.membership.by_origin(sender.origin)
        if peer is not None:
            self.clocks.sample(peer.url, offset)

    # -- status and metrics -------------------------------------------------------------

    def horizon(self) -> dict[str, int]:
        """The compaction horizon (:mod:`forum.replication.horizon`): per origin, what
        this node and every member it has not forgotten hold without a gap."""
        return horizon(self.forum.strand.vector(), self.membership.holdings())

    def status(self) -> list[PeerStatus]:
        """Per peer: url, origin, state, last contact, entries behind, lag in
        seconds, queued, how far it holds compaction back, forgotten, clock
        offset (``forum status``, and the per-peer gauges)."""
        queued = {url: len(link.outbox) for url, link in self._links.items()}
        held, now = self.forum.strand.vector(), time.monotonic()
        lags = {
            peer.url: round(lag(self.forum.arrivals, peer.vector, held, now), 3)
            for peer in self.membership.peers()
            if peer.vector_heard_mono is not None
        }
        return self.membership.snapshot(
            VersionVector.of(self.forum.strand), queued, self.clocks.offsets(), lags
        )


async def _quietly(work: Awaitable[None], name: str) -> None:
    """``work``, its failure logged (a task group must not end over a notice)."""
    try:
        await work
    except Exception:
        log.exception("%s failed", name)
