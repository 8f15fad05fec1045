"""Replication settings: defaults, FORUM_REPL_* overrides, refusals."""

from __future__ import annotations

import pytest

from forum.replication.config import ReplicationConfig


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
        {"FORUM_REPL_RANKING": "random"},
        {"FORUM_REPL_WARN_CLOCK_SKEW": "0"},
        {"FORUM_REPL_WARN_CLOCK_SKEW": "-1"},
        {"FORUM_REPL_WARN_CLOCK_SKEW": "60"},
        {"FORUM_REPL_MAX_CLOCK_SKEW": "0.5"},
    ],
)
def test_bad_settings_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="FORUM_REPL_"):
        ReplicationConfig.from_env(env)


def test_the_ranking_of_remote_tuples_is_members_unless_set_to_slots() -> None:
    assert ReplicationConfig().ranking == "members"
    assert ReplicationConfig.from_env({"FORUM_REPL_RANKING": "slots"}).ranking == "slots"


def test_a_misspelt_variable_is_named_with_a_suggestion() -> None:
    with pytest.raises(ValueError) as raised:
        ReplicationConfig.from_env({"FORUM_REPL_ANTI_ENTROPY_INTERVL": "0.5"})
    assert str(raised.value) == (
        "FORUM_REPL_ANTI_ENTROPY_INTERVL: unknown config key 'anti_entropy_intervl' "
        "(did you mean FORUM_REPL_ANTI_ENTROPY_INTERVAL?)"
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MAX_BATCH", "1.5", "max_batch must be a positive integer, not '1.5'"),
        ("DEAD_AFTER", "soon", "dead_after must be a finite number of seconds >= 0, not 'soon'"),
        (
            "QUEUE_BYTES",
            "64XiB",
            "queue_bytes must be a positive integer of bytes, "
            "optionally with a unit: KiB, MiB or GiB, not '64XiB'",
        ),
        ("BACKOFF_MAX", "0.01", "backoff_max must be at least backoff_base"),
        (
            "WARN_CLOCK_SKEW",
            "0",
            "warn_clock_skew must be a finite number of seconds > 0, not '0'",
        ),
        ("WARN_CLOCK_SKEW", "60", "warn_clock_skew must be less than max_clock_skew"),
    ],
    ids=["int", "seconds", "unit", "together", "positive-seconds", "clock-skews"],
)
def test_a_bad_value_is_one_line_naming_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        ReplicationConfig.from_env({f"FORUM_REPL_{name}": value})
    assert str(raised.value) == f"FORUM_REPL_{name}: {message}"


def test_sizes_take_units_as_the_node_s_do() -> None:
    config = ReplicationConfig.from_env(
        {"FORUM_REPL_QUEUE_BYTES": "16MiB", "FORUM_REPL_PAGE_BYTES": "512KiB"}
    )
    assert (config.queue_bytes, config.page_bytes) == (16 << 20, 512 << 10)
