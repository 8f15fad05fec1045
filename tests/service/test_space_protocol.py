"""One suite, two spaces: the in-process ``Forum`` and ``ForumClient`` against a
real node must behave the same through the ``TupleSpace`` Protocol, so code
written against one runs against the other."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.entries import Tuple
from forum.node.core.space import Pattern, TupleSpace
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import ForumNodes


@pytest.fixture(params=["forum", "client"])
async def space(
    request: pytest.FixtureRequest, tmp_path: Path, forum_nodes: ForumNodes
) -> AsyncIterator[TupleSpace]:
    if request.param == "forum":
        cfg = StrandConfig().with_storage(tmp_path / "strand").with_node_name("local")
        async with Forum(await Strand.open(cfg)) as forum:
            yield forum
    else:
        node = await forum_nodes.start("remote")
        async with ForumClient(node.url) as client:
            yield client


async def test_is_a_tuple_space(space: TupleSpace) -> None:
    assert isinstance(space, TupleSpace)


async def test_write_then_take_oldest_first(space: TupleSpace) -> None:
    first = await space.write(b"job-1")
    second = await space.write(b"job-1")
    assert first != second and first.origin == second.origin and second.seq == first.seq + 1
    taken = await space.take_entry(Pattern(b"job-1"))
    assert taken == Tuple(first, b"job-1")
    assert await space.take(Pattern(b"job-1")) == b"job-1"
    assert await space.take(Pattern(b"job-1")) is None


async def test_read_leaves_and_count_counts(space: TupleSpace) -> None:
    await space.write(b"a-1")
    await space.write(b"a-2")
    await space.write(b"b-1")
    assert await space.read(Pattern(b"a-")) == b"a-1"
    assert await space.read(Pattern(b"a-")) == b"a-1"
    assert await space.count(Pattern(b"a-")) == 2
    assert await space.count(Pattern(b"")) == 3
    assert await space.read(Pattern(b"c-")) is None
    assert await space.count(Pattern(b"c-")) == 0


async def test_prefix_is_bytes(space: TupleSpace) -> None:
    await space.write(b"\xff\x00raw")
    await space.write("caf\u00e9".encode())
    assert await space.take(Pattern(b"\xff")) == b"\xff\x00raw"
    assert await space.take(Pattern("caf\u00e9".encode())) == "caf\u00e9".encode()
    assert await space.take(Pattern(b"")) is None


@pytest.mark.parametrize("timeout", [None, 0])
async def test_no_timeout_answers_at_once(space: TupleSpace, timeout: float | None) -> None:
    async with asyncio.timeout(5):
        assert await space.take(Pattern(b"none"), timeout=timeout) is None
        assert await space.take_entry(Pattern(b"none"), timeout=timeout) is None


async def test_take_waits_up_to_its_timeout(space: TupleSpace) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await space.take(Pattern(b"late"), timeout=0.3) is None
    assert loop.time() - started >= 0.29


async def test_waiting_take_gets_a_later_write(space: TupleSpace) -> None:
    waiting = asyncio.create_task(space.take_entry(Pattern(b"later-"), timeout=20))
    # A write that cannot match first, then one that does: whenever the take
    # started waiting, it gets the match (a take finds what is already live).
    await space.write(b"other")
    entry_id = await space.write(b"later-1")
    async with asyncio.timeout(15):
        assert await waiting == Tuple(entry_id, b"later-1")
    assert await space.count(Pattern(b"")) == 1


async def test_concurrent_takes_never_share_a_tuple(space: TupleSpace) -> None:
    for i in range(50):
        await space.write(f"t-{i}".encode())
    taken = await asyncio.gather(*(space.take(Pattern(b"t-")) for _ in range(60)))
    got = [t for t in taken if t is not None]
    assert sorted(got) == sorted(f"t-{i}".encode() for i in range(50))
    assert taken.count(None) == 10
