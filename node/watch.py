"""Watching a node: its writes, takes and expiries as a stream of events.

A :class:`WatchHub` (one per node) hears every entry once it is durable here
(the Forum's listener: local entries and a peer's alike) and every tuple that
expires here (the Forum's expiry listener). Each becomes a :class:`HubEvent`
numbered from 1 in the order the hub heard it (a pause marker, not an event,
takes a number too); its id is ``<boot>-<n>``,
where ``<boot>`` is drawn at random when the hub is made (once per run of the
node), so an id of an earlier run is never mistaken for one of this run.

The hub keeps the last ``buffer`` events (a ring of the batches it heard,
holding at most ``buffer_bytes`` of payloads, and always the newest batch)
for resumption: a watcher
that reconnects with the id of the last event it saw gets the events after it
from the ring, then goes on live. When it cannot (the id is older than the
ring: ``gap``; the id is of another run of the node, or of none: ``reset``),
it gets a :class:`Missed` notice instead and goes on from now; it should read
the space again (``list``) to catch up.

Each watcher (:class:`Subscription`) has a queue of at most ``queue`` events.
The listeners only append to the queues and wake their watchers: they never
wait, so a watcher that does not keep up never slows the node. One that falls
``queue`` events behind is cut off (:attr:`Subscription.overflowed`): its
queue is dropped, and its stream ends with an ``overflow`` event.

A prefix filters on the payload. A Take carries only its target's id, so
while anyone watches the hub remembers the payload of each tuple it sees
written until it is taken or expires, up to ``known`` tuples (the oldest
forgotten first); while nobody does it remembers none (the payload objects
would be kept alive for nothing: the live index holds its own copy of the
bytes, and a ``forum serve`` with no watcher grew by some 150 bytes per live
tuple). A take whose target it does not know (a tuple written before the
node started, while nobody watched, or forgotten) reaches only watchers of
every prefix: a filtered watcher would otherwise get the takes of every other
prefix, which is what a filter is there to spare it. Pause markers
(``Properties.pause``) are not tuples: neither they nor their takes are events.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from node.entries import Entry, EntryId, Take, Tuple, Write
from node.forum import Forum, Provenance

#: How many events the ring keeps for resumption, by default.
BUFFER = 10_000
#: The most payload bytes the ring holds on to (its events keep the tuples'
#: bytes alive after they are taken): past it the oldest events go first.
BUFFER_BYTES = 64 * 1024 * 1024
#: How far a watcher may fall behind before it is cut off, by default: as
#: many as one batch write makes, so that one batch never cuts a watcher off.
QUEUE = 10_000
#: How many written tuples' payloads the hub remembers to filter their takes.
KNOWN = 100_000
#: Seconds between two keep-alive comments on an idle stream, by default.
HEARTBEAT = 5.0
#: A known tuple that is not an event (a pause marker), and its takes neither.
_HIDDEN = object()
#: ``HubEvent``'s own ``__new__`` is Python; the tuple's, half the cost per write.
_new_event = tuple.__new__


class HubEvent(NamedTuple):
    """One event: ``n`` numbers it in this run of the node; ``item`` is the
    Write (``write``), the Take (``take``) or the expired tuple (``expire``).
    ``match`` is the payload a prefix is matched against; ``None`` for a take
    of a tuple the hub does not know. (A named tuple, not a dataclass: one is
    made per entry on the write path, and a tuple is the cheapest to make;
    the hub makes them with :data:`_new_event`.)"""

    n: int
    item: Write | Take | Tuple
    match: bytes | None

    @property
    def kind(self) -> str:
        if isinstance(self.item, Write):
            return "write"
        return "take" if isinstance(self.item, Take) else "expire"


class _Batch(NamedTuple):
    """Entries the hub heard in one call, as the ring keeps them: numbered
    from ``first``; ``matches`` has each one's payload to match (``None``: a
    take of a tuple not known; ``_HIDDEN``: not an event, a number unused)."""

    first: int
    items: list[Write | Take | Tuple]
    matches: list[object]
    #: The payload bytes the batch holds (a take's counts none: its write did).
    size: int

    def events(self) -> list[HubEvent]:
        first = self.first
        return [
            _new_event(HubEvent, (first + i, item, match))
            for i, (item, match) in enumerate(zip(self.items, self.matches, strict=True))
            if match is None or isinstance(match, bytes)
        ]


@dataclass(frozen=True, slots=True)
class Missed:
    """Why a resuming watcher goes on from now: ``gap`` (its id is older than
    the ring) or ``reset`` (its id is of another run of the node)."""

    kind: str
    message: str


class Subscription:
    """One watcher: its prefix, and the events queued for it."""

    def __init__(self, hub: WatchHub, prefix: bytes, bound: int, start: str) -> None:
        self.prefix = prefix
        #: The id of the last event before the watch began: where it starts.
        self.start = start
        self._hub = hub
        self._bound = bound
        self._queue: deque[HubEvent] = deque()
        self._wake = asyncio.Event()
        self.overflowed = False
        self.closed = False
        #: The deadline of the stream's write in progress: moved to now to
        #: end a write that a client who reads nothing holds up.
        self.cutoff: asyncio.Timeout | None = None

    def wants(self, event: HubEvent) -> bool:
        if not self.prefix:
            return True
        return event.match is not None and event.match.startswith(self.prefix)

    def offer(self, events: list[HubEvent]) -> None:
        """Queue those of ``events`` that match; cut the watcher off if it
        falls too far behind."""
        if self.closed:
            return
        wanted = events if not self.prefix else [e for e in events if self.wants(e)]
        if not wanted:
            return
        if len(self._queue) + len(wanted) > self._bound:
            self.overflowed = True
            self._end()
            return
        self._queue.extend(wanted)
        self._wake.set()

    def close(self) -> None:
        """End the watch (the node is stopping): its stream ends at once."""
        self._end()

    def _end(self) -> None:
        self.closed = True
        self._queue.clear()
        self._wake.set()
        if self.cutoff is not None:
            self.cutoff.reschedule(asyncio.get_running_loop().time())
        self._hub.unsubscribe(self)

    async def next_batch(self, timeout: float) -> list[HubEvent]:
        """The events queued, waiting up to ``timeout`` s for one (none:
        the wait ran out, or the watch ended: see :attr:`closed`)."""
        if not self._queue and not self.closed:
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass
        self._wake.clear()
        batch = list(self._queue)
        self._queue.clear()
        return batch


class WatchHub:
    """The events of one node and its watchers. Use as an async context
    manager around the node's life: it listens to the Forum while open, and
    ends every watch when it closes."""

    def __init__(
        self,
        forum: Forum,
        *,
        buffer: int = BUFFER,
        queue: int = QUEUE,
        known: int = KNOWN,
        heartbeat: float = HEARTBEAT,
        buffer_bytes: int = BUFFER_BYTES,
    ) -> None:
        if min(buffer, queue, known, buffer_bytes) < 1 or not heartbeat > 0:
            raise ValueError("a watch hub needs buffer, queue, known >= 1 and heartbeat > 0")
        self._forum = forum
        self.boot = secrets.token_hex(6)
        self.queue = queue
        self.heartbeat = heartbeat
        self._known_cap = known
        self._ring: deque[_Batch] = deque()
        self._buffer = buffer
        self._buffer_bytes = buffer_bytes
        self._ring_events = 0
        self._ring_bytes = 0
        # Insertion order, oldest first.
        self._known: dict[EntryId, object] = {}
        self._subscriptions: set[Subscription] = set()
        self._n = 0
        self._listening = False
        self.closed = False

    async def __aenter__(self) -> WatchHub:
        self._forum.add_listener(self.on_entries)
        self._forum.add_expiry_listener(self.on_expired)
        self._listening = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening and end every watch. Idempotent."""
        self.closed = True
        for subscription in list(self._subscriptions):
            subscription.close()
        if self._listening:
            self._listening = False
            self._forum.remove_listener(self.on_entries)
            self._forum.remove_expiry_listener(self.on_expired)

    @property
    def watchers(self) -> int:
        return len(self._subscriptions)

    @property
    def remembered(self) -> int:
        """How many written tuples' payloads the hub keeps (to filter their takes)."""
        return sum(1 for v in self._known.values() if v is not _HIDDEN)

    # -- ids ---------------------------------------------------------------------

    def event_id(self, n: int) -> str:
        return f"{self.boot}-{n}"

    @property
    def last_id(self) -> str:
        """The id of the last event so far (``<boot>-0`` before the first)."""
        return self.event_id(self._n)

    # -- the Forum's listeners: append and wake, never wait ----------------------

    def on_entries(self, entries: Sequence[Entry], provenance: Provenance) -> None:
        # The write path runs through here for every entry: a dict operation
        # and a list append each; the ring takes the batch as one item, and
        # events are made only when someone watches.
        track = bool(self._subscriptions)
        if track and len(self._known) + len(entries) > self._known_cap:
            self._forget_oldest(len(entries))
        known, size = self._known, 0
        matches: list[object] = []
        for entry in entries:
            if isinstance(entry, Write):
                payload: object = _HIDDEN if entry.props.pause else entry.payload
                if track or payload is _HIDDEN:  # pause markers are few: always known
                    known[entry.id] = payload
                if isinstance(payload, bytes):
                    size += len(payload)
                matches.append(payload)
            else:
                matches.append(known.pop(entry.target, None) if known else None)
        self._publish(_Batch(self._n + 1, list(entries), matches, size))

    def on_expired(self, tuples: Sequence[Tuple]) -> None:
        for item in tuples:
            self._known.pop(item.id, None)
        size = sum(len(item.payload) for item in tuples)
        self._publish(_Batch(self._n + 1, list(tuples), [t.payload for t in tuples], size))

    def _forget_oldest(self, room: int) -> None:
        # Room for ``room`` more and a tenth, by making the dict again: popping
        # a dict's first key one at a time is slow (it is found past every key
        # deleted before it).
        keep = max(self._known_cap - self._known_cap // 10 - room, 0)
        drop = max(len(self._known) - keep, 0)
        self._known = dict(itertools.islice(self._known.items(), drop, None))

    def _publish(self, batch: _Batch) -> None:
        """Add ``batch`` to the ring (the newest batch stays, whatever its
        size) and its events to the queues."""
        if not batch.items:
            return
        self._n = batch.first + len(batch.items) - 1
        ring = self._ring
        ring.append(batch)
        self._ring_events += len(batch.items)
        self._ring_bytes += batch.size
        while len(ring) > 1 and (
            self._ring_events > self._buffer or self._ring_bytes > self._buffer_bytes
        ):
            dropped = ring.popleft()
            self._ring_events -= len(dropped.items)
            self._ring_bytes -= dropped.size
        if self._subscriptions:
            events = batch.events()
            for subscription in list(self._subscriptions):  # an offer may unsubscribe
                subscription.offer(events)

    # -- watchers ----------------------------------------------------------------

    def subscribe(
        self, prefix: bytes, last_event_id: str | None = None
    ) -> tuple[Subscription, Missed | None, list[HubEvent]]:
        """A new watcher of ``prefix``; if it resumes after ``last_event_id``,
        what it missed: the events still in the ring, or why it cannot have
        them. ``ValueError`` if ``last_event_id`` is not an event id.

        No event is lost or repeated between the replay and the queue: both
        are made here, with no wait in between."""
        missed, replay = self._resume(last_event_id)  # before a wait: nothing in between
        subscription = Subscription(self, prefix, self.queue, self.last_id)
        self._subscriptions.add(subscription)
        return subscription, missed, [e for e in replay if subscription.wants(e)]

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)
        if not self._subscriptions:  # nobody watches: keep no payload alive
            self._known = {k: v for k, v in self._known.items() if v is _HIDDEN}

    def _resume(self, last_event_id: str | None) -> tuple[Missed | None, list[HubEvent]]:
        if last_event_id is None:
            return None, []
        boot, n = parse_event_id(last_event_id)
        if boot != self.boot or n > self._n:
            return Missed(
                "reset",
                f"{last_event_id} is not an id of this run of the node (it restarted, or "
                "another node answered): events may have been missed; read the space again",
            ), []
        oldest = self._ring[0].first if self._ring else self._n + 1
        if n < oldest - 1:
            return Missed(
                "gap",
                f"the events after {last_event_id} are no longer buffered (the node keeps "
                f"the last {self._buffer}): {oldest - 1 - n} were missed; read the space again",
            ), []
        after = (b for b in self._ring if b.first + len(b.items) - 1 > n)
        return None, [e for batch in after for e in batch.events() if e.n > n]


def parse_event_id(text: str) -> tuple[str, int]:
    """``<boot>-<n>`` to ``(boot, n)``; ``ValueError`` if it is not one."""
    boot, sep, n = text.strip().rpartition("-")
    if not sep or not boot or not n.isascii() or not n.isdigit() or len(n) > 19:
        raise ValueError(f"not a watch event id (<boot>-<n>): {text[:80]!r}")
    return boot, int(n)
