"""Compaction on one node: the Strand shrinks to its survivors, replay gives
the same backlog, and nothing dropped is ever taken in again."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forum.node.core.entries import EntryId, Take, Write
from forum.node.core.space import Pattern
from forum.node.space.compactor import CompactionPolicy, Compactor
from forum.node.space.forum import Forum
from forum.node.storage import compaction as compaction_files
from forum.node.storage import segment
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import eventually

ALL = Pattern(b"")
ROOT = Path(__file__).resolve().parents[2]


async def _open(cfg: StrandConfig) -> Forum:
    return Forum(await Strand.open(cfg), remote_delay=0)


async def _churn(forum: Forum, jobs: int, keep_every: int) -> list[bytes]:
    """Write ``jobs`` tuples and take all but every ``keep_every``-th; the kept
    ones, in write order."""
    payloads = [b"job/%06d" % i + b"x" * 200 for i in range(jobs)]
    for start in range(0, jobs, 100):
        await forum.write_many(payloads[start : start + 100])
    kept = [p for i, p in enumerate(payloads) if i % keep_every == 0]
    for i, payload in enumerate(payloads):
        if i % keep_every:
            assert await forum.take(Pattern(payload)) == payload
    return kept


def _backlog(forum: Forum) -> list[bytes]:
    return [t.payload for t in forum.list(ALL, limit=100_000).tuples]


async def test_a_churned_log_shrinks_to_its_backlog_and_replays_the_same(
    cfg: StrandConfig,
) -> None:
    cfg = cfg.with_segment_bytes(64 * 1024)
    forum = await _open(cfg)
    kept = await _churn(forum, 3000, keep_every=50)
    before = forum.strand.stats()
    report = await forum.compact(seal=True)
    after = forum.strand.stats()
    # Sealing the current segment first adds the next one's header.
    assert report.bytes_before == before.bytes + segment.HEADER.size
    assert report.bytes_after == after.bytes
    # 60 of 3000 Writes survive, with no Take: a few percent of the log.
    assert after.bytes < before.bytes * 0.05
    assert report.entries_dropped == 2 * (3000 - 60) and after.entries == 60
    assert report.segments_removed > 0 and after.segments < before.segments
    assert _backlog(forum) == kept
    await forum.close()

    forum = await _open(cfg)
    assert _backlog(forum) == kept  # the same backlog, in the same order
    assert forum.strand.stats().entries == 60
    # The origin's seqs go on above everything ever written: no id reused.
    assert (await forum.write(b"after")).seq == 3000 + 2940 + 1
    await forum.close()


async def test_a_dropped_entry_is_never_taken_in_again(cfg: StrandConfig) -> None:
    """A peer (or an old backup) that sends back a Write and its Take that
    were compacted away: both are held already (dead), so nothing comes back
    to life, now or after a restart."""
    forum = await _open(cfg.with_segment_bytes(8192))
    ids = await forum.write_many([b"j/%d" % i for i in range(50)])
    takes = [t for t in await forum.strand.read_range(forum.strand.origin, 50, 100)]
    assert takes == []  # nothing taken yet
    for i in range(50):
        assert await forum.take(Pattern(b"j/%d" % i)) is not None
    takes = await forum.strand.read_range(forum.strand.origin, 50, 100)
    await forum.compact(seal=True)
    assert forum.strand.stats().entries == 0
    again = [Write(ids[7], b"j/7"), *takes[:3]]
    assert await forum.apply(again) == []
    assert await forum.count(ALL) == 0
    await forum.close()
    forum = await _open(cfg.with_segment_bytes(8192))
    assert await forum.apply(again) == [] and await forum.count(ALL) == 0
    await forum.close()


async def test_only_what_is_stable_and_dead_is_dropped(cfg: StrandConfig) -> None:
    """With a horizon below the node's own vector (a peer lags), a Write or a
    Take above it stays; a live Write stays whatever the horizon."""
    forum = await _open(cfg.with_segment_bytes(8192))
    origin = forum.strand.origin
    await forum.write_many([b"a/%d" % i for i in range(20)])  # seqs 1-20
    for i in range(10):
        await forum.take(Pattern(b"a/%d" % i))  # Takes 21-30 kill Writes 1-10
    # Every member holds seqs up to 25: Takes 26-30 are not stable yet, so
    # their Writes (6-10) stay, and so do they.
    report = await forum.compact({origin: 25}, seal=True)
    assert report.entries_dropped == 10  # Writes 1-5 and Takes 21-25
    held = sorted(e.id.seq for e in await forum.strand.read_range(origin, 0, 100))
    assert held == [*range(6, 21), *range(26, 31)]
    page = await forum.strand.read_page(origin, 0, 100)
    assert page.dead == [(1, 5), (21, 25)] and page.upto == 30
    assert [e.id.seq for e in page.entries] == held
    await forum.compact(seal=True)  # now all of it is stable: only the live remain
    page = await forum.strand.read_page(origin, 0, 100)
    assert [e.id.seq for e in page.entries] == list(range(11, 21))
    assert page.dead == [(1, 10), (21, 30)]
    assert all(isinstance(e, Write) for e in page.entries)
    await forum.close()


async def test_a_take_is_never_dropped_before_its_write(cfg: StrandConfig) -> None:
    """A Take that reached this node before its Write (from two peers) lies in
    an earlier segment: it stays until its Write is gone from disk, so a crash
    between two rewrites can never leave the Write without its Take."""
    forum = await _open(cfg.with_segment_bytes(8192))
    write, take = Write(EntryId("p", 1), b"w"), Take(EntryId("q", 1), EntryId("p", 1))
    assert await forum.apply([take]) == [take]
    await forum.strand.compact({}, _nothing_live, seal=True)  # seal the Take's segment
    assert await forum.apply([write]) == [write]  # killed on arrival
    report = await forum.compact({"p": 1, "q": 1}, seal=True)
    # One pass: the Write's (later) segment; the Take's came before it.
    assert report.entries_dropped == 1
    assert [e.id for e in await forum.strand.read_range("q", 0, 10)] == [take.id]
    report = await forum.compact({"p": 1, "q": 1})
    assert report.entries_dropped == 1 and forum.strand.stats().entries == 0
    await forum.close()


async def test_entries_held_out_of_seq_order_are_dropped_and_moved_as_any(
    cfg: StrandConfig,
) -> None:
    """A peer's entries may arrive out of seq order (anti-entropy fills a
    gap late): the pass looks its ids up in seqs sorted per origin, so
    those are dropped as any, and the survivors among them found where the
    rewrite put them."""
    forum = await _open(cfg.with_segment_bytes(8192))
    order = [7, 3, 9, 1, 5, 2, 8, 4, 10, 6]
    writes = [Write(EntryId("p", seq), b"job/%02d" % seq) for seq in order]
    assert await forum.apply(writes) == writes
    targets = [seq for seq in order if seq % 3]
    takes = [Take(EntryId("q", i + 1), EntryId("p", seq)) for i, seq in enumerate(targets)]
    assert await forum.apply(list(reversed(takes))) == list(reversed(takes))
    report = await forum.compact({"p": 10, "q": len(takes)}, seal=True)
    assert report.entries_dropped == 2 * len(takes)
    kept = await forum.strand.read_range("p", 0, 100)
    assert [(e.id.seq, e.payload) for e in kept if isinstance(e, Write)] == [
        (3, b"job/03"),
        (6, b"job/06"),
        (9, b"job/09"),
    ]
    assert sorted(_backlog(forum)) == [b"job/03", b"job/06", b"job/09"]
    await forum.close()


async def _nothing_live() -> set[tuple[str, int]]:
    return set()


async def test_bytes_reclaimed_counts_what_the_rewrites_gave_back_not_appends_meanwhile(
    cfg: StrandConfig,
) -> None:
    """The Overview once showed a node's "bytes reclaimed" below zero. A pass
    counted the Strand's size before minus its size after, and appends go on
    during a pass::

        t0  the pass notes the Strand's bytes and surveys the sealed segments
        t1  writes append 6 KiB to the current segment (here: while the pass
            asks which tuples are live)
        t2  the pass rewrites a segment, giving back a few hundred bytes
        t3  bytes after - bytes before = +6 KiB: "reclaimed" went negative

    What a pass reclaims is what its rewrites gave back, whatever was
    appended meanwhile."""
    forum = await _open(cfg.with_segment_bytes(8192))
    await forum.write_many([b"r/%d" % i + b"x" * 40 for i in range(10)])
    for i in range(5):
        await forum.take(Pattern(b"r/%d" % i))
    await forum.strand.compact({}, _nothing_live, seal=True)  # seal them: the pass below rewrites

    async def live_while_writing() -> set[tuple[str, int]]:
        await forum.write_many([b"w/" + b"y" * 600 for _ in range(10)])
        return await forum._live_keys()

    sealed = forum.strand.stats().bytes - forum.strand.current_segment_bytes
    report = await forum.strand.compact(forum.strand.vector(), live_while_writing)
    after = forum.strand.stats()
    assert report.entries_dropped == 10 and report.segments_rewritten == 1
    assert report.bytes_after > report.bytes_before  # the Strand grew over the pass
    given_back = sealed - (after.bytes - forum.strand.current_segment_bytes)
    assert 0 < given_back == after.bytes_reclaimed
    await forum.close()


async def test_a_reserved_or_live_tuple_survives(cfg: StrandConfig) -> None:
    forum = await _open(cfg.with_segment_bytes(8192))
    await forum.write_many([b"r/1", b"r/2", b"r/3"])
    reserved = await forum.reserve(Pattern(b"r/1"), lease=30)
    assert reserved is not None
    await forum.take(Pattern(b"r/3"))
    report = await forum.compact(seal=True)
    assert report.entries_dropped == 2  # r/3 and its Take
    assert await forum.ack(reserved.id)
    assert [t.payload for t in forum.list(ALL).tuples] == [b"r/2"]
    await forum.close()
    forum = await _open(cfg.with_segment_bytes(8192))
    assert [t.payload for t in forum.list(ALL).tuples] == [b"r/2"]
    await forum.close()


async def test_what_a_crash_mid_compaction_leaves_is_cleaned_up(cfg: StrandConfig) -> None:
    """A half-written segment copy or HORIZON copy (a crash before its rename)
    is removed on open, and the live set is the one before the pass."""
    cfg = cfg.with_segment_bytes(8192)
    forum = await _open(cfg)
    kept = await _churn(forum, 200, keep_every=10)
    await forum.close()
    first = segment.segment_numbers(cfg.storage)[0]
    leftover = segment.segment_path(cfg.storage, first)
    (leftover.parent / (leftover.name + compaction_files.TMP_SUFFIX)).write_bytes(b"half")
    (cfg.storage / (compaction_files.HORIZON_FILE + compaction_files.TMP_SUFFIX)).write_bytes(b"x")
    forum = await _open(cfg)
    assert _backlog(forum) == kept
    assert not [n for n in os.listdir(cfg.storage) if n.endswith(compaction_files.TMP_SUFFIX)]
    await forum.close()


async def test_a_damaged_horizon_file_stops_the_open(cfg: StrandConfig) -> None:
    forum = await _open(cfg.with_segment_bytes(8192))
    await _churn(forum, 100, keep_every=10)
    await forum.compact(seal=True)
    await forum.close()
    path = cfg.storage / compaction_files.HORIZON_FILE
    path.write_bytes(path.read_bytes()[:-1] + b"\0")
    with pytest.raises(Exception, match="HORIZON"):
        await Strand.open(cfg.with_segment_bytes(8192))


async def test_a_range_a_peer_dropped_kills_the_live_copy_here_for_good(
    cfg: StrandConfig,
) -> None:
    """This node was cut off while the others took and compacted p:1..3 and
    q:1; it still holds p:1 and p:2 live. The range a peer reports dead kills
    them (with Takes of its own, durable), and p:3 (never seen here) can
    never be taken in later, nor after a restart."""
    forum = await _open(cfg)
    await forum.apply([Write(EntryId("p", 1), b"a"), Write(EntryId("p", 2), b"b")])
    assert await forum.count(ALL) == 2
    assert await forum.apply_dead("p", [(1, 3)]) == 2
    assert await forum.count(ALL) == 0 and forum.strand.vector()["p"] == 3
    assert await forum.apply([Write(EntryId("p", 3), b"c")]) == []
    await forum.close()
    forum = await _open(cfg)
    assert await forum.count(ALL) == 0 and forum.strand.vector()["p"] == 3
    assert await forum.apply([Write(EntryId("p", 3), b"c"), Write(EntryId("p", 2), b"b")]) == []
    assert await forum.count(ALL) == 0
    # A Take of something dropped waits for nothing: no pending kill is kept.
    assert await forum.apply([Take(EntryId("q", 1), EntryId("p", 3))])
    assert not forum._pending_kills
    await forum.close()


def _churn_and_kill(directory: Path, seed: int, rng: random.Random) -> list[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.node.compact_churner", str(directory), str(seed)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    first = child.stdout.readline()
    assert first, "the churner died before writing"
    time.sleep(rng.uniform(0.05, 0.4))
    os.kill(child.pid, signal.SIGKILL)
    # Not communicate(): it would miss what readline() already buffered.
    with child.stdout:
        rest = child.stdout.read()
    child.wait(timeout=20)
    # A line cut short by the kill was never acknowledged to anyone.
    return [line for line in [first, *rest.splitlines(keepends=True)] if line.endswith("\n")]


@pytest.mark.slow
async def test_sigkill_at_any_point_of_compaction_loses_nothing_and_revives_nothing(
    tmp_path: Path,
) -> None:
    """A node that writes, takes and compacts all the while is SIGKILLed at
    random moments, 15 times: after each restart every acknowledged write not
    taken is live, no acknowledged take came back, and nothing appears that
    was never written."""
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    rng = random.Random(seed)
    directory = tmp_path / "strand"
    written: set[str] = set()  # acknowledged
    tried: set[str] = set()  # writes begun
    taken: set[str] = set()  # takes acknowledged
    touched: set[str] = set()  # takes begun
    compacted = 0
    for run in range(15):
        for line in _churn_and_kill(directory, seed + run, rng):
            kind, payload = line.split()
            {"w": tried, "W": written, "t": touched, "T": taken}[kind].add(payload)
        config = StrandConfig().with_storage(directory).with_segment_bytes(8192)
        async with Forum(await Strand.open(config)) as forum:
            live = {t.payload.decode() for t in forum.list(ALL, limit=10**6).tuples}
            compacted = max(compacted, forum.strand.stats().entries)
        assert (written - touched) <= live, "an acknowledged write was lost"
        assert not (taken & live), "an acknowledged take came back to life"
        assert live <= tried, "a tuple appeared that was never written"
    # The log stayed the size of the backlog, not of the history.
    assert compacted < len(tried)


async def test_the_background_compactor_runs_past_the_dead_share_and_not_twice_for_one_horizon(
    cfg: StrandConfig,
) -> None:

    forum = await _open(cfg.with_segment_bytes(8192))
    horizon = {forum.strand.origin: 0}
    async with Compactor(forum, CompactionPolicy(0.02, 0.5), lambda: horizon) as compactor:
        compactor.start()
        await _churn(forum, 400, keep_every=100)  # 396 of 400 taken: 99% dead
        await forum.strand.seal()  # what the churn wrote is in sealed segments now
        await eventually(lambda: forum.stats().compactions >= 1, what="a pass")  # it ran ...
        assert forum.stats().entries_dropped == 0  # ... but nothing is stable yet
        runs = forum.stats().compactions
        await asyncio.sleep(0.2)
        assert forum.stats().compactions == runs  # the same horizon: no pass again
        horizon = forum.strand.vector()  # every member now holds everything
        await eventually(lambda: forum.stats().entries_dropped == 2 * 396, what="a pass")
    assert _backlog(forum) == [b"job/%06d" % i + b"x" * 200 for i in range(0, 400, 100)]
    await forum.close()
