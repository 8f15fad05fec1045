"""Watching a node: its writes, takes and expiries as a stream of events.

A :class:`WatchHub` (one per node) hears every entry once it is durable here
(the Forum's take listener: local entries and a peer's alike, each Take with
the tuple it removed here) and every tuple that expires here (the Forum's
expiry listener). Each becomes a :class:`HubEvent` numbered from 1 in the
order the hub heard it (a pause marker, not an event, takes a number too);
its id is ``<boot>-<n>``, where ``<boot>`` is drawn at random when the hub is
made (once per run of the node), so an id of an earlier run is never
mistaken for one of this run.

The hub keeps the last ``buffer`` events (a ring of the batches it heard,
holding at most ``buffer_bytes`` of payloads, and always the newest batch)
for resumption: a watcher that reconnects with the id of the last event it
saw gets the events after it from the ring, then goes on live. When it
cannot (the id is older than the ring: ``gap``; the id is of another run of
the node, or of none: ``reset``), it gets a :class:`Missed` notice instead
and goes on from now; it should read the space again (``list``) to catch up.

**Watchers cost what they send.** Watchers of one prefix in one format share
a :class:`_Channel`: each event is encoded once per format (the
:data:`Encoder` a watcher subscribes with: the same function, the same
format) and the channel holds the encoded events (shared ``bytes``, the same
objects in every channel) from the oldest a watcher of it has yet to send to
the newest; a watcher is only a position in it. So an event costs the write
path one encoding per format and one append per channel, whatever the
number of watchers, and a watcher that sends nothing holds no copy of
anything. The listeners never wait: a watcher that does not keep up never
slows the node. One that falls more than ``queue`` events or ``queue_bytes``
encoded bytes behind its channel's newest is cut off
(:attr:`Subscription.overflowed`), and so is one whose stream cannot send a
byte for ``stall`` seconds (its client reads nothing): its stream ends with
an ``overflow`` event.

A prefix filters on the payload: a write's, an expired tuple's, and a take's
target's (the Forum gives the tuple it took with the Take). A Take whose
target was not here (a peer's Take that came before its Write, a second
Take of a tuple taken twice) has no payload: it reaches every watcher,
whatever its prefix, since it may be one of theirs; a watcher of a prefix
may so see a take of a tuple it never saw written, never miss one of its
own. Pause markers (``Properties.pause``) are not tuples: neither they nor
their takes are events.
"""

from __future__ import annotations

import asyncio
import bisect
import secrets
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

from forum.node.core.entries import Entry, Take, Tuple, Write
from forum.node.space.forum import Forum

#: How many events the ring keeps for resumption, by default.
BUFFER = 10_000
#: The most payload bytes the ring holds on to (its events keep the tuples'
#: bytes alive after they are taken): past it the oldest events go first.
BUFFER_BYTES = 64 * 1024 * 1024
#: How far a watcher may fall behind before it is cut off, by default: as
#: many as one batch write makes, so that one batch never cuts a watcher off.
QUEUE = 10_000
#: How many encoded bytes a watcher may fall behind before it is cut off, by
#: default: a batch of 10,000 events of a few hundred bytes each fits.
QUEUE_BYTES = 16 * 1024 * 1024
#: Seconds a watcher's stream may wait for its client to take what it wrote
#: (events, or a keep-alive) before the watcher is cut off.
STALL = 10.0
#: Seconds between two keep-alive comments on an idle stream, by default.
HEARTBEAT = 5.0
#: The most encoded bytes a stream takes from its channel at a time (one
#: write, the next only once the kernel took it): a client that reads
#: nothing holds at most about this much of the node's memory.
PIECE = 16 * 1024
#: Seconds a channel gathers events before it wakes its watchers: each sends
#: what came meanwhile in one write, so a watcher costs the node a few
#: writes a second under a burst of single writes, not one per event.
GATHER = 0.05
#: A channel looks for watchers to cut off, and drops what all have sent,
#: after this many events or bytes more (or sooner, as a bound comes).
_TRIM_EVENTS = 1024
_TRIM_BYTES = 256 * 1024
#: A pause marker, or its take: a number, no event.
_HIDDEN = object()
#: ``HubEvent``'s own ``__new__`` is Python; the tuple's, half the cost per write.
_new_event = tuple.__new__


class HubEvent(NamedTuple):
    """One event: ``n`` numbers it in this run of the node; ``item`` is the
    Write (``write``), the Take (``take``) or the expired tuple (``expire``).
    ``match`` is the payload a prefix is matched against; ``None`` for a take
    of a tuple that was not here. (A named tuple, not a dataclass: one is
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


#: ``encode(event_id, event)``: one event as a stream sends it (a format).
Encoder = Callable[[str, HubEvent], bytes]


class _Batch(NamedTuple):
    """Entries the hub heard in one call, as the ring keeps them: numbered
    from ``first``; ``matches`` has each one's payload to match (``None``: a
    take of a tuple not here; ``_HIDDEN``: not an event, a number unused)."""

    first: int
    items: list[Write | Take | Tuple]
    matches: list[object]
    #: The payload bytes the batch holds (a take's, its tuple's).
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


def wants(prefix: bytes, event: HubEvent) -> bool:
    """Whether a watcher of ``prefix`` gets ``event`` (a take of a tuple that
    was not here reaches every watcher)."""
    return event.match is None or event.match.startswith(prefix)


class _Channel:
    """The encoded events of one prefix in one format, shared by its
    watchers: those from the oldest one a watcher has yet to send to the
    newest. Positions count the events ever added; ``*_bytes`` their bytes."""

    __slots__ = (
        "base",
        "base_bytes",
        "encode",
        "end_bytes",
        "ends",
        "frames",
        "news",
        "prefix",
        "scan_at",
        "scan_at_bytes",
        "waking",
        "watchers",
    )

    def __init__(self, prefix: bytes, encode: Encoder | None, queue: int, queue_bytes: int) -> None:
        self.prefix = prefix
        self.encode = encode
        #: Encoded events (``bytes``), or events (``encode`` None).
        self.frames: list[object] = []
        #: Each event's end, in bytes since the channel began: a watcher
        #: finds where a piece ends by bisection, not by a loop over events.
        self.ends = array("q")
        self.base = 0
        self.base_bytes = 0
        self.end_bytes = 0
        self.watchers: set[Subscription] = set()
        #: Set when events were added (:data:`GATHER` s after the first); a
        #: fresh one then for the next.
        self.news = asyncio.Event()
        self.waking: asyncio.TimerHandle | None = None
        self.scan_at = min(_TRIM_EVENTS, queue + 1)
        self.scan_at_bytes = min(_TRIM_BYTES, queue_bytes + 1)

    @property
    def end(self) -> int:
        return self.base + len(self.frames)

    def add(self, frames: list[object], ends: list[int]) -> None:
        """Add events (``ends``: each one's, as :attr:`ends` counts)."""
        self.frames += frames
        self.ends.extend(ends)
        self.end_bytes = ends[-1]
        if self.waking is None:
            self.waking = asyncio.get_running_loop().call_later(GATHER, self.wake)

    def wake(self) -> None:
        """Wake the watchers waiting for events (a waiter of a set event
        would not wait again: the next wait is on a fresh one)."""
        if self.waking is not None:
            self.waking.cancel()
            self.waking = None
        self.news.set()
        self.news = asyncio.Event()

    def bound(self, queue: int, queue_bytes: int) -> None:
        """Cut off the watchers more than ``queue`` events or ``queue_bytes``
        behind, and drop what every watcher has sent. It looks at the
        watchers only every :data:`_TRIM_EVENTS` events or :data:`_TRIM_BYTES`
        bytes, or when the slowest one could first be past a bound: a
        thousand stalled watchers cost a write almost nothing."""
        end, end_bytes = self.end, self.end_bytes
        if end < self.scan_at and end_bytes < self.scan_at_bytes:
            return
        low, low_bytes = end, end_bytes
        for watcher in list(self.watchers):  # a cut-off leaves the set
            if end - watcher.position > queue or end_bytes - watcher.position_bytes > queue_bytes:
                watcher.cut_off(
                    f"this watch fell more than {queue} events or {queue_bytes} bytes behind"
                )
            elif watcher.position < low:
                low, low_bytes = watcher.position, watcher.position_bytes
        del self.frames[: low - self.base]
        del self.ends[: low - self.base]
        self.base, self.base_bytes = low, low_bytes
        self.scan_at = min(end + _TRIM_EVENTS, low + queue + 1)
        self.scan_at_bytes = min(end_bytes + _TRIM_BYTES, low_bytes + queue_bytes + 1)


class Subscription:
    """One watcher: a position in its channel's events."""

    def __init__(self, hub: WatchHub, channel: _Channel, start: str) -> None:
        #: The id of the last event before the watch began: where it starts.
        self.start = start
        self._hub = hub
        self._channel = channel
        self.position = channel.end
        self.position_bytes = channel.end_bytes
        self.overflowed = False
        #: Why it was cut off (``overflowed``): the ``overflow`` event's message.
        self.reason = ""
        self.closed = False
        #: The deadline of the stream's write in progress: moved to now to
        #: end a write that a client who reads nothing holds up.
        self.cutoff: asyncio.Timeout | None = None

    @property
    def prefix(self) -> bytes:
        return self._channel.prefix

    @property
    def behind(self) -> tuple[int, int]:
        """How many events, and encoded bytes, it has yet to send."""
        channel = self._channel
        return channel.end - self.position, channel.end_bytes - self.position_bytes

    def pending(self, most: int = PIECE) -> list[bytes]:
        """The next encoded events to send, about ``most`` bytes of them (at
        least one, if any): they count as sent."""
        if self.closed:
            return []
        return self._next(most)

    def leftover(self, most: int = PIECE) -> list[bytes]:
        """What a watch the node's stop ended had not sent yet, about ``most``
        bytes of it: its stream ends with them, so events made just before a
        stop (gathered for :data:`GATHER` s) still reach the client. Past
        them it resumes with ``Last-Event-ID``, as after any end."""
        if not self.closed or self.overflowed:
            return []
        return self._next(most)

    def _next(self, most: int) -> list[bytes]:
        channel = self._channel
        at = self.position - channel.base
        if at >= len(channel.frames):
            return []
        # The first event that ends at or past ``most`` bytes from here is the last.
        stop = bisect.bisect_left(channel.ends, self.position_bytes + most, at)
        stop = min(stop + 1, len(channel.frames))
        self.position = channel.base + stop
        self.position_bytes = channel.ends[stop - 1]
        return cast(list[bytes], channel.frames[at:stop])

    async def next_batch(self, timeout: float) -> list[HubEvent]:
        """For a watcher in the node's process (subscribed without an
        encoder): the events to see, waiting up to ``timeout`` s for one
        (none: the wait ran out, or the watch ended: see :attr:`closed`)."""
        await self.wait(timeout)
        if self.closed:
            return []
        channel = self._channel
        events = cast(list[HubEvent], channel.frames[self.position - channel.base :])
        self.position = channel.end
        self.position_bytes = channel.end_bytes
        return events

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for events to send; ``False`` if none came
        (the watch may have ended meanwhile: see :attr:`closed`)."""
        channel = self._channel
        if self.closed or self.position < channel.end:
            return True
        try:
            async with asyncio.timeout(timeout):
                await channel.news.wait()
        except TimeoutError:
            return False
        return True

    def cut_off(self, reason: str) -> None:
        """End the watch with ``overflow``: it fell behind, or its client
        reads nothing."""
        if self.closed:
            return
        self.overflowed = True
        self.reason = reason
        self._end()

    def close(self) -> None:
        """End the watch (the node is stopping): its stream ends at once."""
        self._end()

    def _end(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.cutoff is not None and not self.cutoff.expired():  # it may be what ends it
            self.cutoff.reschedule(asyncio.get_running_loop().time())
        self._channel.wake()  # it may wait (the others look, and wait again)
        self._hub.unsubscribe(self)


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
        queue_bytes: int = QUEUE_BYTES,
        stall: float = STALL,
        heartbeat: float = HEARTBEAT,
        buffer_bytes: int = BUFFER_BYTES,
    ) -> None:
        if min(buffer, queue, queue_bytes, buffer_bytes) < 1 or not min(heartbeat, stall) > 0:
            raise ValueError(
                "a watch hub needs buffer, queue, queue_bytes >= 1 and heartbeat, stall > 0"
            )
        self._forum = forum
        self.boot = secrets.token_hex(6)
        self.queue = queue
        self.queue_bytes = queue_bytes
        self.stall = stall
        self.heartbeat = heartbeat
        self._ring: deque[_Batch] = deque()
        self._buffer = buffer
        self._buffer_bytes = buffer_bytes
        self._ring_events = 0
        self._ring_bytes = 0
        self._channels: dict[tuple[bytes, Encoder | None], _Channel] = {}
        self._n = 0
        self._listening = False
        self.closed = False

    async def __aenter__(self) -> WatchHub:
        self._forum.add_take_listener(self.on_entries)
        self._forum.add_expiry_listener(self.on_expired)
        self._listening = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening and end every watch. Idempotent."""
        self.closed = True
        for channel in list(self._channels.values()):
            for subscription in list(channel.watchers):
                subscription.close()
        if self._listening:
            self._listening = False
            self._forum.remove_take_listener(self.on_entries)
            self._forum.remove_expiry_listener(self.on_expired)

    @property
    def watchers(self) -> int:
        return sum(len(channel.watchers) for channel in self._channels.values())

    @property
    def held(self) -> tuple[int, int]:
        """The encoded events the channels hold for their watchers, and their bytes."""
        channels = self._channels.values()
        held = sum(c.end_bytes - c.base_bytes for c in channels)
        return sum(len(c.frames) for c in channels), held

    # -- ids ---------------------------------------------------------------------

    def event_id(self, n: int) -> str:
        return f"{self.boot}-{n}"

    @property
    def last_id(self) -> str:
        """The id of the last event so far (``<boot>-0`` before the first)."""
        return self.event_id(self._n)

    # -- the Forum's listeners: append and wake, never wait ----------------------

    def on_entries(self, entries: Sequence[Entry], taken: Sequence[Tuple]) -> None:
        # The write path runs through here for every entry: a list append
        # each; the ring takes the batch as one item, and events are made
        # and encoded only when someone watches.
        size = 0
        matches: list[object] = []
        payloads = {item.id: item for item in taken} if taken else None
        for entry in entries:
            if isinstance(entry, Write):
                if entry.props.pause:
                    matches.append(_HIDDEN)
                else:
                    size += len(entry.payload)
                    matches.append(entry.payload)
                continue
            found = payloads.get(entry.target) if payloads else None
            if found is not None and found.props.pause:
                matches.append(_HIDDEN)
            elif found is not None:
                size += len(found.payload)  # kept for the ring's watchers to match
                matches.append(found.payload)
            else:
                matches.append(None)
        self._publish(_Batch(self._n + 1, list(entries), matches, size))

    def on_expired(self, tuples: Sequence[Tuple]) -> None:
        size = sum(len(item.payload) for item in tuples)
        self._publish(_Batch(self._n + 1, list(tuples), [t.payload for t in tuples], size))

    def _publish(self, batch: _Batch) -> None:
        """Add ``batch`` to the ring (the newest batch stays, whatever its
        size) and its events, encoded, to the channels."""
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
        if self._channels:
            self._fan_out(batch.events())

    def _fan_out(self, events: list[HubEvent]) -> None:
        encoded: dict[Encoder | None, list[bytes | None]] = {}
        for channel in list(self._channels.values()):  # a cut-off may drop a channel
            taken: list[object] = []
            ends: list[int] = []
            size = channel.end_bytes
            if channel.encode is None:
                for event in events:
                    if not channel.prefix or wants(channel.prefix, event):
                        taken.append(event)
                        size += len(event.match or b"")
                        ends.append(size)
            else:
                frames = encoded.get(channel.encode)
                if frames is None:
                    frames = encoded[channel.encode] = [None] * len(events)
                for i, event in enumerate(events):
                    if channel.prefix and not wants(channel.prefix, event):
                        continue
                    frame = frames[i]
                    if frame is None:  # the first channel of this format to want it
                        frame = frames[i] = channel.encode(self.event_id(event.n), event)
                    taken.append(frame)
                    size += len(frame)
                    ends.append(size)
            if taken:
                channel.add(taken, ends)
                channel.bound(self.queue, self.queue_bytes)

    # -- watchers ----------------------------------------------------------------

    def subscribe(
        self, prefix: bytes, last_event_id: str | None = None, *, encode: Encoder | None = None
    ) -> tuple[Subscription, Missed | None, list[HubEvent]]:
        """A new watcher of ``prefix`` whose events are encoded by ``encode``
        (:meth:`Subscription.pending`; ``None``: a watcher in this process,
        :meth:`Subscription.next_batch`); if it resumes after
        ``last_event_id``, what it missed: the events still in the ring, or
        why it cannot have them. ``ValueError`` if ``last_event_id`` is not an
        event id.

        No event is lost or repeated between the replay and the channel:
        both are made here, with no wait in between."""
        missed, replay = self._resume(last_event_id)  # before a wait: nothing in between
        channel = self._channels.get((prefix, encode))
        if channel is None:
            channel = _Channel(prefix, encode, self.queue, self.queue_bytes)
            self._channels[prefix, encode] = channel
        subscription = Subscription(self, channel, self.last_id)
        channel.watchers.add(subscription)
        return subscription, missed, [e for e in replay if wants(prefix, e)]

    def unsubscribe(self, subscription: Subscription) -> None:
        channel = subscription._channel
        channel.watchers.discard(subscription)
        key = (channel.prefix, channel.encode)
        if not channel.watchers and self._channels.get(key) is channel:
            del self._channels[key]  # nobody left to send them to
            channel.wake()  # and no timer left behind

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
