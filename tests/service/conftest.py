"""The service tests' fixtures: real ``forum serve`` processes, an HTTP session,
and an in-process Forum for the Protocol suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from forum.node.client.remote import ForumClient
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import NodeProcess


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A plain HTTP session, for requests the client would never send."""
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture(params=["stream", "http"])
async def client(
    forum_node: NodeProcess, request: pytest.FixtureRequest
) -> AsyncIterator[ForumClient]:
    """A client of ``forum_node`` over each transport: the same contract either way."""
    async with ForumClient(forum_node.url, transport=request.param) as c:
        assert c.transport == request.param
        yield c


@pytest.fixture
async def local_forum(tmp_path: Path) -> AsyncIterator[Forum]:
    cfg = StrandConfig().with_storage(tmp_path / "local").with_node_name("local")
    async with Forum(await Strand.open(cfg)) as forum:
        yield forum
