"""A batch write with a key per payload (``write_many(keys=...)``): each
deduplicated as its single write would be, the rest written in one append."""

from __future__ import annotations

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.core.errors import LimitExceeded
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import NodeProcess

JOBS = Pattern(b"job/")


async def test_each_key_is_deduplicated_as_a_single_write_is(forum: Forum) -> None:
    before = await forum.write(b"job/b", key="b", dedup_window=60)
    ids = await forum.write_many(
        [b"job/a", b"job/b-again", b"job/c", b"job/a-again"],
        keys=["a", "b", "c", "a"],
        dedup_window=60,
    )
    assert ids[1] == before  # open window: the first write's id, nothing written
    assert ids[3] == ids[0]  # the batch's own earlier write of "a"
    assert len({ids[0], ids[2], before}) == 3
    assert await forum.count(JOBS) == 3  # a, b, c: once each
    # A later single write with a batch's key is deduplicated too.
    assert await forum.write(b"job/c2", key="c", dedup_window=60) == ids[2]


async def test_keys_carry_into_the_tuples_properties(forum: Forum) -> None:
    await forum.write_many([b"job/1", b"job/2"], keys=[b"k1", b"k2"], priority=3)
    taken = await forum.take_entry(JOBS)
    assert taken is not None and taken.props.key in (b"k1", b"k2")
    assert taken.props.priority == 3


@pytest.mark.parametrize(
    ("keys", "options"),
    [(["a"], {}), (["a", "b"], {"key": "c"}), (["a", ""], {})],
)
async def test_bad_keys_write_nothing(
    forum: Forum, keys: list[str], options: dict[str, str]
) -> None:
    with pytest.raises(ValueError):
        await forum.write_many([b"job/1", b"job/2"], keys=keys, **options)  # type: ignore[arg-type]
    assert await forum.count(JOBS) == 0


async def test_keys_over_http_json_and_their_refusals(forum_node: NodeProcess) -> None:
    url = f"{forum_node.url}/v1/tuples/batch"
    async with aiohttp.ClientSession() as session:
        body = {"payloads": ["job/a", "job/b"], "keys": ["ka", "kb"], "dedup_window": 60}
        async with session.post(url, json=body) as answer:
            assert answer.status == 201
            first = (await answer.json())["ids"]
        async with session.post(url, json=body) as answer:  # again: deduplicated
            assert (await answer.json())["ids"] == first
        for bad, message in (
            ({"payloads": ["job/c"], "keys": ["k1", "k2"]}, "keys must be a list of 1 keys"),
            ({"payloads": ["job/c"], "keys": ["k1"], "key": "k"}, "give key or keys"),
            ({"payloads": ["job/c"], "keys": [""]}, "keys: key must be 1 to"),
        ):
            async with session.post(url, json=bad) as answer:
                assert answer.status == 400
                assert message in (await answer.json())["message"]
    async with ForumClient(forum_node.url) as client:
        assert await client.count(JOBS) == 2


async def test_a_keyed_batch_over_a_limit_writes_nothing_and_frees_its_keys(
    cfg: StrandConfig,
) -> None:
    async with Forum(await Strand.open(cfg), limits={b"job/": 2}) as forum:
        with pytest.raises(LimitExceeded):
            await forum.write_many([b"job/1", b"job/2", b"job/3"], keys=["a", "b", "c"],
                                   dedup_window=60)  # fmt: skip
        assert await forum.count(JOBS) == 0
        # Its keys were not taken: written again within the limit, they are new writes.
        ids = await forum.write_many([b"job/1", b"job/2"], keys=["a", "b"], dedup_window=60)
        assert len(set(ids)) == 2
        assert await forum.count(JOBS) == 2
