"""Write concern on one node (forum.node.space.copies): ``copies`` is checked
before anything is written, and a write waits for its copies until the
acknowledgements replication hands the node make them, or says how many
hold it. The acknowledgements come from real peers in
``tests/replication/test_copies_cluster.py``; here the test plays
replication's part through the same hook (``Copies.held``)."""

from __future__ import annotations

import asyncio
import re

import pytest

from forum.node.config.node import NodeConfig
from forum.node.config.settings import SettingError
from forum.node.core.entries import EntryId
from forum.node.core.errors import ForumError, TooFewCopies, TooManyCopies
from forum.node.core.space import Pattern
from forum.node.core.write_options import check_copies
from forum.node.space.copies import Copies
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig

ORIGIN = "a-00000001"


@pytest.mark.parametrize(
    ("copies", "message"),
    [
        (0, "copies must be at least 1 (this node's own), not 0"),
        (-2, "copies must be at least 1 (this node's own), not -2"),
        (True, "copies is a whole number from 1, not True"),
        (2.0, "copies is a whole number from 1, not 2.0"),
        ("2", "copies is a whole number from 1, not '2'"),
        (None, "copies is a whole number from 1, not None"),
    ],
)
def test_copies_is_a_whole_number_from_1(copies: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_copies(copies)


def test_more_copies_than_members_is_refused_in_one_line() -> None:
    assert check_copies(3, members=3) == 3
    with pytest.raises(
        TooManyCopies, match=r"^copies=4 but the cluster has 3 members .*: at most 3$"
    ):
        check_copies(4, members=3)
    with pytest.raises(ValueError, match="has 1 member "):
        check_copies(2, members=1)


async def test_a_wait_wakes_on_the_ack_that_makes_its_count() -> None:
    copies = Copies(ORIGIN, timeout=30)
    copies.set_members(lambda: 3)
    ids = [EntryId(ORIGIN, 4), EntryId(ORIGIN, 5)]
    waiting = asyncio.create_task(copies.wait(ids, 3))
    await asyncio.sleep(0)
    copies.held("b-00000002", 4)  # below the write's last seq: not yet
    copies.held("b-00000002", 5)
    await asyncio.sleep(0)
    assert not waiting.done() and copies.count(5) == 2
    copies.held("b-00000002", 9)  # the same peer again counts once
    copies.held("c-00000003", 3)  # an older ack of another
    await asyncio.sleep(0)
    assert not waiting.done()
    copies.held("c-00000003", 6)
    await asyncio.wait_for(waiting, 5)
    assert copies.count(5) == 3
    copies.held("c-00000003", 2)  # late and lower: what it held, it held
    assert copies.count(6) == 3


async def test_a_wait_short_of_its_copies_says_how_many_hold_it() -> None:
    copies = Copies(ORIGIN, timeout=0.05)
    copies.held("b-00000002", 7)
    await copies.wait([EntryId(ORIGIN, 7)], 2)  # held already: no wait
    with pytest.raises(TooFewCopies) as short:
        await copies.wait([EntryId(ORIGIN, 8)], 3)
    assert (short.value.held, short.value.copies, short.value.retriable) == (1, 3, False)
    assert str(short.value).startswith("1 of 3 copies held after 0.05 s; the write stays written")
    assert Copies(ORIGIN)._waits == [] and copies._waits == []


async def test_a_write_with_copies_waits_for_them_and_more_than_members_writes_nothing(
    cfg: StrandConfig,
) -> None:
    async with Forum(await Strand.open(cfg)) as forum:
        origin = forum.strand.origin
        with pytest.raises(TooManyCopies, match="copies=2 but the cluster has 1 member"):
            await forum.write(b"job-1", copies=2)
        with pytest.raises(ValueError, match="copies is a whole number"):
            await forum.write_many([b"job-1"], copies=True)
        assert await forum.count(Pattern(b"")) == 0
        assert (await forum.write(b"job-1", copies=1)).origin == origin

        forum.copies.set_members(lambda: 2)  # as replication installs it
        writing = asyncio.create_task(forum.write(b"job-2", copies=2, ttl=60))
        await asyncio.sleep(0.05)
        assert not writing.done()
        assert await forum.count(Pattern(b"job-2")) == 1  # durable and live here meanwhile
        forum.copies.held("b-00000002", 2)
        written = await asyncio.wait_for(writing, 5)
        assert written == EntryId(origin, 2)

        many = asyncio.create_task(forum.write_many([b"job-3", b"job-4"], copies=2))
        await asyncio.sleep(0.05)
        forum.copies.held("b-00000002", 3)  # one of the two
        await asyncio.sleep(0.05)
        assert not many.done()
        forum.copies.held("b-00000002", 4)
        assert [i.seq for i in await asyncio.wait_for(many, 5)] == [3, 4]

        # Closing ends the wait with the copies held so far; the write stands.
        left = asyncio.create_task(forum.write(b"job-5", copies=2))
        await asyncio.sleep(0.05)
    with pytest.raises(TooFewCopies, match="1 of 2 copies"):
        await left


async def test_ack_copies_is_the_default_and_a_write_may_ask_for_one(cfg: StrandConfig) -> None:
    strand = await Strand.open(cfg)
    with pytest.raises(ValueError, match="copies must be at least 1"):
        Forum(strand, ack_copies=0)
    await strand.close()
    async with Forum(await Strand.open(cfg), ack_copies=2, copies_timeout=0.05) as forum:
        with pytest.raises(TooManyCopies):
            await forum.write(b"plain")  # the default, on a node alone
        forum.copies.set_members(lambda: 2)
        with pytest.raises(TooFewCopies, match="1 of 2"):
            await forum.write(b"plain")
        assert (await forum.write(b"one", copies=1)).seq == 2
        assert await forum.count(Pattern(b"")) == 2
    with pytest.raises(ForumError, match="closed"):
        await forum.write(b"late", copies=1)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"ack_copies": 0}, "ack_copies must be a positive integer, not 0"),
        ({"ack_copies": True}, "ack_copies must be a positive integer, not True"),
        ({"copies_timeout": 0}, "copies_timeout must be a finite number of seconds > 0, not 0"),
    ],
)
def test_the_node_settings_of_copies_are_checked(setting: dict[str, object], message: str) -> None:
    assert (NodeConfig().ack_copies, NodeConfig().copies_timeout) == (1, 5.0)  # as before
    with pytest.raises(SettingError, match=f"^{re.escape(message)}$"):
        NodeConfig(**setting)  # type: ignore[arg-type]
