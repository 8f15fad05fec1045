"""A batch write with a key per payload (``write_many(keys=...)``): each
deduplicated as its single write would be, the rest written in one append."""

from __future__ import annotations

import pytest

from forum.node.core.space import Pattern
from forum.node.space.forum import Forum

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
