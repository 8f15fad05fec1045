"""Writes and takes per second of each group of tuples, made on this node,
counted only while someone looks at the Prefixes panel.

The node counts writes and takes in all (its status); per group it counts
nothing, so that a write or a take costs nothing more when nobody looks.
While the panel is looked at (a page served in the last :data:`LINGER`
seconds: it refreshes every 2 s), a :class:`GroupRates` watches the node's
own watch hub (forum.node.space.watch, in process: what ``GET /v1/watch`` streams) and
counts each event made here (its id's origin is this node's) in its group
at each separator looked at, a bucket per second for the last
:data:`WINDOW` seconds. Then the watch ends, and the hub keeps no payload
for it.

What it costs while someone looks: the hub makes an event of each entry
and remembers each written payload until it is taken (up to its ``known``,
100,000), which is how a take, which names only its target's id, finds its
group; this counter groups each event. A take of a tuple written before
the counting began (or forgotten by the hub) is in no group: it is counted
apart (``unplaced``), and the page says how many a second.

A rate is events over the window, or over the time counted when that is
shorter; there is none before :data:`FIRST_FIGURE` seconds of counting (the
page shows "—"). A watch cut off for falling behind (over the hub's queue
of events between two looks at it) starts the count again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from forum.node.core.entries import Take, Write
from forum.node.core.resource import in_background
from forum.node.space.watch import HubEvent, WatchHub

#: Seconds the rates are over.
WINDOW = 60.0
#: Seconds the counting goes on after the panel was last served.
LINGER = 30.0
#: Seconds of counting before a rate is given.
FIRST_FIGURE = 2.0
#: The most groups counted per second and separator (the page shows 500).
MOST_GROUPS = 1000
#: Seconds a wait for events lasts before the counter looks whether anyone
#: still looks at the panel.
_POLL = 1.0


@dataclass(frozen=True, slots=True)
class Rate:
    """Per second, over the last minute (or the time counted, if shorter)."""

    writes: float
    takes: float


@dataclass(slots=True)
class _Tally:
    """One separator's counts: per second, per group, [writes, takes]."""

    since: float
    looked: float
    seconds: deque[tuple[int, dict[bytes, list[int]]]] = field(default_factory=deque)
    #: Per second, takes of tuples whose payload the hub did not know.
    unplaced: deque[tuple[int, int]] = field(default_factory=deque)

    def bucket(self, second: int) -> dict[bytes, list[int]]:
        if not self.seconds or self.seconds[-1][0] != second:
            self.seconds.append((second, {}))
            while self.seconds[0][0] <= second - WINDOW:
                self.seconds.popleft()
        return self.seconds[-1][1]


class GroupRates:
    """The Prefixes panel's throughput column (see the module docstring)."""

    def __init__(self, hub: WatchHub, origin: Callable[[], str]) -> None:
        self._hub = hub
        self._origin = origin
        self._tallies: dict[bytes, _Tally] = {}
        self._wanted = asyncio.Event()

    def looked(self, separator: bytes) -> None:
        """The panel was served grouped at ``separator``: count (on) for it."""
        now = time.monotonic()
        tally = self._tallies.get(separator)
        if tally is None:
            tally = self._tallies[separator] = _Tally(since=now, looked=now)
        tally.looked = now
        self._wanted.set()

    def rates(self, separator: bytes) -> tuple[dict[bytes, Rate], float] | None:
        """Per group at ``separator``, its rates (a group with no event has
        none: 0), and the takes a second found in no group; ``None`` before
        there is a figure."""
        tally = self._tallies.get(separator)
        now = time.monotonic()
        if tally is None or now - tally.since < FIRST_FIGURE:
            return None
        span = min(WINDOW, now - tally.since)
        totals: dict[bytes, list[int]] = {}
        for second, groups in tally.seconds:
            if second > now - WINDOW:
                for group, (writes, takes) in groups.items():
                    total = totals.setdefault(group, [0, 0])
                    total[0] += writes
                    total[1] += takes
        unplaced = sum(n for second, n in tally.unplaced if second > now - WINDOW)
        found = {
            group: Rate(writes / span, takes / span) for group, (writes, takes) in totals.items()
        }
        return found, unplaced / span

    def count(self, events: Sequence[HubEvent], now: float) -> None:
        """Count the writes and takes made here among ``events``, at every
        separator looked at."""
        origin, second = self._origin(), int(now)
        for separator, tally in self._tallies.items():
            groups = tally.bucket(second)
            unplaced = 0
            for event in events:
                item = event.item
                if item.id.origin != origin or not isinstance(item, Write | Take):
                    continue  # a peer's, or an expiry
                if event.match is None:
                    unplaced += 1
                    continue
                cut = event.match.find(separator)
                group = event.match if cut < 0 else event.match[: cut + len(separator)]
                counts = groups.get(group)
                if counts is None:
                    if len(groups) >= MOST_GROUPS:
                        continue
                    counts = groups[group] = [0, 0]
                counts[isinstance(item, Take)] += 1
            if unplaced:
                if tally.unplaced and tally.unplaced[-1][0] == second:
                    unplaced += tally.unplaced.pop()[1]
                tally.unplaced.append((second, unplaced))
                while tally.unplaced[0][0] <= second - WINDOW:
                    tally.unplaced.popleft()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Count in the background while the block runs (only while the
        panel is looked at); the task ends with the block."""
        async with in_background(self._loop(), "dashboard group rates"):
            yield

    def _forget_unlooked(self, now: float) -> bool:
        """Drop the separators nobody looked at for :data:`LINGER` s;
        whether any is left."""
        for separator in [s for s, t in self._tallies.items() if now - t.looked > LINGER]:
            del self._tallies[separator]
        return bool(self._tallies)

    async def _loop(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            subscription, _, _ = self._hub.subscribe(b"")
            try:
                while self._forget_unlooked(time.monotonic()) and not subscription.closed:
                    events = await subscription.next_batch(_POLL)
                    self.count(events, time.monotonic())
            finally:
                self._hub.unsubscribe(subscription)
            if subscription.overflowed:
                # Fell behind: what it missed is not counted, so it starts again.
                now = time.monotonic()
                for tally in self._tallies.values():
                    tally.since, tally.seconds, tally.unplaced = now, deque(), deque()
                self._wanted.set()
