"""The watch hub (forum.node.space.watch) on a real Forum: events in order with ids of
this run, resumption from the ring, gaps and resets, the prefix filter (takes
by their target's payload, whoever took it and whenever it was written),
expiries, one encoding of an event shared by every watcher, and the cut-off
of a watcher that falls behind (in events or in bytes) while the writes go on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from forum.node.core.entries import EntryId, Properties, Take, Tuple, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.space.watch import HubEvent, WatchHub, parse_event_id


@pytest.fixture
async def hub(forum: Forum) -> AsyncIterator[WatchHub]:
    async with WatchHub(forum, buffer=8, queue=5) as made:
        yield made


def kinds(events: list[HubEvent]) -> list[tuple[str, bytes | None]]:
    return [(e.kind, e.match) for e in events]


async def test_events_come_in_order_numbered_in_this_run(forum: Forum, hub: WatchHub) -> None:
    watcher, missed, replay = hub.subscribe(b"")
    assert (missed, replay, watcher.start) == (None, [], f"{hub.boot}-0")
    first = await forum.write(b"job-1")
    await forum.write(b"job-2")
    await forum.take(Pattern(b"job-"))
    events = await watcher.next_batch(1)
    assert kinds(events) == [("write", b"job-1"), ("write", b"job-2"), ("take", b"job-1")]
    assert [e.n for e in events] == [1, 2, 3]
    assert hub.last_id == f"{hub.boot}-3"
    assert parse_event_id(hub.last_id) == (hub.boot, 3)
    take = events[2].item
    assert getattr(take, "target", None) == first


async def test_a_resumed_watch_gets_what_it_missed_from_the_ring(
    forum: Forum, hub: WatchHub
) -> None:
    await forum.write(b"a")
    seen = hub.last_id
    await forum.write_many([b"b", b"c"])
    _, missed, replay = hub.subscribe(b"", seen)
    assert missed is None
    assert kinds(replay) == [("write", b"b"), ("write", b"c")]
    _, missed, replay = hub.subscribe(b"c", seen)  # the replay is filtered too
    assert kinds(replay) == [("write", b"c")]
    _, missed, replay = hub.subscribe(b"", hub.last_id)
    assert (missed, replay) == (None, [])


async def test_an_id_older_than_the_ring_is_a_gap(forum: Forum, hub: WatchHub) -> None:
    await forum.write(b"first")
    seen = hub.last_id
    for _ in range(9):  # the ring holds 8 (and the newest batch, whatever its size)
        await forum.write(b"x")
    _, missed, replay = hub.subscribe(b"", seen)
    assert missed is not None and missed.kind == "gap"
    assert "1 were missed" in missed.message and replay == []
    await forum.write_many([b"y"] * 20)
    _, missed, replay = hub.subscribe(b"", f"{hub.boot}-10")
    assert missed is None and kinds(replay) == [("write", b"y")] * 20


async def test_an_id_of_another_run_is_a_reset_and_a_bad_one_refused(
    forum: Forum, hub: WatchHub
) -> None:
    await forum.write(b"a")
    async with WatchHub(forum) as restarted:  # the same node after a restart
        _, missed, replay = restarted.subscribe(b"", hub.last_id)
        assert missed is not None and missed.kind == "reset" and replay == []
    _, missed, _ = hub.subscribe(b"", f"{hub.boot}-99")  # not given yet: not ours
    assert missed is not None and missed.kind == "reset"
    for bad in ("", "abc", "abc-", "-3", "abc-x1", "abc-" + "9" * 20):
        with pytest.raises(ValueError, match="not a watch event id"):
            hub.subscribe(b"", bad)


async def test_a_prefix_filters_writes_takes_and_expiries(forum: Forum, hub: WatchHub) -> None:
    jobs, _, _ = hub.subscribe(b"job-")
    every, _, _ = hub.subscribe(b"")
    await forum.write_many([b"job-1", b"mail-1"])
    await forum.take(Pattern(b"mail-"))
    await forum.take(Pattern(b"job-"))
    assert [e.kind for e in await every.next_batch(1)] == ["write", "write", "take", "take"]
    # The expiry listener as the Forum calls it when a ttl runs out.
    hub.on_expired([Tuple(EntryId("gone", 1), b"job-old"), Tuple(EntryId("gone", 2), b"mail")])
    assert kinds(await jobs.next_batch(1)) == [
        ("write", b"job-1"),
        ("take", b"job-1"),
        ("expire", b"job-old"),
    ]
    assert kinds(await every.next_batch(1)) == [("expire", b"job-old"), ("expire", b"mail")]


async def test_a_take_reaches_the_watchers_of_its_prefix_whenever_its_tuple_was_written(
    forum: Forum, hub: WatchHub
) -> None:
    """Failed before: the hub matched a take by the payloads it remembered,
    only of tuples written while someone watched (and at most 100,000):
    the take of an older one reached only watchers of every prefix."""
    await forum.write_many([b"job-early", b"mail-early"])
    reserved = await forum.write(b"job-reserved")
    jobs, _, _ = hub.subscribe(b"job-")
    every, _, _ = hub.subscribe(b"")
    assert await forum.take(Pattern(b"job-")) == b"job-early"
    handed = await forum.reserve(Pattern(b"job-"), lease=30)
    assert handed is not None and handed.id == reserved
    assert await forum.ack(reserved)
    await forum.take_many(Pattern(b"mail-"), 10)
    assert kinds(await jobs.next_batch(1)) == [("take", b"job-early"), ("take", b"job-reserved")]
    assert [e.kind for e in await every.next_batch(1)] == ["take"] * 3


async def test_a_peers_take_before_its_write_reaches_every_watcher(
    forum: Forum, hub: WatchHub
) -> None:
    """A peer's Take that comes before the Write it took (a third node took
    it, and its Take came first): the node does not know what it took, so
    every watcher gets it, a watcher of another prefix too; then the write."""
    jobs, _, _ = hub.subscribe(b"job-")
    mail, _, _ = hub.subscribe(b"mail-")
    written, taken = EntryId("peer", 1), EntryId("third", 1)
    await forum.apply([Take(taken, written)])
    await forum.apply([Write(written, b"job-1")])
    assert kinds(await jobs.next_batch(1)) == [("take", None), ("write", b"job-1")]
    assert kinds(await mail.next_batch(1)) == [("take", None)]


async def test_every_watcher_of_a_format_shares_one_encoding_of_an_event(
    forum: Forum, hub: WatchHub
) -> None:
    encoded: list[int] = []

    def encode(event_id: str, event: HubEvent) -> bytes:
        encoded.append(event.n)
        return f"{event_id} {event.kind}\n".encode()

    watchers = [hub.subscribe(prefix, encode=encode)[0] for prefix in (b"", b"", b"j", b"j")]
    await forum.write_many([b"job-1", b"mail-1"])
    sent = [watcher.pending() for watcher in watchers]
    assert encoded == [1, 2]  # once per event, for four watchers of two prefixes
    assert sent[0] == [f"{hub.boot}-1 write\n".encode(), f"{hub.boot}-2 write\n".encode()]
    assert sent[1] == sent[0] and sent[2] == sent[3] == sent[0][:1]
    assert all(a is b for a, b in zip(sent[0], sent[1], strict=True))
    assert sent[2][0] is sent[0][0]  # the same bytes, not a copy


async def test_a_watcher_that_falls_behind_is_cut_off_and_writes_go_on(
    forum: Forum, hub: WatchHub
) -> None:
    slow, _, _ = hub.subscribe(b"")
    keeping_up, _, _ = hub.subscribe(b"")
    for n in range(4):
        await forum.write_many([b"job-%d" % n] * 2)
        if n < 3:
            assert len(await keeping_up.next_batch(1)) == 2
    # slow read nothing: 8 events > its queue of 5. The writes all went on.
    assert slow.overflowed and slow.closed
    assert await slow.next_batch(1) == []
    assert not keeping_up.overflowed and hub.watchers == 1
    assert await forum.count(Pattern(b"job-")) == 8


async def test_closing_the_hub_ends_every_watch(forum: Forum, hub: WatchHub) -> None:
    watcher, _, _ = hub.subscribe(b"")
    hub.close()
    assert watcher.closed and not watcher.overflowed and hub.watchers == 0
    assert await watcher.next_batch(10) == []
    await forum.write(b"after")  # the hub no longer listens
    assert hub.last_id == f"{hub.boot}-0"


async def test_the_ring_holds_at_most_buffer_bytes_of_payloads(forum: Forum) -> None:
    async with WatchHub(forum, buffer=100, buffer_bytes=100) as hub:
        start = hub.last_id
        await forum.write(b"j" * 60)
        await forum.write(b"k" * 60)  # 120 bytes: the first goes
        _, missed, _ = hub.subscribe(b"", start)
        assert missed is not None and missed.kind == "gap"
        _, missed, replay = hub.subscribe(b"", f"{hub.boot}-1")
        assert missed is None and kinds(replay) == [("write", b"k" * 60)]


async def test_pause_markers_and_their_takes_are_no_events(forum: Forum, hub: WatchHub) -> None:
    every, _, _ = hub.subscribe(b"")
    await forum.pause(b"job-")
    await forum.resume(b"job-")
    marker = EntryId("peer", 1)  # a peer's pause, and its resume
    await forum.apply([Write(marker, b"mail-", Properties(pause=True))])
    await forum.apply([Take(EntryId("peer", 2), marker)])
    await forum.write(b"job-1")
    events = await every.next_batch(1)
    assert [(e.n, e.kind) for e in events] == [(5, "write")]  # ids may skip a number


async def test_a_watcher_more_bytes_behind_than_its_bound_is_cut_off(forum: Forum) -> None:
    def encode(event_id: str, event: HubEvent) -> bytes:
        return b"x" * 1000

    async with WatchHub(forum, queue=1000, queue_bytes=10_000) as hub:
        slow, _, _ = hub.subscribe(b"", encode=encode)
        keeping_up, _, _ = hub.subscribe(b"", encode=encode)
        for n in range(12):
            await forum.write(b"job-%d" % n)
            assert len(keeping_up.pending()) == 1
        assert slow.overflowed and slow.closed and "10000 bytes behind" in slow.reason
        assert slow.pending() == [] and not keeping_up.overflowed and hub.watchers == 1


async def test_what_every_watcher_sent_is_let_go(forum: Forum) -> None:
    """A channel holds an event until its slowest watcher has sent it: a
    watcher is a position, not a queue of its own."""

    def encode(event_id: str, event: HubEvent) -> bytes:
        return b"e" * 100

    async with WatchHub(forum) as hub:
        first, _, _ = hub.subscribe(b"", encode=encode)
        second, _, _ = hub.subscribe(b"", encode=encode)
        for _ in range(30):
            await forum.write_many([b"job"] * 100)
            first.pending(most=1 << 30)
        assert hub.held == (3000, 300_000)  # second sent none yet
        for _ in range(11):  # let go a thousand events at a time, or so
            second.pending(most=1 << 30)
            first.pending(most=1 << 30)
            await forum.write_many([b"job"] * 100)
        assert hub.held[0] <= 1024 + 100 and not second.overflowed
        hub.unsubscribe(first)
        hub.unsubscribe(second)
        assert hub.held == (0, 0) and hub.watchers == 0


async def test_a_watch_that_ended_leaves_the_next_of_its_prefix_alone(
    forum: Forum, hub: WatchHub
) -> None:
    """The last watcher of a prefix leaves, a new one comes, then the first
    one's handler unsubscribes it again (as a stream's end does): the new
    one still gets its events."""
    first, _, _ = hub.subscribe(b"job-")
    first.close()
    second, _, _ = hub.subscribe(b"job-")
    hub.unsubscribe(first)
    await forum.write(b"job-1")
    assert kinds(await second.next_batch(1)) == [("write", b"job-1")]
