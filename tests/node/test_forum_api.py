"""The in-process tuple-space API, as users call it (DESIGN.md, "Forum")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from forum.node.core.entries import EntryId, Tuple
from forum.node.core.errors import ForumError
from forum.node.core.space import Pattern, TupleSpace
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import eventually


async def test_original_example_line_for_line(tmp_path: Path) -> None:
    """The original system's documentation example, in its Python form."""
    cfg = StrandConfig().with_storage(tmp_path)
    strand = await Strand.open(cfg)
    forum = Forum(strand)

    await forum.write(b"job-1")
    await forum.write(b"job-1")  # two entries with identical payload

    first = await forum.take(Pattern(b"job-1"))
    assert first == b"job-1"
    second = await forum.take(Pattern(b"job-1"))
    assert second == b"job-1"
    third = await forum.take(Pattern(b"job-1"))
    assert third is None
    await forum.close()


async def test_write_returns_distinct_sequential_ids(forum: Forum) -> None:
    a = await forum.write(b"x")
    b = await forum.write(b"x")
    assert a.origin == b.origin == forum.strand.origin
    assert (a.seq, b.seq) == (1, 2)
    assert EntryId.parse(str(a)) == a


async def test_take_and_read_return_oldest_match(forum: Forum) -> None:
    for payload in [b"job-2", b"other", b"job-1", b"job-3"]:
        await forum.write(payload)
    assert await forum.read(Pattern(b"job-")) == b"job-2"
    assert await forum.read(Pattern(b"job-")) == b"job-2"  # read leaves it live
    assert await forum.take(Pattern(b"job-")) == b"job-2"
    assert await forum.take(Pattern(b"job-")) == b"job-1"
    assert await forum.count(Pattern(b"job-")) == 1
    assert await forum.take(Pattern(b"")) == b"other"  # the empty pattern matches all
    assert await forum.take(Pattern(b"job-")) == b"job-3"
    assert await forum.take(Pattern(b"job-")) is None
    assert await forum.read(Pattern(b"")) is None


async def test_oldest_first_holds_for_large_prefix_ranges(forum: Forum) -> None:
    """Past the scan limit the index serves a prefix from its queue: same order."""
    payloads = [b"p/%03d" % (i * 7 % 100) for i in range(100)]
    await forum.write_many(payloads)
    await forum.write(b"q/late")
    got = [await forum.take(Pattern(b"p/")) for _ in range(100)]
    assert got == payloads
    assert await forum.take(Pattern(b"p/")) is None
    assert await forum.take(Pattern(b"q/")) == b"q/late"


async def test_take_entry_gives_the_id_the_write_returned(forum: Forum) -> None:
    entry_id = await forum.write(b"job-9")
    assert await forum.take_entry(Pattern(b"job-")) == Tuple(entry_id, b"job-9")
    assert await forum.take_entry(Pattern(b"job-")) is None


async def test_exact_payload_pattern(forum: Forum) -> None:
    await forum.write_many([b"abc", b"ab", b"abcd"])
    assert await forum.count(Pattern(b"ab")) == 3
    assert await forum.count(Pattern(b"abc")) == 2
    assert await forum.take(Pattern(b"abcd")) == b"abcd"
    assert await forum.count(Pattern(b"abcd")) == 0


async def test_prefixes_ending_in_0xff_bytes(forum: Forum) -> None:
    await forum.write_many([b"\xff\xff", b"\xff\xfe", b"\xff", b"\xfe"])
    assert await forum.count(Pattern(b"\xff")) == 3
    assert await forum.count(Pattern(b"\xff\xff")) == 1
    assert await forum.take(Pattern(b"\xff\xff")) == b"\xff\xff"


async def test_payloads_with_zero_bytes_match_by_prefix_across_a_restart(
    cfg: StrandConfig,
) -> None:
    """The index keeps each payload escaped (00 as 00 FF, then 00 00): 00
    bytes come back whole, and a payload shorter than a prefix never matches
    it, whether the tuples were written or replayed (a restart's bulk load)."""
    payloads = [b"a", b"a\x00", b"a\x00\x00", b"\x00", b"", b"a\x00\xff"]
    async with Forum(await Strand.open(cfg)) as forum:
        ids = await forum.write_many(payloads)
    async with Forum(await Strand.open(cfg)) as forum:
        assert await forum.count(Pattern(b"a\x00\x00")) == 1
        assert await forum.count(Pattern(b"a\x00")) == 3
        assert await forum.count(Pattern(b"\x00")) == 1
        assert await forum.read(Pattern(b"a\x00\x00\x00")) is None
        assert [t.payload for t in forum.list(Pattern(b"")).tuples] == payloads
        taken = await forum.take_entry(Pattern(b"a\x00"))
        assert taken == Tuple(ids[1], b"a\x00")
        assert [t.payload for t in await forum.take_many(Pattern(b""), 10)] == [
            p for p in payloads if p != b"a\x00"
        ]


async def test_take_many_and_write_many(forum: Forum) -> None:
    ids = await forum.write_many([b"t/%d" % i for i in range(10)])
    assert len(set(ids)) == 10
    taken = await forum.take_many(Pattern(b"t/"), 4)
    assert [t.payload for t in taken] == [b"t/0", b"t/1", b"t/2", b"t/3"]
    assert await forum.count(Pattern(b"t/")) == 6
    assert len(await forum.take_many(Pattern(b"t/"), 100)) == 6
    assert await forum.take_many(Pattern(b"t/"), 5) == []


async def test_list_pages_oldest_first(forum: Forum) -> None:
    await forum.write_many([b"l/%02d" % i for i in range(50)] + [b"m/0"])
    await forum.take(Pattern(b"l/07"))
    seen: list[bytes] = []
    cursor: int | None = 0
    while cursor is not None:
        page = forum.list(Pattern(b"l/"), cursor=cursor, limit=20)
        assert len(page.tuples) <= 20
        seen.extend(t.payload for t in page.tuples)
        cursor = page.next_cursor
    assert seen == [b"l/%02d" % i for i in range(50) if i != 7]


async def test_bad_arguments_are_refused(forum: Forum) -> None:
    with pytest.raises(TypeError):
        Pattern("job-")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await forum.write("text")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await forum.take_many(Pattern(b""), 0)
    with pytest.raises(ValueError):
        EntryId.parse("no-seq")
    with pytest.raises(ValueError):
        EntryId("bad origin", 1)
    assert forum.stats().entries == 0


async def test_closed_forum_refuses_work(cfg: StrandConfig) -> None:
    forum = Forum(await Strand.open(cfg))
    await forum.close()
    with pytest.raises(ForumError):
        await forum.write(b"x")
    await forum.close()  # idempotent


async def test_forum_satisfies_the_tuple_space_protocol(forum: Forum) -> None:
    assert isinstance(forum, TupleSpace)


async def test_concurrent_writes_all_land_in_order_of_acknowledgement(forum: Forum) -> None:
    """200 writers at once: every write lands, and the acknowledgements come
    in seq order (a write is acknowledged only after every earlier seq is
    durable), which is also the order the tuples are served in."""
    acknowledged: list[int] = []

    async def write(i: int) -> None:
        acknowledged.append((await forum.write(b"c/%d" % i)).seq)

    await asyncio.gather(*(write(i) for i in range(200)))
    assert acknowledged == list(range(1, 201))
    served = [t.id.seq for t in forum.list(Pattern(b"c/"), limit=1000).tuples]
    assert served == acknowledged


async def test_a_write_cancelled_mid_append_still_becomes_live(forum: Forum) -> None:
    """The append goes ahead (its batch is shared); the tuple it made durable
    is live, as it will be after a restart."""
    write = asyncio.create_task(forum.write(b"cw/1"))
    await asyncio.sleep(0)
    write.cancel()
    await asyncio.gather(write, return_exceptions=True)
    await eventually(lambda: forum.stats().live == 1, what="the write live")
    assert forum.stats().writes == 1
