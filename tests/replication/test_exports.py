from __future__ import annotations

import replication


def test_all_is_sorted_and_complete() -> None:
    assert replication.__all__ == sorted(replication.__all__)
    for name in replication.__all__:
        assert hasattr(replication, name), name
