"""Push: new entries go to each peer in small batches, soon after they are durable.

Each peer has an :class:`Outbox`, a bounded queue fed by the Forum's listener
(a non-blocking ``put``: a slow or dead peer never slows a write), and a
:class:`Pusher` that drains it::

    t0      an entry becomes durable here; the listener puts it in each outbox
    t0      an idle link (no push for ``batch_delay``) sends it at once
    t0+r    the peer answers once the entries are durable there
    t0+r+d  on a busy link, the next push waits ``batch_delay`` (d, a few ms)
            for company, then takes up to ``max_batch`` queued entries

A push is signed for the peer's origin (:mod:`forum.replication.auth`), so the
pusher waits until the peer is identified: a seed by the answer to the first
anti-entropy pull (which runs at once), a learned peer by its member list.

One push per peer is in flight at a time (``max_in_flight``), so a busy link
batches by itself too: what queues during a push leaves in the next one. A lone write is not
delayed; under load, pushes carry several entries each, which keeps the
bytes per entry (HTTP framing included) low.
When the queue is full, or a push fails after its retries, the entries are
dropped *for that peer* and anti-entropy is asked to run: the peer will pull
what it lacks from the vectors, so nothing is lost, only delayed.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable

from forum.node.core.entries import Entry, Write
from forum.replication.config import ReplicationConfig
from forum.replication.errors import BadMessage, BadSignature, PeerError, PeerIsSelf, PeerRejected
from forum.replication.membership import Membership, Peer
from forum.replication.messages import PUSH_PATH, Member, Push, decode_push_ack, encode
from forum.replication.metrics import ReplicationMetrics
from forum.replication.transport import PeerTransport
from forum.replication.vector import VersionVector

log = logging.getLogger(__name__)

#: What an entry costs in a queue or a batch beyond its payload (ids, framing).
ENTRY_OVERHEAD = 48


def entry_size(entry: Entry) -> int:
    """About how many bytes ``entry`` takes on the wire."""
    return ENTRY_OVERHEAD + (len(entry.payload) if isinstance(entry, Write) else 0)


class Outbox:
    """A bounded queue of entries waiting to be pushed to one peer."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._queue: deque[Entry] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, entries: Iterable[Entry]) -> int:
        """Queue what fits; returns how many entries did not fit (dropped)."""
        dropped = 0
        for entry in entries:
            size = entry_size(entry)
            if len(self._queue) >= self._max_entries or self._bytes + size > self._max_bytes:
                dropped += 1
                continue
            self._queue.append(entry)
            self._bytes += size
        if self._queue:
            self._ready.set()
        return dropped

    def clear(self) -> int:
        """Drop everything queued (the peer is down); returns how many."""
        dropped = len(self._queue)
        self._queue.clear()
        self._bytes = 0
        self._ready.clear()
        return dropped

    async def wait(self) -> None:
        """Return once something is queued."""
        await self._ready.wait()

    def batch(self, max_entries: int, max_bytes: int) -> list[Entry]:
        """Take the oldest entries, up to either bound (at least one, if any)."""
        batch: list[Entry] = []
        size = 0
        while self._queue and len(batch) < max_entries:
            entry_bytes = entry_size(self._queue[0])
            if batch and size + entry_bytes > max_bytes:
                break
            batch.append(self._queue.popleft())
            size += entry_bytes
        self._bytes -= size
        if not self._queue:
            self._ready.clear()
        return batch


class Pusher:
    """Drains one peer's outbox into pushes, for as long as it runs."""

    def __init__(
        self,
        *,
        peer: Peer,
        outbox: Outbox,
        me: Member,
        covered: Callable[[], frozenset[str]],
        transport: PeerTransport,
        membership: Membership,
        metrics: ReplicationMetrics,
        config: ReplicationConfig,
        on_dropped: Callable[[Peer], None],
        on_acked: Callable[[str, VersionVector], None] | None = None,
    ) -> None:
        """``on_acked(origin, vector)``: the peer of that origin answered a
        push holding ``vector`` durably (the copies of writes wait on it)."""
        self._peer = peer
        self._outbox = outbox
        self._me = me
        self._covered = covered
        self._transport = transport
        self._membership = membership
        self._metrics = metrics
        self._config = config
        self._on_dropped = on_dropped
        self._on_acked = on_acked
        self._in_flight = 0
        self._last_push = -math.inf

    async def run(self) -> None:
        """``max_in_flight`` senders share the outbox (entries apply in any order)."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self._config.max_in_flight):
                group.create_task(self._send())

    async def _send(self) -> None:
        config = self._config
        loop = asyncio.get_running_loop()
        while True:
            await self._outbox.wait()
            await self._peer.identified.wait()
            # An idle link sends at once; a busy one waits a moment for company.
            busy = self._in_flight or loop.time() - self._last_push < config.batch_delay
            if busy and len(self._outbox) < config.max_batch:
                await asyncio.sleep(config.batch_delay)
            batch = self._outbox.batch(config.max_batch, config.max_batch_bytes)
            if batch:
                self._in_flight += 1
                try:
                    await self.push(batch)
                finally:
                    self._in_flight -= 1
                    self._last_push = loop.time()

    async def push(self, batch: list[Entry]) -> None:
        """Send one batch; on failure drop it for this peer and ask for anti-entropy."""
        peer = self._peer
        to = peer.origin
        if to is None:
            raise RuntimeError(f"push to {peer.url} before its origin is known")
        body = encode(Push(self._me, self._covered(), tuple(batch)))
        self._metrics.sent_bytes(peer.url, "push", len(body))
        try:
            answer = await self._transport.call(peer.url, "POST", PUSH_PATH, body, to=to)
            ack = decode_push_ack(answer)
        except (PeerError, BadMessage, BadSignature) as exc:
            log.debug("push of %d entries to %s failed: %s", len(batch), peer.url, exc)
            self._metrics.dropped(peer.url, "push_failed", len(batch))
            report_failure(self._membership, peer, exc)
            self._on_dropped(peer)
            return
        self._metrics.sent_entries(peer.url, "push", len(batch))
        self._metrics.received_bytes(peer.url, "push_ack", len(answer))
        if self._membership.contacted(peer.url, ack.sender) is not None:
            self._membership.acknowledged(peer, ack.vector, full=False)
            if self._on_acked is not None:
                self._on_acked(ack.sender.origin, ack.vector)


def report_failure(membership: Membership, peer: Peer, exc: Exception) -> None:
    """Tell membership what a failed call says about the peer."""
    if isinstance(exc, PeerIsSelf):
        membership.is_self(peer.url)
    elif isinstance(exc, PeerRejected) and exc.status in (400, 413):
        # The peer is up and refused this body; other calls will do.
        peer.last_error = str(exc)
        log.warning("%s", exc)
    else:
        membership.failed(peer.url, exc)
