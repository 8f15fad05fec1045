"""The coordinator tests' fixtures: in-process Forums, a Lens, the in-memory
claim authority and the examples' fenced result store. Redis, nodes and
Toxiproxy come from ``tests.fixtures`` (registered in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from examples.handlers.fenced_redis import FencedRedisStore
from forum.coordinator import Lens
from forum.coordinator.memory import MemoryAuthority
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig

__all__ = ["ForumFactory", "authority", "fenced", "forum", "lens", "make_forum"]

ForumFactory = Callable[[str], Awaitable[Forum]]


@pytest.fixture
async def make_forum(tmp_path: Path) -> AsyncIterator[ForumFactory]:
    """Opens in-process Forums (one Strand each, in the test's directory)."""
    opened: list[Forum] = []

    async def make(name: str) -> Forum:
        config = StrandConfig().with_storage(tmp_path / name).with_fsync("never")
        forum = Forum(await Strand.open(config.with_node_name(name)))
        opened.append(forum)
        return forum

    try:
        yield make
    finally:
        for forum in opened:
            await forum.close()


@pytest.fixture
async def forum(make_forum: ForumFactory) -> Forum:
    return await make_forum("a")


@pytest.fixture
async def lens(redis_url: str) -> AsyncIterator[Lens]:
    async with Lens.from_url(redis_url) as lens:
        yield lens


@pytest.fixture
def authority() -> MemoryAuthority:
    """The in-memory ClaimAuthority, for worker logic that needs no Redis
    (its contract with the Lens: test_authority_contract.py)."""
    return MemoryAuthority()


@pytest.fixture
async def fenced(redis_url: str) -> AsyncIterator[FencedRedisStore]:
    async with FencedRedisStore.from_url(redis_url) as store:
        yield store
