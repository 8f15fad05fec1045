from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig


@pytest.fixture
def cfg(tmp_path: Path) -> StrandConfig:
    return StrandConfig().with_storage(tmp_path / "strand").with_node_name("test")


@pytest.fixture
async def forum(cfg: StrandConfig) -> AsyncIterator[Forum]:
    # remote_delay=0: remote writes are live at once (tests of the delay set it).
    f = Forum(await Strand.open(cfg), remote_delay=0)
    yield f
    await f.close()
