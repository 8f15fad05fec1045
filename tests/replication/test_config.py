"""Replication settings: defaults, FORUM_REPL_* overrides, refusals."""

from __future__ import annotations

import pytest

from replication.config import ReplicationConfig


def test_environment_overrides_defaults() -> None:
    config = ReplicationConfig.from_env(
        {"FORUM_REPL_ANTI_ENTROPY_INTERVAL": "0.2", "FORUM_REPL_MAX_BATCH": "64", "OTHER": "x"}
    )
    assert config.anti_entropy_interval == 0.2
    assert config.max_batch == 64
    assert config.batch_delay == ReplicationConfig().batch_delay


@pytest.mark.parametrize(
    "env",
    [
        {"FORUM_REPL_NO_SUCH_THING": "1"},
        {"FORUM_REPL_MAX_BATCH": "1.5"},
        {"FORUM_REPL_MAX_BATCH": "0"},
        {"FORUM_REPL_BATCH_DELAY": "-1"},
        {"FORUM_REPL_BATCH_DELAY": "nan"},
        {"FORUM_REPL_ANTI_ENTROPY_INTERVAL": "0"},
        {"FORUM_REPL_BACKOFF_MAX": "0.01"},
    ],
)
def test_bad_settings_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="FORUM_REPL_"):
        ReplicationConfig.from_env(env)
