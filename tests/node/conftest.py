from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from node import Forum, Strand, StrandConfig


@pytest.fixture
def cfg(tmp_path: Path) -> StrandConfig:
    return StrandConfig().with_storage(tmp_path / "strand").with_node_name("test")


@pytest.fixture
async def forum(cfg: StrandConfig) -> AsyncIterator[Forum]:
    # remote_delay=0: remote writes are live at once (tests of the delay set it).
    f = Forum(await Strand.open(cfg), remote_delay=0)
    yield f
    await f.close()
