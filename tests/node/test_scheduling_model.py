"""Stateful property test: priorities, delays and expiry mixed with takes and
restarts, the Forum against a plain-Python model, on a clock the test moves.

The model: every tuple written, with its priority, due and expiry times; a
tuple is visible iff it is due, not expired and not taken; a take serves the
highest priority, then the one live the longest (due tuples go live in due
order; after a restart, the live ones are in log order).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from forum.node.core.entries import EntryId
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig

PAYLOADS = st.sampled_from([b"a", b"ab", b"abc", b"b", b"ba"])
PREFIXES = st.sampled_from([b"", b"a", b"ab", b"b", b"c"])
PRIORITIES = st.sampled_from([0, 0, 1, 5, -2])
DELAYS = st.sampled_from([None, None, 1.0, 2.5, 4.0])
TTLS = st.sampled_from([None, None, 1.0, 3.0])
START = 1_800_000_000.0  # the test's clock starts here (Unix seconds)


@dataclass
class Written:
    entry_id: EntryId
    payload: bytes
    priority: int
    due: int  # ms; 0: at once
    expires: int  # ms; 0: never
    written: int  # write order
    live_order: int | None = None  # set when it goes live
    taken: bool = False


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


class ScheduledForumModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp())
        self.cfg = StrandConfig().with_storage(self.dir).with_fsync("never").with_node_name("m")
        self.clock = Clock()
        self.forum = self._open()
        self.tuples: list[Written] = []
        self.order = 0

    def _open(self) -> Forum:
        strand = self.loop.run_until_complete(Strand.open(self.cfg))
        return Forum(strand, remote_delay=0, clock=self.clock)

    def _run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self._run(self.forum.close())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model -------------------------------------------------------------

    def _now(self) -> int:
        return int(self.clock.now * 1000)

    def _visible(self, t: Written) -> bool:
        now = self._now()
        return not t.taken and t.due <= now and not (t.expires and t.expires <= now)

    def _go_live(self, candidates: list[Written]) -> None:
        for t in candidates:
            self.order += 1
            t.live_order = self.order

    def _expected(self, prefix: bytes) -> Written | None:
        matches = [t for t in self.tuples if self._visible(t) and t.payload.startswith(prefix)]
        if not matches:
            return None
        assert all(t.live_order is not None for t in matches)
        return min(matches, key=lambda t: (-t.priority, t.live_order))

    # -- rules ---------------------------------------------------------------------

    @rule(payload=PAYLOADS, priority=PRIORITIES, delay=DELAYS, ttl=TTLS)
    def write(self, payload: bytes, priority: int, delay: float | None, ttl: float | None) -> None:
        entry_id = self._run(self.forum.write(payload, priority=priority, delay=delay, ttl=ttl))
        now = self._now()
        due = now + int(delay * 1000) if delay else 0
        expires = (due or now) + int(ttl * 1000) if ttl else 0
        t = Written(entry_id, payload, priority, due, expires, len(self.tuples))
        self.tuples.append(t)
        if not due:
            self._go_live([t])

    @rule(prefix=PREFIXES)
    def take(self, prefix: bytes) -> None:
        expected = self._expected(prefix)
        got = self._run(self.forum.take_entry(Pattern(prefix)))
        if expected is None:
            assert got is None
            return
        assert got is not None and got.id == expected.entry_id, (got, expected)
        assert got.props.priority == expected.priority
        expected.taken = True

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 3.0]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        now = self._now()
        due = [t for t in self.tuples if t.live_order is None and t.due and t.due <= now]
        self._go_live(sorted(due, key=lambda t: (t.due, t.written)))
        self.forum._schedule.run_due()  # what its timers do when the time comes

    @rule()
    def restart(self) -> None:
        self._run(self.forum.close())
        self.forum = self._open()
        # Replay makes the live ones live again in log order (write order here).
        live = [t for t in self.tuples if t.live_order is not None]
        self._go_live(sorted(live, key=lambda t: t.written))

    # -- invariants ------------------------------------------------------------

    @invariant()
    def reads_and_counts_agree(self) -> None:
        for prefix in (b"", b"a", b"b"):
            expected = self._expected(prefix)
            got = self._run(self.forum.read_entry(Pattern(prefix)))
            assert (got and got.id) == (expected and expected.entry_id), prefix
            visible = [t for t in self.tuples if self._visible(t) and t.payload.startswith(prefix)]
            assert self._run(self.forum.count(Pattern(prefix))) == len(visible)
        delayed = [t for t in self.tuples if not t.taken and t.due > self._now()]
        assert self.forum.stats().delayed == len(delayed)


ScheduledForumModel.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
test_scheduled_forum_matches_the_model = ScheduledForumModel.TestCase
