"""``forum worker`` and ``forum jobs`` given a mistake: one line on stderr
naming it, exit code 2, no traceback, and no worker left running doing nothing.

Mistakes judged from the text alone run through ``main`` in this process;
those that need the world (a module to import, Redis, the node, a port) run
the real ``forum`` script against a real node and Redis."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.coordinator.harness import REPO
from tests.fixtures.cli import FORUM_SCRIPT, assert_usage_error, run_forum, run_main
from tests.fixtures.nodes import ForumNodes, NodeProcess, free_port

HANDLER = "examples.handlers.fenced_redis:open_handler"


def worker(*more: str, node: str | None = None, redis: str = "redis://127.0.0.1:1/0") -> list[str]:
    node = node or f"http://127.0.0.1:{free_port()}"
    return [
        "worker", "--node", node, "--redis-url", redis, "--no-progress",
        "--app-dir", str(REPO), *more,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("more", "names"),
    [
        (["--prefix", "", "--handler", HANDLER], ["--prefix", "empty"]),
        (["--prefix", "job/", "--handler", HANDLER, "--dead-prefix", ""], ["--dead-prefix"]),
        (["--prefix", "job/", "--handler", HANDLER, "--metrics-port", "99999"], ["0 to 65535"]),
        (["--prefix", "job/", "--handler", HANDLER, "--metrics-port", "-1"], ["--metrics-port"]),
        (["--prefix", "job/", "--handler", HANDLER, "--take-wait", "0"], ["--take-wait", "> 0"]),
        (["--prefix", "job/", "--handler", HANDLER, "--lease", "nan"], ["--lease", "finite"]),
        (["--prefix", "job/", "--handler", HANDLER, "--drain-timeout", "-1"], ["--drain-timeout"]),
        (["--prefix", "job/", "--handler", HANDLER, "--concurrency", "0"], ["--concurrency"]),
        (["--prefix", "job/", "--handler", HANDLER, "--log-level", "LOUD"], ["--log-level"]),
        (["--prefix", "job/", "--handler", HANDLER, "--app-dir", "/nonexistent"], ["--app-dir"]),
        (["--prefix", "job/", "--handler", HANDLER, "--namespace", ""], ["--namespace", "empty"]),
        (["--prefix", "job/", "--handler", HANDLER, "--wait-replicas", "-1"], ["at least 0"]),
        (
            [
                "--prefix",
                "job/",
                "--handler",
                HANDLER,
                "--wait-replicas",
                "1",
                "--wait-timeout",
                "5",
            ],
            ["wait_timeout must be shorter than timeout"],
        ),
    ],
    ids=lambda v: v[1] if isinstance(v, list) and v and v[0] == "--prefix" else None,
)
def test_bad_worker_flags(
    more: list[str], names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert_usage_error(run_main(worker(*more), capsys), "forum worker", *names)


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("127.0.0.1:6379", ["not a Redis URL"]),
        # redis-py would ignore a database that is not a number and use 0.
        ("redis://127.0.0.1:6379/jobs", ["database 'jobs' is not a number"]),
        ("redis://:s3cret@127.0.0.1:6379/x", ["***", "not a number"]),
        ("redis+cluster://127.0.0.1/", ["'127.0.0.1' is not a cluster node as host:port"]),
        ("redis+cluster://:s3cret@10.0.0.1:7000,10.0.0.2/", ["***", "'10.0.0.2'"]),
        ("redis+cluster://127.0.0.1:7000/2", ["a Redis Cluster has only database 0"]),
        ("redis+cluster://127.0.0.1:99999/", ["'127.0.0.1:99999'"]),
        ("redis+sentinel://127.0.0.1:26379/", ["name the primary"]),
    ],
)
def test_bad_redis_urls(url: str, names: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    line = assert_usage_error(
        run_main(worker("--prefix", "job/", "--handler", HANDLER, redis=url), capsys),
        "--redis-url",
        *names,
    )
    assert "s3cret" not in line


def test_requeue_without_ids_or_all(capsys: pytest.CaptureFixture[str]) -> None:
    node = f"http://127.0.0.1:{free_port()}"
    result = run_main(["jobs", "retry", "--raw", "--node", node], capsys)
    assert_usage_error(result, "forum jobs retry", "--all")


@pytest.mark.parametrize("command", [["dead"], ["dead", "list", "--json"], ["dead", "requeue"]])
def test_forum_dead_points_to_forum_jobs(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``forum dead`` overlapped ``forum jobs``; what it did is ``forum jobs
    --raw`` now, and the old name says so in one line."""
    line = assert_usage_error(run_main(command, capsys), "forum dead: moved to forum jobs")
    assert "forum jobs list --raw" in line and "forum jobs retry --raw" in line


@pytest.mark.parametrize(
    ("handler", "names"),
    [
        ("tests.coordinator.no_such_module:h", ["not found", "'tests.coordinator.no_such_module'"]),
        ("no_such_package.handlers:h", ["not found", "'no_such_package.handlers'"]),
        (
            "tests.coordinator.handler_with_missing_dependency:handle",
            [
                "cannot import tests.coordinator.handler_with_missing_dependency",
                "handler_with_missing_dependency.py:5: No module named "
                "'forum_test_package_that_is_not_installed'",
            ],
        ),
        ("tests.coordinator.bad_handlers:nope", ["has no 'nope'"]),
        ("tests.coordinator.bad_handlers", ["not module:name"]),
        ("tests.coordinator.bad_handlers:sync_handler", ["not async"]),
        ("tests.coordinator.bad_handlers:takes_nothing", ["takes no job"]),
        ("tests.coordinator.bad_handlers:NOT_A_FUNCTION", ["not a function"]),
        (
            "tests.coordinator.bad_handlers:fails_to_open",
            ["opening it failed", "RuntimeError: no result store configured"],
        ),
    ],
)
async def test_bad_handlers(
    handler: str, names: list[str], forum_node: NodeProcess, redis_url: str
) -> None:
    result = await run_forum(*worker("--prefix", "job/", "--handler", handler,
                                     node=forum_node.url, redis=redis_url))  # fmt: skip
    assert_usage_error(result, "forum worker: --handler", *names)


def test_the_module_not_found_is_told_from_a_failing_import(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The two used to read alike: 'No module named ...' for a typo in --handler
    and for a dependency the handler module lacks."""
    missing = run_main(
        worker("--prefix", "job/", "--handler", "tests.coordinator.no_such:h"), capsys
    )
    broken = run_main(
        worker(
            "--prefix", "job/", "--handler", "tests.coordinator.handler_with_missing_dependency:h"
        ),
        capsys,
    )
    assert "module 'tests.coordinator.no_such' not found" in assert_usage_error(missing)
    assert "cannot import tests.coordinator.handler_with_missing_dependency" in (
        assert_usage_error(broken)
    )


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("x = 1\ndef broken(:\n    pass\n", ["SyntaxError at", "mymod.py:2: invalid syntax"]),
        ("raise RuntimeError('no\\nconfig')\n", ["RuntimeError at", "mymod.py:1: no config"]),
    ],
)
def test_a_module_that_fails_to_import_is_named_with_its_file_and_line(
    source: str, names: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to say what the module raised, but not where: the user had to
    import it by hand to find the line."""
    (tmp_path / "mymod.py").write_text(source)
    result = run_main(
        ["worker", "--app", "mymod:app", "--app-dir", str(tmp_path), "--no-progress"], capsys
    )
    line = assert_usage_error(result, "forum worker: --app mymod:app: cannot import mymod:", *names)
    assert "Traceback" not in line


async def test_redis_database_out_of_range(forum_node: NodeProcess, redis_url: str) -> None:
    """Redis has 16 databases by default: /99 refuses every command. The worker
    used to start and show "redis up" while failing every claim."""
    no_such_db = redis_url.rsplit("/", 1)[0] + "/99"
    result = await run_forum(*worker("--prefix", "job/", "--handler", HANDLER,
                                     node=forum_node.url, redis=no_such_db))  # fmt: skip
    assert_usage_error(result, "--redis-url", "/99", "DB index is out of range")


async def test_wait_aof_on_a_redis_without_waitaof(forum_node: NodeProcess, redis_url: str) -> None:
    """Debian 12's Redis 7.0 has no WAITAOF: one line at start, not a worker
    whose every claim fails."""
    result = await run_forum(*worker("--prefix", "job/", "--handler", HANDLER, "--wait-aof",
                                     node=forum_node.url, redis=redis_url))  # fmt: skip
    assert_usage_error(result, "--redis-url", "wait_aof needs Redis 7.2 or newer")


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


async def test_metrics_port_in_use(forum_node: NodeProcess, redis_url: str, busy_port: int) -> None:
    result = await run_forum(*worker("--prefix", "job/", "--handler", HANDLER,
                                     "--metrics-port", str(busy_port),
                                     node=forum_node.url, redis=redis_url),
                             env={"FORUM_EXAMPLE_REDIS_URL": redis_url})  # fmt: skip
    assert_usage_error(result, f"--metrics-port {busy_port}", "in use")


async def test_wrong_token(forum_nodes: ForumNodes, redis_url: str, tmp_path: Path) -> None:
    node = await forum_nodes.start("locked", token="s3cret")
    result = await run_forum(*worker("--prefix", "job/", "--handler", HANDLER, "--token", "wrong",
                                     node=node.url, redis=redis_url),
                             env={"FORUM_EXAMPLE_REDIS_URL": redis_url})  # fmt: skip
    assert_usage_error(result, "--token", "401")


async def test_job_prefix_inside_the_dead_prefix(forum_node: NodeProcess, redis_url: str) -> None:
    result = await run_forum(*worker("--prefix", "dead", "--handler", HANDLER,
                                     node=forum_node.url, redis=redis_url),
                             env={"FORUM_EXAMPLE_REDIS_URL": redis_url})  # fmt: skip
    assert_usage_error(result, "dead prefix", "matches the job pattern")


async def test_metrics_port_0_is_any_free_port_and_says_which(
    forum_node: NodeProcess, redis_url: str
) -> None:
    """Port 0 used to listen on a random port nobody could find."""
    process = await asyncio.create_subprocess_exec(
        FORUM_SCRIPT, *worker("--prefix", "job/", "--handler", HANDLER, "--metrics-port", "0",
                              node=forum_node.url, redis=redis_url),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "FORUM_EXAMPLE_REDIS_URL": redis_url},
    )  # fmt: skip
    try:
        assert process.stderr is not None
        async with asyncio.timeout(30):
            while not (line := (await process.stderr.readline()).decode()).startswith(
                "forum worker: metrics on "
            ):
                assert line, "the worker exited without saying its metrics port"
        port = int(line.rsplit(":", 1)[1])
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as response,
        ):
            assert response.status == 200
            assert "forum_worker_running" in await response.text()
    finally:
        process.terminate()
        async with asyncio.timeout(30):
            await process.communicate()
    assert process.returncode == 0


@pytest.mark.parametrize("command", [["worker", "--help"], ["jobs", "list"]], ids=" ".join)
async def test_without_redis_the_worker_commands_say_so_in_one_line(command: list[str]) -> None:
    """A node-only install (no redis package) runs ``forum serve``; ``worker``
    and ``jobs`` then say they are not available, exit 2, no traceback."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c",
        "import sys; sys.modules['redis'] = None;"  # `import redis` now fails, as if not installed
        f"from forum.cli import main; sys.exit(main({command!r}))",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    line = assert_usage_error((process.returncode, out.decode(), err.decode()))
    assert line.startswith(f"forum {command[0]}: not available here: "), line
    assert "redis" in line


async def test_a_cluster_map_file_that_cannot_be_read(
    forum_node: NodeProcess, redis_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "no-map.toml"
    result = await run_forum(*worker("--prefix", "job/", "--handler", HANDLER,
                                     "--cluster-map", str(missing),
                                     node=forum_node.url, redis=redis_url),
                             env={"FORUM_EXAMPLE_REDIS_URL": redis_url})  # fmt: skip
    assert_usage_error(result, "--cluster-map", str(missing), "cannot read")
