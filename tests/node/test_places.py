"""Where a tuple can be (forum.node.space.places): one answer, and no container left out.

The Forum and its collaborators hold many containers; each either is the
container of a :class:`Place` (what ``Places`` holds) or is named below with
why it is not one. A container added to any of them fails
:func:`test_every_container_is_a_place_or_said_not_to_be` until it is either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from forum.node.core.entries import EntryId, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.space.places import Place, Places
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import eventually

#: Containers (by owner class and attribute) that hold no tuple of their own.
NOT_PLACES = {
    ("Forum", "strand"): "the log: every entry, dead or not",
    ("Noting", "arrivals"): "when this node came to hold what, by seq ranges",
    ("Forum", "_props"): "the properties of tuples that are in a place",
    ("Forum", "_dedup"): "a key's window names the id it answers with, whatever became of it",
    ("Forum", "_limits"): "prefixes and their limits",
    ("Forum", "_paused"): "paused prefixes, with the ids of their markers (in PAUSE)",
    ("Takes", "killed_while_taking"): "ids that are in TAKING",
    ("Takes", "_lapses"): "how often the leases of a tuple in a place ran out",
    ("Applier", "_lapses"): "how often the leases of a tuple in a place ran out",
    ("Takes", "settling"): "tasks of cancelled takes",
    ("Forum", "_pending_kills"): "Takes whose Write has not come: no tuple yet",
    ("Forum", "_applying"): "entries on their way to the Strand",
    ("Applier", "pending_kills"): "Takes whose Write has not come: no tuple yet",
    ("Applier", "applying"): "entries on their way to the Strand",
    ("Applier", "double_takes_by_prefix"): "per prefix, a count of double takes",
    ("Placement", "_expiring_run"): "the seqs of an expiry time in the schedule",
    ("Forum", "_waiters"): "blocking takes",
    ("Forum", "_listeners"): "listeners",
    ("Forum", "_live_listeners"): "listeners",
    ("Copies", "_held"): "per peer, the highest seq of ours it holds (no ids)",
    ("Copies", "_waits"): "writes waiting for their copies (their tuples are live)",
    ("RemoteTuples", "_pace"): "per writer, when it took its own tuples",
    ("Borrowing", "_dry"): "per writer and prefix, until when it is not asked unbidden",
    ("Admission", "limits"): "prefixes and their limits",
    ("Admission", "paused"): "paused prefixes, with the ids of their markers (in PAUSE)",
    ("Admission", "room_waiters"): "writers waiting for room",
    ("Admission", "_limited_writing"): "per prefix, how many writes are under way",
    ("Admission", "_dedup_writing"): "per key, the write under way",
}

JOBS = Pattern(b"job/")
REMOTE = Write(EntryId("peer-a", 1), b"job/remote")
POOLED = Write(EntryId("peer-a", 2), b"job/pooled")


def _attributes(obj: object) -> Iterator[tuple[str, object]]:
    names = set(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        names.update(getattr(cls, "__slots__", ()))
    for name in sorted(names):
        if hasattr(obj, name):
            yield name, getattr(obj, name)


def _is_container(value: object) -> bool:
    """A collection that could hold ids (not a value: text, bytes, a record)."""
    if callable(value) or isinstance(value, str | bytes | tuple):
        return False
    return hasattr(value, "__contains__") or hasattr(value, "__len__")


def _unlisted(forum: Forum) -> list[tuple[str, str]]:
    """The containers of the Forum and its collaborators that are neither a
    place's nor in NOT_PLACES."""
    places = forum._places
    held = {id(getattr(places, slot)) for slot in Places.__slots__}
    seen: set[int] = {id(places)}
    unlisted: list[tuple[str, str]] = []
    owners: list[object] = [forum]
    while owners:
        owner = owners.pop()
        for name, value in _attributes(owner):
            if id(value) in seen or id(value) in held:
                continue
            seen.add(id(value))
            key = (type(owner).__name__, name)
            if key in NOT_PLACES:
                continue
            if type(value).__module__.startswith("forum.node.space."):
                owners.append(value)  # a collaborator: its containers count too
            elif _is_container(value):
                unlisted.append(key)
    return unlisted


async def test_every_container_is_a_place_or_said_not_to_be(cfg: StrandConfig) -> None:
    async with Forum(await Strand.open(cfg)) as forum:
        assert _unlisted(forum) == []


def test_places_holds_one_container_per_place() -> None:
    assert sorted(Places.__slots__) == sorted(place.value for place in Place)


async def test_where_finds_a_tuple_in_each_place(cfg: StrandConfig) -> None:
    ranks = {REMOTE.id: 1, POOLED.id: 1}
    async with Forum(await Strand.open(cfg), remote_delay=0.01, remote_hold=3600) as forum:
        places = forum._places
        forum.set_ranking(ranks.__getitem__)
        await forum.apply([POOLED])  # its turn comes with no taker here: held in the pool
        await eventually(lambda: places.where(POOLED.id) is Place.POOL, what="pooled")
        reserved = await forum.write(b"job/reserved")
        handed = await forum.reserve(JOBS, lease=60)
        assert handed is not None and handed.id == reserved
        live = await forum.write(b"job/live")
        later = await forum.write(b"job/later", delay=3600)
        marker = await forum.pause(b"paused/")
        ranks[REMOTE.id] = 10_000  # waits for a turn far off
        await forum.apply([REMOTE])
        taking = await forum.write(b"other/taking")
        take = asyncio.create_task(forum.take(Pattern(b"other/")))
        await asyncio.sleep(0)  # the take is under way: its Take is being appended
        expected = {
            live: Place.INDEX,
            reserved: Place.RESERVED,
            REMOTE.id: Place.SURFACING,
            POOLED.id: Place.POOL,
            later: Place.SCHEDULE,
            marker: Place.PAUSE,
            taking: Place.TAKING,
        }
        assert {entry_id: places.where(entry_id) for entry_id in expected} == expected
        assert set(places.ids()) == set(expected)
        assert len(places) == len(expected)
        assert await take == b"other/taking"
        assert places.where(taking) is None


async def test_the_forum_keeps_at_most_30_attributes(cfg: StrandConfig) -> None:
    """Past 30 attributes CPython 3.11 stops sharing an instance's dict keys,
    and every attribute read of the Forum (its hot paths) gets slower: a new
    field belongs in a collaborator."""
    async with Forum(await Strand.open(cfg)) as forum:
        assert len(vars(forum)) <= 30, sorted(vars(forum))
