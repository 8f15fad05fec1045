"""Lending between nodes: a writer alive hands out its own tuples, to peers too.

The node's side (what is asked, when, and why) is :mod:`forum.node.space.lending`;
this is the wire's. :class:`Lending` is the node's ``Lender``: it says which
writers are alive (the membership's failure detector: a peer that fails a
call is suspect, and its tuples are handed out everywhere again, at their
turns, as before lending), asks a writer to lend (``POST .../lend``, one
round trip for up to ``limit`` tuples, bounded by ``lend_timeout``: a
writer that does not answer in time is not asked again for ``dead_after``
seconds, its tuples handed out here meanwhile), and
passes on, without waiting, what comes back and what is extended
(``POST .../lent``, batched per writer). The writer answers from its
``Forum.lend``; what it lends is checked and stored here like a pushed entry
before the Forum hands it out (it must be the writer's own Writes, under the
prefix asked, no more than asked).

A notice that does not arrive (the writer went down, the call failed) costs
nothing but time: the writer's reservation runs out at the lease asked, and
the tuple is live there again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from forum.node.core.entries import Entry, EntryId, Write
from forum.node.space.forum import Forum
from forum.node.space.lending import Lent
from forum.node.space.listeners import Provenance
from forum.replication.config import ReplicationConfig
from forum.replication.errors import BadMessage, BadSignature, PeerError
from forum.replication.membership import Membership, PeerState
from forum.replication.messages import (
    LEND_PATH,
    LENT_PATH,
    LendRequest,
    LentNotice,
    Loan,
    Member,
    decode_loan,
    encode,
)
from forum.replication.metrics import ReplicationMetrics
from forum.replication.push import report_failure
from forum.replication.transport import PeerTransport

log = logging.getLogger(__name__)

#: Checks and stores entries from a peer (the replicator's ``_apply``).
Apply = Callable[[Sequence[Entry], Provenance], Awaitable[list[Entry]]]
#: Runs a task for the notices in the replicator's task group (``None``: not running).
Spawn = Callable[[Awaitable[None], str], None]


class Lending:
    """This node's :class:`~forum.node.space.lending.Lender`, over its peers."""

    def __init__(
        self,
        *,
        me: Member,
        membership: Membership,
        transport: PeerTransport,
        config: ReplicationConfig,
        apply: Apply,
        spawn: Spawn,
        metrics: ReplicationMetrics,
    ) -> None:
        self._me = me
        self._membership = membership
        self._transport = transport
        self._timeout = config.lend_timeout
        self._slow_for = config.dead_after
        #: Writers that did not answer a loan in time, until when they are
        #: not asked (hung, or going down: the failure detector decides by then).
        self._slow: dict[str, float] = {}
        self._apply = apply
        self._spawn = spawn
        self._metrics = metrics
        #: Per writer, the seqs back and to extend, not sent yet.
        self._released: dict[str, list[int]] = {}
        self._extended: dict[str, tuple[list[int], float]] = {}
        #: Loans asked, and tuples lent us (``forum_replication_loans_total`` per result).
        self.asked = self.lent = 0

    def owns(self, origin: str) -> bool:
        """Alive: it answered our last call, or it calls us and no call of
        ours to it has failed since (a node just started, or just met, that
        pushes its writes to us hands them out itself)."""
        peer = self._membership.by_origin(origin)
        if peer is None:
            return False
        if self._slow and origin in self._slow:
            if asyncio.get_running_loop().time() < self._slow[origin]:
                return False
            del self._slow[origin]
        if peer.state is PeerState.ALIVE:
            return True
        return (
            peer.state is PeerState.SUSPECT
            and peer.failing_since is None
            and peer.last_heard_mono is not None
        )

    async def borrow(
        self, origin: str, prefix: bytes, limit: int, lease: float
    ) -> Sequence[Lent] | None:
        peer = self._membership.by_origin(origin)
        if peer is None:
            return None
        request = LendRequest(self._me, prefix, limit, _ms(lease))
        self.asked += 1
        try:
            async with asyncio.timeout(self._timeout):
                # One try: a taker is waiting, and the bound is short.
                answer = await self._transport.call(
                    peer.url, "POST", LEND_PATH, encode(request), to=origin, attempts=1
                )
            loan = decode_loan(answer)
            self._check(loan, origin, prefix, limit)
            await self._apply(loan.entries, Provenance(held_by=frozenset({origin})))
        except TimeoutError:
            self._metrics.loan(peer.url, "timeout")
            self._slow[origin] = asyncio.get_running_loop().time() + self._slow_for
            log.info(
                "lend: %s did not answer within %.3fs: its tuples are handed out here "
                "for %.0fs (or until it is found dead)",
                peer.url,
                self._timeout,
                self._slow_for,
            )
            return None
        except (PeerError, BadMessage, BadSignature) as exc:
            self._metrics.loan(peer.url, "failed")
            log.debug("lend: %s failed: %s", peer.url, exc)
            report_failure(self._membership, peer, exc)
            return None
        self.lent += len(loan.entries)
        self._metrics.loan(peer.url, "lent" if loan.entries else "empty", len(loan.entries))
        return [
            Lent(entry, deliveries)
            for entry, deliveries in zip(loan.entries, loan.deliveries, strict=True)
            if isinstance(entry, Write)
        ]

    @staticmethod
    def _check(loan: Loan, origin: str, prefix: bytes, limit: int) -> None:
        """A loan holds at most ``limit`` Writes of ``origin`` under ``prefix``."""
        if loan.sender.origin != origin:
            raise BadMessage(f"a loan asked of {origin} came from {loan.sender.origin}")
        if len(loan.entries) > limit:
            raise BadMessage(f"a loan of {len(loan.entries)} tuples, {limit} asked")
        for entry in loan.entries:
            if not isinstance(entry, Write) or entry.id.origin != origin:
                raise BadMessage(f"a loan from {origin} holds {entry.id}, not its own Write")
            if not entry.payload.startswith(prefix):
                raise BadMessage(f"a loan holds {entry.id}, not under the prefix asked")

    def returned(self, origin: str, entry_ids: Sequence[EntryId]) -> None:
        self._released.setdefault(origin, []).extend(i.seq for i in entry_ids)
        self._spawn(self._notify(origin), f"lent back to {origin}")

    def extended(self, origin: str, entry_ids: Sequence[EntryId], lease: float) -> None:
        seqs, _ = self._extended.get(origin, ([], lease))
        seqs.extend(i.seq for i in entry_ids)
        self._extended[origin] = (seqs, lease)
        self._spawn(self._notify(origin), f"lent extended to {origin}")

    async def _notify(self, origin: str) -> None:
        """Send what is pending for ``origin`` (nothing, if an earlier call sent it)."""
        released = self._released.pop(origin, [])
        extended, lease = self._extended.pop(origin, ([], 1.0))
        peer = self._membership.by_origin(origin)
        if not (released or extended) or peer is None:
            return
        notice = LentNotice(self._me, tuple(released), tuple(extended), _ms(lease))
        try:
            await self._transport.call(peer.url, "POST", LENT_PATH, encode(notice), to=origin)
        except (PeerError, BadMessage, BadSignature) as exc:
            # Its reservations run out at their leases: live there again, no loss.
            log.debug("lend: notice to %s failed: %s", peer.url, exc)


def serve_lend(forum: Forum, me: Member, request: LendRequest) -> Loan:
    """The loan for ``request``: this node's own tuples, reserved for the asker."""
    lent = forum.lend(request.sender.origin, request.prefix, request.limit, request.lease_ms / 1000)
    return Loan(me, tuple(one.write for one in lent), tuple(one.deliveries for one in lent))


def serve_lent(forum: Forum, me: Member, notice: LentNotice) -> None:
    """Apply a notice: the asker's tuples back, or kept longer."""
    asker = notice.sender.origin
    if notice.released:
        forum.returned(asker, [EntryId(me.origin, seq) for seq in notice.released])
    if notice.extended:
        ids = [EntryId(me.origin, seq) for seq in notice.extended]
        forum.extend_lent(asker, ids, notice.lease_ms / 1000)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
