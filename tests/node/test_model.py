"""Stateful property test: the Forum against a plain-Python model.

Random sequences of write / take / read / count / apply-remote / restart must
give the same results as a list of live tuples in arrival order.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from forum.node.core.entries import Entry, EntryId, Take, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig

PAYLOADS = st.sampled_from([b"a", b"ab", b"abc", b"b", b"ba", b""])
PREFIXES = st.sampled_from([b"", b"a", b"ab", b"b", b"abc", b"c"])
REMOTE = ["peer-x", "peer-y"]


class ForumModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp())
        self.cfg = StrandConfig().with_storage(self.dir).with_fsync("never").with_node_name("m")
        self.forum = self._open()
        self.live: list[tuple[EntryId, bytes]] = []  # arrival order
        self.written: set[EntryId] = set()
        self.pending_kills: set[EntryId] = set()
        self.applied: set[EntryId] = set()
        self.remote_seq = dict.fromkeys(REMOTE, 0)

    def _open(self) -> Forum:
        return Forum(self.loop.run_until_complete(Strand.open(self.cfg)), remote_delay=0)

    def _run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self._run(self.forum.close())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _model_oldest(self, prefix: bytes) -> int | None:
        for i, (_, payload) in enumerate(self.live):
            if payload.startswith(prefix):
                return i
        return None

    def _model_apply(self, entry: Entry) -> None:
        if entry.id in self.applied:
            return
        self.applied.add(entry.id)
        if isinstance(entry, Write):
            self.written.add(entry.id)
            if entry.id in self.pending_kills:
                self.pending_kills.discard(entry.id)
            else:
                self.live.append((entry.id, entry.payload))
        else:
            for i, (entry_id, _) in enumerate(self.live):
                if entry_id == entry.target:
                    del self.live[i]
                    return
            if entry.target not in self.written:
                self.pending_kills.add(entry.target)

    @rule(payload=PAYLOADS)
    def write(self, payload: bytes) -> None:
        entry_id = self._run(self.forum.write(payload))
        self.written.add(entry_id)
        self.applied.add(entry_id)
        self.live.append((entry_id, payload))

    @rule(prefix=PREFIXES)
    def take(self, prefix: bytes) -> None:
        got = self._run(self.forum.take_entry(Pattern(prefix)))
        i = self._model_oldest(prefix)
        if i is None:
            assert got is None
        else:
            expected = self.live.pop(i)
            assert got is not None and (got.id, got.payload) == expected

    @rule(prefix=PREFIXES)
    def read(self, prefix: bytes) -> None:
        got = self._run(self.forum.read_entry(Pattern(prefix)))
        i = self._model_oldest(prefix)
        assert (None if got is None else (got.id, got.payload)) == (
            None if i is None else self.live[i]
        )

    @rule(origin=st.sampled_from(REMOTE), payload=PAYLOADS, ahead=st.integers(0, 2))
    def apply_remote_write(self, origin: str, payload: bytes, ahead: int) -> None:
        # ``ahead`` > 0 leaves a gap, filled (or not) by later rules.
        self.remote_seq[origin] += 1 + ahead
        entry = Write(EntryId(origin, self.remote_seq[origin]), payload)
        self._run(self.forum.apply([entry, entry]))
        self._model_apply(entry)

    @rule(taker=st.sampled_from(REMOTE), data=st.data())
    def apply_remote_take(self, taker: str, data: st.DataObject) -> None:
        candidates = sorted(self.written) + [
            EntryId(o, self.remote_seq[o] + 1)
            for o in REMOTE  # a Take before its Write
        ]
        target = data.draw(st.sampled_from(candidates))
        self.remote_seq[taker] += 1
        entry = Take(EntryId(taker, self.remote_seq[taker]), target)
        self._run(self.forum.apply([entry]))
        self._model_apply(entry)

    @rule()
    def restart(self) -> None:
        self._run(self.forum.close())
        self.forum = self._open()

    @invariant()
    def counts_agree(self) -> None:
        for prefix in (b"", b"a", b"ab", b"b"):
            expected = sum(p.startswith(prefix) for _, p in self.live)
            assert self._run(self.forum.count(Pattern(prefix))) == expected


ForumModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestForumModel = ForumModel.TestCase
