"""User mistakes on the ``forum`` command line: each is one line on stderr
naming the problem, exit code 2, no traceback, and nothing changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.cli import assert_usage_error, run_forum, run_main
from tests.fixtures.nodes import free_port

#: Every command that talks to a node, with the arguments it needs besides --node.
NODE_COMMANDS = [
    ("write", "job-1"),
    ("take", "job-"),
    ("read", "job-"),
    ("count", "job-"),
    ("status",),
    ("watch", "job-"),
    ("jobs", "list", "--raw"),
    ("jobs", "retry", "--raw", "--all"),
    ("worker", "--prefix", "job/", "--handler", "examples.handlers.fenced_redis:open_handler"),
]


@pytest.mark.parametrize("command", NODE_COMMANDS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("url", ["127.0.0.1:7070", "localhost", "http://", "http://h:99999"])
def test_node_url_must_be_a_url(
    command: tuple[str, ...], url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_main([*command, "--node", url], capsys)
    assert_usage_error(result, "--node", repr(url))


async def test_node_url_without_a_scheme_through_the_real_script() -> None:
    assert_usage_error(await run_forum("write", "job-1", "--node", "127.0.0.1:7070"), "http://")


async def test_node_url_from_the_environment_is_checked_too() -> None:
    result = await run_forum("count", "", env={"FORUM_NODE": "127.0.0.1:7070"})
    assert_usage_error(result, "--node", "'127.0.0.1:7070'", "http://")


@pytest.mark.parametrize("wait", ["-1", "nan", "inf", "soon"])
def test_take_wait_must_be_seconds(wait: str, capsys: pytest.CaptureFixture[str]) -> None:
    node = f"http://127.0.0.1:{free_port()}"
    assert_usage_error(run_main(["take", "job-", "--wait", wait, "--node", node], capsys), "--wait")


async def test_misspelt_replication_variable_stops_serve_before_the_data_dir(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    result = await run_forum(
        "serve", "--data-dir", str(data), "--listen", "127.0.0.1:0",
        env={"FORUM_REPL_ANTI_ENTROPY_INTERVL": "0.5"},
    )  # fmt: skip
    assert_usage_error(result, "FORUM_REPL_ANTI_ENTROPY_INTERVL", "unknown")
    assert not data.exists()


#: A bad setting from each source (tests/service/test_config.py has the
#: rest), and what the one line must name.
BAD_SETTINGS = {
    "env-misspelt": ([], {"FORUM_TOKNE": "s3cret"}, "", ("FORUM_TOKNE", "FORUM_TOKEN")),
    "env-replication-unit": (
        [], {"FORUM_REPL_QUEUE_BYTES": "64XiB"}, "", ("FORUM_REPL_QUEUE_BYTES", "unit"),
    ),
    "flag-unit": (["--max-payload", "12parsecs"], {}, "", ("--max-payload", "unit")),
    "file-unknown-key": ([], {}, "max_wiat = 5\n", ("node.toml", "'max_wiat'", "max_wait")),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_SETTINGS)
async def test_a_bad_setting_stops_serve_with_one_line_naming_it(case: str, tmp_path: Path) -> None:
    args, env, toml, names = BAD_SETTINGS[case]
    config = tmp_path / "node.toml"
    config.write_text(toml)
    data = tmp_path / "data"
    result = await run_forum(
        "serve", "--config", str(config), "--data-dir", str(data), "--listen", "127.0.0.1:0",
        *args, env=env,
    )  # fmt: skip
    assert_usage_error(result, "forum serve: ", *names)
    assert not data.exists()


def test_unknown_command_and_missing_argument_are_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert_usage_error(run_main(["tkae", "job-"], capsys), "tkae")
    assert_usage_error(run_main(["take"], capsys), "PREFIX")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cluster", "up", "--nodes", "0"], "nodes must be 1 to 26"),
        (["cluster", "up", "--nodes", "27"], "nodes must be 1 to 26"),
        (["cluster", "demo", "--workers", "-1"], "workers must be >= 0"),
        (["cluster", "up", "--redis", "localhost:6379"], "redis must be 'auto' or a redis:// URL"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_a_bad_cluster_setting_is_one_line_and_starts_nothing(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cluster"
    result = run_main([*argv, "--root", str(root)], capsys)
    assert_usage_error(result, f"forum {' '.join(argv[:2])}: {message}")
    assert not root.exists()


async def test_an_unknown_event_loop_is_a_usage_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = await run_forum(
        "serve", "--data-dir", str(data), "--listen", "127.0.0.1:0",
        env={"FORUM_EVENT_LOOP": "tokio"},
    )  # fmt: skip
    assert_usage_error(result, "FORUM_EVENT_LOOP", "uvloop or asyncio", "'tokio'")
    assert not data.exists()
