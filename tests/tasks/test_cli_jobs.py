"""``forum worker --app`` as a real process, and ``forum jobs`` on the jobs it
runs: list, show, cancel, retry, purge; against a real node and Redis.

The worker imports :data:`app` from this module (``--app
tests.tasks.test_cli_jobs:app``); its tasks leave their marks as files in
``$CLI_TEST_DIR`` so the test sees what ran, and ``flaky`` fails while a
file says so. ``forum jobs`` runs through the real ``main`` in a thread (a
subprocess costs a second of imports per command); one test runs it as
the real console script.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from forum.cli_app import Where
from forum.cli_args import UsageError
from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from forum.tasks import App, Context, JobCancelled, JobHandle, JobState
from forum.tasks.queues import DEFAULT_QUEUE, queue_prefix
from tests.coordinator.harness import REPO, WorkerProcess, worker_processes
from tests.fixtures.cli import assert_usage_error, run_forum, run_main
from tests.fixtures.nodes import NodeProcess, eventually, free_port
from tests.fixtures.redis_server import RedisServer

SPEC = "tests.tasks.test_cli_jobs:app"

app = App(prefix=b"cli-test/")


def _marks() -> Path:
    return Path(os.environ["CLI_TEST_DIR"])


@app.task
async def echo(ctx: Context, value: Any) -> Any:
    return value


@app.task
def touch(ctx: Context, name: str) -> None:
    """Leave a mark that this job ran."""
    (_marks() / f"ran-{name}").write_text(ctx.key)


@app.task(retries=0)
def flaky(ctx: Context, name: str) -> str:
    """Fail while ``fail-<name>`` exists; no retries: the first failure is dead."""
    if (_marks() / f"fail-{name}").exists():
        raise RuntimeError(f"{name} is told to fail")
    return f"{name} ok"


@app.task
async def hold(ctx: Context, name: str) -> str:
    """Say it started (and its progress), then run until ``go-<name>`` exists."""
    ctx.progress({"step": "waiting"})
    (_marks() / f"started-{name}").touch()
    while not (_marks() / f"go-{name}").exists():
        await asyncio.sleep(0.05)  # a poll of the test's file, until the test says go
    return name


#: Not apps, or an app no worker can run: for the mistakes.
NOT_AN_APP: dict[str, list[str]] = {"tasks": []}
EMPTY_APP = App()
BROKEN_APP = App()


@BROKEN_APP.task
async def broken(ctx: Context) -> None: ...


broken.function = 42  # type: ignore[assignment]  # as if a module had mangled it


# -- helpers -----------------------------------------------------------------------


@pytest.fixture
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "marks"
    directory.mkdir()
    monkeypatch.setenv("CLI_TEST_DIR", str(directory))
    return directory


@pytest.fixture
async def client_app(forum_node: NodeProcess, redis_url: str) -> AsyncIterator[App]:
    """This module's app, open against the test's node and Redis (the producer)."""
    async with app.using(nodes=forum_node.url, redis=redis_url) as opened:
        yield opened


def worker_of(root: Path, node: NodeProcess, redis_url: str, marks: Path) -> WorkerProcess:
    return WorkerProcess(
        "w1", root, ["--app", SPEC, "--node", node.url, "--redis-url", redis_url,
                     "--take-wait", "0.2", "--lease", "5"],
        {"CLI_TEST_DIR": str(marks)},
    )  # fmt: skip


class Jobs:
    """``forum jobs ACTION ...`` against the test's node and Redis, through
    the real ``main`` in a thread; its exit code, stdout and stderr."""

    def __init__(self, node: NodeProcess, redis_url: str, capsys: pytest.CaptureFixture[str]):
        self.where = ["--app", SPEC, "--app-dir", str(REPO), "--node", node.url,
                      "--redis-url", redis_url]  # fmt: skip
        self.capsys = capsys

    async def __call__(self, action: str, *args: str) -> tuple[int, str, str]:
        return await asyncio.to_thread(run_main, ["jobs", action, *args, *self.where], self.capsys)

    async def listed(self, state: JobState | None = None) -> list[dict[str, Any]]:
        more = [] if state is None else ["--state", state.value]
        code, out, err = await self("list", "--json", *more)
        assert code == 0, err
        return [json.loads(line) for line in out.splitlines()]

    async def shown(self, key: str) -> dict[str, Any]:
        code, out, err = await self("show", key, "--json")
        assert code == 0, err
        shown: dict[str, Any] = json.loads(out)
        return shown


@pytest.fixture
def jobs(forum_node: NodeProcess, redis_url: str, capsys: pytest.CaptureFixture[str]) -> Jobs:
    return Jobs(forum_node, redis_url, capsys)


# -- the worker and the jobs -------------------------------------------------------


@pytest.mark.slow
async def test_a_worker_process_runs_an_apps_jobs_and_show_tells_their_story(
    tmp_path: Path,
    forum_node: NodeProcess,
    redis_url: str,
    marks: Path,
    client_app: App,
    jobs: Jobs,
) -> None:
    async with worker_processes(tmp_path) as started:
        worker = worker_of(tmp_path / "w1", forum_node, redis_url, marks)
        started.append(worker)
        await worker.start()
        echoed = await client_app.enqueue("echo", {"n": 7}, _key="echo-1")
        touched = await client_app.enqueue("touch", "a")
        assert await echoed.result(timeout=30) == {"n": 7}
        await touched.result(timeout=30)
        assert (marks / "ran-a").read_text() == touched.key
        assert await worker.signal(15) == 0
    shown = await jobs.shown("echo-1")
    assert (shown["state"], shown["task"], shown["result"]) == ("done", "echo", {"n": 7})
    assert [event["event"] for event in shown["history"]] == ["claimed", "completed"]
    assert shown["history"][0]["owner"] == "w1"
    code, out, _ = await jobs("show", "echo-1")
    assert code == 0
    assert "state:     done" in out and 'result:    {"n": 7}' in out and "claimed" in out
    listed = await jobs.listed(JobState.DONE)
    assert {job["key"] for job in listed} >= {"echo-1", touched.key}


async def test_cancel_takes_a_queued_job_away(
    forum_node: NodeProcess, client_app: App, jobs: Jobs
) -> None:
    """t0 a job is queued, no worker runs; t1 ``forum jobs cancel`` writes its
    done marker, then withdraws its tuple: no node holds it any more (a
    worker that took it meanwhile would be turned away by the marker)."""
    handle = await client_app.enqueue("touch", "cancelled", _key="to-cancel")

    async def listed_queued() -> bool:
        # Listed once its record (written behind the enqueue) is in the Lens's index.
        return [job["state"] for job in await jobs.listed() if job["key"] == "to-cancel"] == [
            "queued"
        ]

    await eventually(listed_queued, 10, "the job listed queued")
    assert await jobs("cancel", "to-cancel") == (0, "cancelled to-cancel\n", "")
    async with ForumClient(forum_node.url) as space:
        pattern = Pattern(queue_prefix(app.prefix, DEFAULT_QUEUE) + b"to-cancel\n")
        assert await space.count(pattern) == 0
    assert (await handle.status()).state is JobState.CANCELLED
    code, _, err = await jobs("cancel", "to-cancel")
    assert code == 1 and "over already" in err
    code, _, err = await jobs("cancel", "no-such-job")
    assert code == 1 and err == "forum jobs cancel: no job with key 'no-such-job'\n"


@pytest.mark.slow
async def test_a_running_job_is_listed_with_its_worker_and_stopped_by_a_cancel(
    tmp_path: Path,
    forum_node: NodeProcess,
    redis_url: str,
    marks: Path,
    client_app: App,
    jobs: Jobs,
) -> None:
    async with worker_processes(tmp_path) as started:
        worker = worker_of(tmp_path / "w1", forum_node, redis_url, marks)
        started.append(worker)
        await worker.start()
        handle = await client_app.enqueue("hold", "h", _key="held")
        await eventually((marks / "started-h").exists, 30, "the task running")
        running = await jobs.listed(JobState.RUNNING)
        assert [(j["key"], j["worker"], j["attempt"]) for j in running] == [("held", "w1", 1)]
        await eventually(lambda: _progress_shown(jobs, "held"), 30, "its progress shown")
        said = "cancelled held: it was running on w1, which stops it\n"
        assert await jobs("cancel", "held") == (0, said, "")
        with pytest.raises(JobCancelled):
            await handle.result(timeout=30)
        await eventually(lambda: "held was cancelled" in worker.log_text(), 30, "the stop logged")
        assert not await jobs.listed(JobState.RUNNING)
        code, _, err = await jobs("cancel", "held")
        assert code == 1 and "over already" in err
        assert await worker.signal(15) == 0


async def _progress_shown(jobs: Jobs, key: str) -> bool:
    return bool((await jobs.shown(key))["progress"] == {"step": "waiting"})


@pytest.mark.slow
async def test_dead_jobs_are_listed_retried_and_purged(
    tmp_path: Path,
    forum_node: NodeProcess,
    redis_url: str,
    marks: Path,
    client_app: App,
    jobs: Jobs,
) -> None:
    (marks / "fail-x").touch()
    (marks / "fail-y").touch()
    async with worker_processes(tmp_path) as started:
        worker = worker_of(tmp_path / "w1", forum_node, redis_url, marks)
        started.append(worker)
        await worker.start()
        x = await client_app.enqueue("flaky", "x", _key="flaky-x")
        y = await client_app.enqueue("flaky", "y", _key="flaky-y")
        for handle in (x, y):
            await eventually(_dead(handle), 30, f"{handle.key} dead")
        dead = await jobs.listed(JobState.DEAD)
        assert sorted(job["key"] for job in dead) == ["flaky-x", "flaky-y"]
        assert all("RuntimeError" in job["error"] for job in dead)
        code, out, _ = await jobs("show", "flaky-x")
        assert code == 0 and "traceback:" in out and "x is told to fail" in out
        # Every dead letter, as `forum dead list` showed them: the traceback
        # on lines of its own, as Python printed it (it was one escaped line).
        code, out, _ = await jobs("list", "--raw")
        assert code == 0
        lines = out.splitlines()
        assert "  Traceback (most recent call last):" in lines
        assert "  RuntimeError: x is told to fail" in lines
        code, out, _ = await jobs("list", "--raw", "--limit", "1")
        assert out.splitlines()[-1] == "(the first 1 shown; more: --limit)"
        assert out.count("Traceback (most recent call last)") == 1

        # A dead job retried once what failed it is mended: it runs again and is done.
        (marks / "fail-x").unlink()
        assert await jobs("retry", "flaky-x") == (0, "requeued flaky-x\n", "")
        assert await x.result(timeout=30) == "x ok"
        code, _, err = await jobs("retry", "flaky-x")
        assert code == 1 and "is done, not dead" in err

        # Purging takes the dead one left out of the space and its record out of the
        # Lens: it is not found any more, nor listed, and there is nothing to retry.
        assert await jobs("purge") == (0, "purged 1 dead jobs\n", "")  # dead: the default
        async with ForumClient(forum_node.url) as space:
            assert await space.count(Pattern(app.dead_prefix + app.prefix)) == 0
        assert await jobs.listed(JobState.DEAD) == []
        code, _, err = await jobs("show", "flaky-y")
        assert code == 1 and "flaky-y" in err
        code, _, err = await jobs("retry", "flaky-y")
        assert code == 1 and "no job with key 'flaky-y'" in err
        assert await jobs("purge", "--state", "dead") == (0, "purged 0 dead jobs\n", "")
        assert await worker.signal(15) == 0


def _dead(handle: JobHandle) -> Callable[[], Awaitable[bool]]:
    async def dead() -> bool:
        return (await handle.status()).state is JobState.DEAD

    return dead


async def test_jobs_list_as_a_table_from_the_console_script(
    forum_node: NodeProcess, redis_url: str, client_app: App
) -> None:
    await client_app.enqueue("echo", 1, _key="later", _delay=3600)
    code, out, err = await run_forum(
        "jobs", "list", "--app", SPEC, "--node", forum_node.url, "--redis-url", redis_url,
        cwd=REPO,
    )  # fmt: skip
    assert code == 0, err
    header, row, count = out.splitlines()
    assert header.split() == ["KEY", "TASK", "STATE", "ATTEMPT", "WORKER", "WHEN", "ERROR"]
    assert row.split()[:3] == ["later", "echo", "delayed"] and "due 20" in row
    assert count == "(1 job, newest first)"


async def test_a_worker_warns_loudly_of_a_redis_that_forgets(
    tmp_path: Path, forum_node: NodeProcess, volatile_redis: RedisServer, marks: Path
) -> None:
    """A Redis without AOF: the worker says so at start, in capitals, and runs."""
    async with worker_processes(tmp_path) as started:
        worker = worker_of(tmp_path / "w1", forum_node, volatile_redis.url, marks)
        started.append(worker)
        await worker.start()
        await eventually(lambda: "running tests.tasks.test_cli_jobs" in worker.log_text(), 30)
        assert await worker.signal(15) == 0
    warned = [line for line in worker.log_text().splitlines() if "WARNING: Redis" in line]
    assert len(warned) == 1, worker.log_text()
    assert warned[0].startswith("forum worker: WARNING: Redis ")
    assert "appendonly 'no'" in warned[0]


def test_each_setting_is_the_flags_else_the_environments_else_the_apps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    own = App("http://10.0.0.1:7070,http://10.0.0.2:7070", "redis://10.0.0.9:6379/2",
              token="app-secret", namespace="app-ns")  # fmt: skip
    for name in ("FORUM_NODE", "FORUM_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    none = argparse.Namespace(node=None, redis_url=None, namespace=None, token=None)
    assert Where.of(none, own) == Where(
        "http://10.0.0.1:7070", "redis://10.0.0.9:6379/2", "app-ns", "app-secret"
    )
    monkeypatch.setenv("FORUM_NODE", "http://10.0.0.3:7070")
    monkeypatch.setenv("FORUM_REDIS_URL", "redis://10.0.0.8:6379/0")
    assert Where.of(none, own) == Where(
        "http://10.0.0.3:7070", "redis://10.0.0.8:6379/0", "app-ns", "app-secret"
    )
    flags = argparse.Namespace(
        node="http://10.0.0.4:7070", redis_url="redis://10.0.0.7:6379/1", namespace="ns",
        token="flag-secret",
    )  # fmt: skip
    assert Where.of(flags, own) == Where(
        "http://10.0.0.4:7070", "redis://10.0.0.7:6379/1", "ns", "flag-secret"
    )
    monkeypatch.setenv("FORUM_NODE", "10.0.0.3:7070")
    with pytest.raises(UsageError, match=r"^\$FORUM_NODE: .*http://"):
        Where.of(none, own)


# -- mistakes: one line each -------------------------------------------------------


def _worker(*more: str) -> list[str]:
    return ["worker", "--node", f"http://127.0.0.1:{free_port()}", "--redis-url",
            "redis://127.0.0.1:1/0", "--no-progress", "--app-dir", str(REPO), *more]  # fmt: skip


@pytest.mark.parametrize(
    ("more", "names"),
    [
        (["--app", "tests.tasks.no_such_module:app"], ["--app", "not found"]),
        (["--app", "tests.tasks.test_cli_jobs:nope"], ["--app", "has no 'nope'"]),
        (["--app", "tests.tasks.test_cli_jobs:NOT_AN_APP"], ["a dict, not a task app"]),
        (["--app", "tests.tasks.test_cli_jobs:EMPTY_APP"], ["the app has no tasks"]),
        (["--app", "tests.tasks.test_cli_jobs:BROKEN_APP"], ["task 'broken' is not callable"]),
        (["--app", SPEC, "--handler", "m:h"], ["--app", "--handler"]),
        ([], ["--app", "--handler"]),
        (["--handler", "examples.handlers.fenced_redis:open_handler"], ["needs --prefix"]),
        (["--app", SPEC, "--prefix", "x/", "--backoff", "2"], ["--prefix, --backoff", "not with"]),
        (["--app", SPEC], ["--redis-url", "Redis is not reachable"]),
        (["--app", SPEC, "--max-attempts", "3"], ["--max-attempts 3", "task 'echo'", "4 attempts"]),
    ],
)
def test_a_bad_worker_app_is_one_line_and_exit_2(
    more: list[str], names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert_usage_error(run_main(_worker(*more), capsys), "forum worker", *names)


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["jobs", "list", "--state", "lost"], ["--state", "invalid choice"]),
        (["jobs", "list", "--limit", "0"], ["--limit", "at least 1"]),
        (["jobs", "purge", "--state", "queued"], ["--state", "invalid choice"]),
        (["jobs", "retry", "a", "b"], ["forum jobs retry", "one KEY"]),
        (["jobs", "list", "--dead-prefix", "d/"], ["--dead-prefix is for --raw"]),
        (["jobs", "list", "--raw", "--state", "dead"], ["--raw", "not with --state"]),
        (["jobs", "show", "bad\nkey"], ["forum jobs show", "key"]),
        (["jobs", "list", "--app", "tests.tasks.test_cli_jobs:NOT_AN_APP"], ["not a task app"]),
    ],
)
def test_bad_jobs_arguments_are_one_line_and_exit_2(
    argv: list[str], names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--node", f"http://127.0.0.1:{free_port()}", "--app-dir", str(REPO)]
    assert_usage_error(run_main([*argv, *where], capsys), *names)


def test_jobs_without_a_node_or_redis_is_one_line_and_exit_3(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_main(
        ["jobs", "show", "k", "--node", f"http://127.0.0.1:{free_port()}",
         "--redis-url", "redis://127.0.0.1:1/0"],
        capsys,
    )  # fmt: skip
    assert (code, out) == (3, "")
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
