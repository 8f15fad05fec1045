"""Issue 14 in the config and on the command line: ``limits`` from the TOML
file, ``FORUM_LIMITS`` and ``--limits``; a bad limit stops ``forum serve``
with one line; ``forum status`` shows each limited prefix's fill and the
paused prefixes; ``forum pause`` / ``forum resume`` and ``forum write``'s options."""

from __future__ import annotations

from pathlib import Path

import pytest

from forum.node.client.remote import ForumClient
from forum.node.config.node import NodeConfig
from forum.node.core.space import Pattern
from tests.fixtures.cli import assert_usage_error, run_forum
from tests.fixtures.nodes import ForumNodes, NodeProcess


def test_limits_from_each_layer(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text('limits = {"job/" = 100000, "mail/" = 5}\n')
    loaded = NodeConfig.load(config, env={})
    assert loaded.prefix_limits == {b"job/": 100000, b"mail/": 5}
    from_env = NodeConfig.load(None, env={"FORUM_LIMITS": "job/=7, a=b=3"})
    assert from_env.limits == {"job/": 7, "a=b": 3}
    from_flag = NodeConfig.load(config, env={}, flags={"limits": "job/=9"})
    assert from_flag.limits == {"job/": 9}
    assert NodeConfig().limits == {}


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ('limits = {"job/" = 0}', "the limit of 'job/' must be a whole number of tuples >= 1"),
        ('limits = {"job/" = -5}', "not -5"),
        ('limits = {"job/" = 2.0}', "not 2.0"),
        ('limits = {"job/" = "many"}', "not 'many'"),
        ('limits = {"job/" = true}', "not True"),
        ("limits = 5", 'limits must be a table of prefix = most tuples, such as {"job/" = 100000}'),
    ],
)
def test_a_bad_limit_is_one_line(tmp_path: Path, toml: str, words: str) -> None:
    config = tmp_path / "node.toml"
    config.write_text(toml + "\n")
    with pytest.raises(ValueError) as refused:
        NodeConfig.load(config, env={})
    message = str(refused.value)
    assert message.startswith(str(config)) and words in message and "\n" not in message


async def test_serve_exits_with_a_bad_limit(tmp_path: Path) -> None:
    result = await run_forum("serve", "--limits", "job/=0", cwd=tmp_path)
    assert_usage_error(result, "--limits", "'job/'", ">= 1")
    assert not (tmp_path / "forum-data").exists()  # refused before anything was made


async def test_status_shows_fill_paused_and_counts(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("full", "--limits", "job/=4,mail/=10")
    async with ForumClient(node.url) as client:
        await client.write_many([b"job/1", b"job/2", b"job/3"])
    code, out, err = await run_forum("pause", "job/", "--node", node.url)
    assert (code, err) == (0, ""), err
    assert out.startswith("paused job/ (marker full-")
    code, out, err = await run_forum("status", "--node", node.url)
    assert code == 0, err
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert "3 / 4 (75%)" in rows["limit job/"]
    assert "0 / 10" in rows["limit mail/"]
    assert rows["paused"].endswith("job/")
    assert rows["delayed / expired"].endswith("0 / 0")
    code, out, err = await run_forum("resume", "job/", "--node", node.url)
    assert (code, out, err) == (0, "resumed job/ (1 pause(s) ended)\n", "")
    code, out, _ = await run_forum("status", "--node", node.url)
    assert any(line.startswith("paused") and line.endswith("none") for line in out.splitlines())


async def test_write_with_options_from_the_shell(forum_node: NodeProcess) -> None:
    code, out, err = await run_forum(
        "write", "cli/1", "--ttl", "60", "--priority", "7", "--key", "k-1", "--node", forum_node.url
    )
    assert code == 0, err
    async with ForumClient(forum_node.url) as client:
        found = await client.read_entry(Pattern(b"cli/"))
    assert found is not None and str(found.id) == out.strip()
    assert (found.props.priority, found.props.key) == (7, b"k-1")
    node = ("--node", forum_node.url)
    code, out, err = await run_forum("write", "cli/2", "--priority", "999", *node)
    assert code == 3 and "priority must be -128 to 127" in err and len(err.splitlines()) == 1
    code, _, err = await run_forum("pause", "", "--node", forum_node.url)
    assert code == 2 and "must not be empty" in err
