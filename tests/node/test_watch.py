"""The watch hub (node.watch) on a real Forum: events in order with ids of
this run, resumption from the ring, gaps and resets, the prefix filter (takes
by their target's payload), expiries, and the cut-off of a watcher that falls
behind while the writes go on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from node import Forum, Pattern
from node.entries import EntryId, Properties, Take, Tuple, Write
from node.forum import LOCAL
from node.watch import HubEvent, WatchHub, parse_event_id


@pytest.fixture
async def hub(forum: Forum) -> AsyncIterator[WatchHub]:
    async with WatchHub(forum, buffer=8, queue=5, known=4) as made:
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


async def test_a_take_of_a_tuple_it_does_not_know_reaches_only_watchers_of_all(
    forum: Forum, hub: WatchHub
) -> None:
    await forum.write(b"job-early")  # then forgotten: the hub knows 4 tuples at most
    await forum.write_many([b"x1", b"x2", b"x3", b"x4"])
    jobs, _, _ = hub.subscribe(b"job-")
    every, _, _ = hub.subscribe(b"")
    await forum.take(Pattern(b"job-"))
    assert await jobs.next_batch(0.05) == []
    assert kinds(await every.next_batch(1)) == [("take", None)]


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


async def test_pause_markers_and_their_takes_are_no_events(hub: WatchHub) -> None:
    every, _, _ = hub.subscribe(b"")
    marker = EntryId("peer", 1)
    hub.on_entries([Write(marker, b"job-", Properties(pause=True))], LOCAL)
    hub.on_entries([Take(EntryId("peer", 2), marker)], LOCAL)
    hub.on_entries([Write(EntryId("peer", 3), b"job-1")], LOCAL)
    events = await every.next_batch(1)
    assert [(e.n, e.kind) for e in events] == [(3, "write")]  # ids may skip a number


async def test_with_nobody_watching_the_hub_keeps_no_payload_alive(
    forum: Forum, hub: WatchHub
) -> None:
    """A ``forum serve`` with no watcher grew by ~150 B per live tuple: the
    hub kept every written payload to filter takes nobody was watching."""
    await forum.write_many([b"job-%d" % i for i in range(3)])
    assert hub.remembered == 0
    watcher, _, _ = hub.subscribe(b"job-")
    await forum.write(b"job-3")
    assert hub.remembered == 1
    hub.unsubscribe(watcher)
    assert hub.remembered == 0
