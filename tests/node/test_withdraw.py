"""``Forum.withdraw``: a take that reaches tuples not due yet, as a job's
cancel needs (docs/http-api.md, "Withdraw"). Over HTTP and the stream alike:
tests/service/test_stream.py; across nodes and through a cancel:
tests/tasks/test_cancel_delayed.py."""

from __future__ import annotations

from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig

JOBS = Pattern(b"job/")


async def test_withdraw_takes_live_and_not_yet_due_matches_and_leaves_reserved_ones(
    forum: Forum,
) -> None:
    later = await forum.write(b"job/a later", delay=600)
    now = await forum.write(b"job/a now")
    await forum.write(b"job/a held")
    await forum.write(b"job/b later", delay=600)
    held = await forum.reserve(Pattern(b"job/a held"), lease=60)
    assert held is not None
    assert forum.stats().delayed == 2

    taken = await forum.withdraw(Pattern(b"job/a "), 10)

    assert {item.id for item in taken} == {later, now}
    assert taken[-1].props.due > 0  # handed out with its Write's due time
    assert forum.stats().delayed == 1  # job/b's is still waiting
    assert await forum.count(Pattern(b"job/a ")) == 0
    assert await forum.ack(held.id)  # the reservation was left to its holder


async def test_a_withdrawn_delayed_tuple_never_comes_back(forum: Forum, cfg: StrandConfig) -> None:
    await forum.write(b"job/x", delay=600)
    await forum.write(b"job/y", delay=600)
    assert len(await forum.withdraw(JOBS, 1)) == 1  # the limit holds
    assert [item.payload for item in await forum.withdraw(JOBS, 5)] == [b"job/y"]
    assert await forum.withdraw(JOBS, 5) == []
    await forum.close()
    # Its Take is in the log: a restart does not schedule it again.
    reopened = Forum(await Strand.open(cfg), remote_delay=0)
    try:
        assert reopened.stats().delayed == 0
    finally:
        await reopened.close()
