"""The ``forum`` command end to end, through subprocesses against a real node."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from forum.node.client.remote import ForumClient
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually, free_port

FORUM = [sys.executable, "-m", "forum"]


async def forum(
    *args: str,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[int, bytes, str]:
    """Run ``forum ARGS``; its exit code, stdout bytes and stderr text."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FORUM_")}
    environment.update(env or {})
    process = await asyncio.create_subprocess_exec(
        *FORUM, *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=environment, cwd=cwd,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await process.communicate(stdin)
    assert process.returncode is not None
    return process.returncode, out, err.decode()


async def test_write_take_read_count_status(forum_node: NodeProcess) -> None:
    node = ("--node", forum_node.url)
    code, out, _ = await forum("write", "job-1 resize cat.jpg", *node)
    assert code == 0 and out.decode().strip().startswith("n1-")
    code, out, _ = await forum("write", "-", *node, stdin=b"job-2 \x00\xff binary")
    assert code == 0 and out.decode().strip().endswith(":2")

    assert await forum("count", "job-", *node) == (0, b"2\n", "")
    assert (await forum("read", "job-", *node))[:2] == (0, b"job-1 resize cat.jpg")
    assert (await forum("take", "job-", *node))[:2] == (0, b"job-1 resize cat.jpg")
    assert (await forum("take", "job-", *node))[:2] == (0, b"job-2 \x00\xff binary")
    code, out, _err = await forum("take", "job-", *node)
    assert (code, out) == (1, b"")
    assert (await forum("read", "job-", *node))[0] == 1

    code, out, _ = await forum("status", *node)
    table = out.decode()
    assert code == 0
    for row in ("node", "origin", "live tuples", "writes / takes", "peers"):
        assert row in table
    assert "2 / 2" in table


async def test_take_waits(forum_node: NodeProcess) -> None:
    taking = asyncio.create_task(forum("take", "late-", "--wait", "30", "--node", forum_node.url))
    async with ForumClient(forum_node.url) as client:

        async def waiting() -> bool:
            return (await client.status()).long_polls > 0

        await eventually(waiting, timeout=30, what="forum take waiting")
        await client.write(b"late-1")
    code, out, _ = await taking
    assert (code, out) == (0, b"late-1")


async def test_token_from_flag_and_environment(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("locked", token="s3cret")
    code, _, err = await forum("write", "x", "--node", node.url)
    assert code == 3 and "401" in err and node.url in err
    assert (await forum("write", "x", "--node", node.url, "--token", "s3cret"))[0] == 0
    env = {"FORUM_TOKEN": "s3cret", "FORUM_NODE": node.url}
    assert await forum("count", "", env=env) == (0, b"1\n", "")


async def test_unreachable_node() -> None:
    code, _, err = await forum("count", "", "--node", f"http://127.0.0.1:{free_port()}")
    assert code == 3 and "cannot connect" in err


@pytest.mark.parametrize("command", ["serve", "write", "take", "read", "count", "status", None])
async def test_help_says_what_and_gives_an_example(command: str | None) -> None:
    code, out, _ = await forum(*([command] if command else []), "--help")
    text = out.decode()
    assert code == 0 and "example:" in text
    assert "usage: forum" in text


async def test_serve_defaults_and_clean_exit(tmp_path: Path) -> None:
    """``forum serve`` with no data dir given uses ./forum-data, says where it
    listens, and exits 0 on SIGTERM. (Only the port is moved off 7070, which a
    developer's own node may hold.)"""
    port = free_port()
    node = NodeProcess("defaults", tmp_path)
    node.port = port
    process = await asyncio.create_subprocess_exec(
        *FORUM, "serve", "--listen", f"127.0.0.1:{port}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("FORUM_")},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        async with asyncio.timeout(20):
            line = (await process.stdout.readline()).decode()
        assert f"listening on http://127.0.0.1:{port}" in line
        async with ForumClient(node.url) as client:
            status = await client.status()
        assert status.fsync == "always"
        assert (tmp_path / "forum-data").is_dir()
    finally:
        process.terminate()
        async with asyncio.timeout(20):
            await process.communicate()
    assert process.returncode == 0


async def test_serve_config_file_env_and_flags(tmp_path: Path) -> None:
    """TOML < FORUM_* < flags: the file sets the node id and fsync, the
    environment overrides fsync, the flag overrides the listen address."""
    port = free_port()
    config = tmp_path / "node.toml"
    config.write_text(
        'node_id = "from-file"\nfsync = "never"\nlisten = "127.0.0.1:1"\n'
        f'data_dir = "{tmp_path / "data"}"\n'
    )
    process = await asyncio.create_subprocess_exec(
        *FORUM, "serve", "--config", str(config), "--listen", f"127.0.0.1:{port}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("FORUM_")},
             "FORUM_FSYNC": "interval"},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        async with asyncio.timeout(20):
            await process.stdout.readline()
        async with ForumClient(f"http://127.0.0.1:{port}") as client:
            status = await client.status()
        assert (status.node_id, status.fsync) == ("from-file", "interval")
    finally:
        process.terminate()
        async with asyncio.timeout(20):
            await process.communicate()


async def test_serve_refuses_bad_configuration(tmp_path: Path) -> None:
    code, _, err = await forum("serve", "--listen", "nowhere", cwd=tmp_path)
    assert code == 2 and "listen must be HOST:PORT" in err
    code, _, err = await forum("serve", "--max-payload", "lots", cwd=tmp_path)
    assert code == 2 and "max_payload" in err
    config = tmp_path / "bad.toml"
    config.write_text('colour = "blue"\n')
    code, _, err = await forum("serve", "--config", str(config), cwd=tmp_path)
    assert code == 2 and "unknown config key 'colour'" in err


async def test_serve_reports_a_port_in_use_and_creates_nothing(
    forum_node: NodeProcess, tmp_path: Path
) -> None:
    """It used to create its data directory, then fail to listen."""
    code, _, err = await forum(
        "serve", "--listen", f"127.0.0.1:{forum_node.port}", "--data-dir", str(tmp_path / "d")
    )
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"cannot listen on 127.0.0.1:{forum_node.port}: Address already in use" in err
    assert not (tmp_path / "d").exists()


async def test_serve_log_format_json(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("jsonlog", "--log-format", "json")
    await node.stop()
    lines = [ln for ln in node.log_text().splitlines() if ln.startswith("{")]
    assert any('"message": "node jsonlog' in ln for ln in lines)


async def test_serve_imports_neither_redis_nor_the_worker_runtime(forum_nodes: ForumNodes) -> None:
    """A node runs without the worker runtime installed: a real ``forum serve``,
    started, asked for its status and stopped, never imports redis,
    ``coordinator`` or ``deploy`` (``PYTHONPROFILEIMPORTTIME`` makes Python
    log every module it imports, whenever it does)."""
    node = await forum_nodes.start("imports", env={"PYTHONPROFILEIMPORTTIME": "1"})
    async with ForumClient(node.url) as client:
        await client.status()
    assert await node.stop() == 0
    imported = {
        line.rpartition("|")[2].strip()
        for line in node.log_text(tail=10**7).splitlines()
        if line.startswith("import time:")
    }
    # (The log has what `import` statements load: what they pull in, too.)
    assert {"forum.node.serve", "forum.replication.extension"} <= imported
    assert {
        m for m in imported if m.partition(".")[0] in {"redis", "coordinator", "deploy"}
    } == set()


async def test_only_the_picked_command_module_is_imported() -> None:
    """argparse picks the command; only then is its module imported and its
    options added, so a client command loads no worker, cluster or replication."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c",
        "import sys; from forum.cli import build_parser;"
        "args = build_parser().parse_args(['count', 'job-', '--node', 'http://h:1']);"
        "print(args.prefix, args.node, sorted(m for m in sys.modules"
        " if m.partition('.')[0] in ('forum', 'redis') and not m.startswith('forum.node')))",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await process.communicate()
    assert out.decode().split(" ", 2) == [
        "job-",
        "http://h:1",
        "['forum', 'forum.cli', 'forum.cli_args', 'forum.cli_client']\n",
    ]
