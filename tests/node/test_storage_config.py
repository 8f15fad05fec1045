"""The storage settings of NodeConfig: fsync_interval, segment_bytes, and the
max_payload they allow (a tuple must fit one record of a segment)."""

from __future__ import annotations

import pytest

from forum.node.config.node import NodeConfig
from forum.node.serve import strand_config
from forum.node.storage.strand import payload_limit


def test_fsync_interval_and_segment_bytes_reach_the_strand() -> None:
    config = NodeConfig.load(
        env={"FORUM_FSYNC_INTERVAL": "0.25"},
        flags={"fsync": "interval", "segment_bytes": "1MiB", "max_payload": "64KiB"},
    )
    strand = strand_config(config)
    assert (strand.fsync, strand.fsync_interval, strand.segment_bytes) == (
        "interval",
        0.25,
        1024 * 1024,
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"fsync_interval": "0"}, "fsync_interval must be a finite number of seconds > 0"),
        ({"fsync_interval": "-1"}, "fsync_interval must be"),
        ({"fsync_interval": "nan"}, "fsync_interval must be"),
        ({"fsync_interval": True}, "seconds"),
        ({"segment_bytes": "1000"}, "segment_bytes must be at least 4096"),
        # The original: a 64 MiB tuple was acknowledged, and replay refused it.
        ({"max_payload": "64MiB"}, "max_payload must be at most"),
        ({"segment_bytes": "64KiB"}, "max_payload must be at most"),  # the 1 MiB default
    ],
)
def test_bad_storage_settings_are_refused_with_one_line(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        NodeConfig.load(env={}, flags=values)
    assert "\n" not in str(caught.value)


def test_the_largest_allowed_payload_is_accepted() -> None:
    size = 64 * 1024
    config = NodeConfig.load(env={}, flags={"segment_bytes": size, "max_payload": "16KiB"})
    assert config.max_payload <= payload_limit(size)
    NodeConfig(segment_bytes=size, max_payload=payload_limit(size))
