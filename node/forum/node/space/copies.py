"""Write concern: a write answered only once ``copies`` members hold it durably.

A write with ``copies=w`` is appended here as any (durable here: one copy),
then waits until ``w - 1`` peers hold it durably too. A peer says what it
holds of this node's origin whenever it acknowledges: the answer to a push
(``PushAck``: its contiguous seqs of each origin pushed, read after
``Forum.apply`` returned, which is once the entries are durable there) and
the vector of each anti-entropy pull it makes. Replication tells
:meth:`Copies.held` each of these (``held(peer, upto)``: every seq of ours up
to ``upto`` is durable at ``peer``); a waiting write wakes on the ack that
makes its count, never by polling::

    t0      write(p, copies=2) on A: appended, fsynced on A (A:7)
    t0      the listener queues A:7 in B's outbox; the pusher sends it
    t0+r    B applies A:7 (fsynced on B) and answers PushAck {A: 7}
    t0+r    A's pusher hands the ack to held(B, 7): the write wakes, answered

Only the node is seen here: replication installs the cluster's size
(:meth:`Copies.set_members`, as it installs the ranking with
``Forum.set_ranking``) and calls :meth:`held`; the node imports nothing of
replication. A node without peers has one member.

Each acknowledgement that moves a peer on compares its range with every
write waiting (as many as the writes with copies in flight here); one that
moves no peer on costs a dict look-up.

Not enough copies within ``timeout`` seconds (``forum serve
--copies-timeout``): :class:`~forum.node.core.errors.TooFewCopies`, naming
how many members hold it. The write is not undone (it is durable here and
replication goes on copying it), and never reported as held by more than
hold it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from forum.node.core.entries import EntryId
from forum.node.core.errors import TooFewCopies
from forum.node.core.write_options import check_copies

#: How long a write waits for its copies by default, in seconds.
COPIES_TIMEOUT = 5.0


class _Wait:
    """A write waiting for its copies: its highest seq and how many peers
    that hold it are still missing."""

    __slots__ = ("future", "missing", "seq")

    def __init__(self, seq: int, missing: int, future: asyncio.Future[None]) -> None:
        self.seq = seq
        self.missing = missing
        self.future = future


class Copies:
    """Which peers hold which of this node's writes, and the writes waiting for copies.

    ``default``: the copies of a write that gives none (``forum serve
    --ack-copies``); ``waits_by_default`` says whether that is more than
    this node's own, the one test a plain write makes (``Forum.write``)."""

    __slots__ = ("_held", "_members", "_origin", "_waits", "default", "timeout", "waits_by_default")

    def __init__(self, origin: str, timeout: float = COPIES_TIMEOUT, default: int = 1) -> None:
        if not timeout > 0:
            raise ValueError(f"the copies timeout must be > 0 seconds, not {timeout!r}")
        self._origin = origin
        self.timeout = timeout
        self.default = check_copies(default)
        self.waits_by_default = default > 1
        self._members: Callable[[], int] | None = None
        #: Per peer origin, the highest seq of ours up to which it holds every entry.
        self._held: dict[str, int] = {}
        self._waits: list[_Wait] = []

    def set_members(self, members: Callable[[], int] | None) -> None:
        """How many members the cluster has, this node among them, from now
        on (``None``: this node alone). Installed by replication."""
        self._members = members

    def members(self) -> int:
        """The cluster's size: this node and every peer it knows."""
        return 1 if self._members is None else self._members()

    def check(self, copies: object) -> int:
        """``copies`` checked against the cluster's size now (``ValueError``,
        one line, before anything is written)."""
        return check_copies(copies, self.members())

    def count(self, seq: int) -> int:
        """How many members hold our seq ``seq`` durably, as last heard
        (this node's own copy counts: it is durable before anyone waits)."""
        return 1 + sum(1 for upto in self._held.values() if upto >= seq)

    def held(self, peer: str, upto: int) -> None:
        """``peer`` (its origin) holds every seq of ours up to ``upto``
        durably: wake the writes this makes whole. An older acknowledgement
        come late changes nothing (what a peer held durably, it held)."""
        was = self._held.get(peer, 0)
        if upto <= was:
            return
        self._held[peer] = upto
        for wait in self._waits:
            if was < wait.seq <= upto:
                wait.missing -= 1
                if wait.missing <= 0 and not wait.future.done():
                    wait.future.set_result(None)

    async def wait(self, ids: Sequence[EntryId], copies: int) -> None:
        """Return once ``copies`` members hold every one of ``ids`` (this
        node's own writes, durable here); :class:`TooFewCopies` after
        ``timeout`` seconds short of them."""
        seq = max((i.seq for i in ids if i.origin == self._origin), default=0)
        if not seq:
            return
        missing = copies - self.count(seq)
        if missing <= 0:
            return
        loop = asyncio.get_running_loop()
        wait = _Wait(seq, missing, loop.create_future())
        self._waits.append(wait)
        started = loop.time()
        try:
            async with asyncio.timeout(self.timeout):
                await wait.future
        except TimeoutError:
            pass
        finally:
            self._waits.remove(wait)
        held = self.count(seq)
        if held < copies:
            raise TooFewCopies(ids, held, copies, min(loop.time() - started, self.timeout))

    def close(self) -> None:
        """End every wait now (the node is shutting down): each answers with
        the copies held so far."""
        for wait in self._waits:
            if not wait.future.done():
                wait.future.set_result(None)
