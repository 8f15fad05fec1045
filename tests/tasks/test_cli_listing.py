"""``forum jobs list`` and ``forum jobs purge`` as a user reads them: whole
keys, newest first, the true total, ``--task``, only the app's own jobs, and
done results purged; against a real node and Redis, the worker in this
process. The app is :data:`tests.tasks.test_cli_jobs.app` (``SPEC``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from forum.tasks import App, Context, JobState
from tests.fixtures.nodes import NodeProcess
from tests.tasks.conftest import working
from tests.tasks.test_cli_jobs import Jobs, app

#: Another app on the same Lens: its jobs are not the CLI app's.
other = App(prefix=b"other-app/")


@other.task
async def elsewhere(ctx: Context, n: int) -> int:
    return n


@pytest.fixture
def cli(forum_node: NodeProcess, redis_url: str, capsys: pytest.CaptureFixture[str]) -> Jobs:
    return Jobs(forum_node, redis_url, capsys)


@pytest.fixture
async def producer(forum_node: NodeProcess, redis_url: str) -> AsyncIterator[App]:
    async with app.using(nodes=forum_node.url, redis=redis_url) as opened:
        yield opened


async def test_the_listing_shows_whole_keys_newest_first_and_how_many_there_are(
    forum_node: NodeProcess, redis_url: str, producer: App, cli: Jobs
) -> None:
    """It cut keys with "…" (not pasteable into ``jobs show``), had no order,
    said "(100 jobs)" of 1,187, and listed other apps' jobs."""
    long_key = "order:" + "7" * 80
    for key in ("first", long_key, "third"):  # delayed: each has its record at once
        await producer.enqueue("echo", key, _key=key, _delay=3600)
    await producer.enqueue("touch", "t", _key="touched", _delay=3600)
    async with other.using(nodes=forum_node.url, redis=redis_url) as elsewhere_app:
        await elsewhere_app.enqueue("elsewhere", 1, _key="not-ours", _delay=3600)

    code, out, err = await cli("list")
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == ["touched", "third", long_key, "first"]
    assert "…" not in out and "not-ours" not in out
    assert lines[-1] == "(4 jobs, newest first)"

    code, out, _ = await cli("list", "--limit", "2")
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == ["touched", "third"]
    assert lines[-1] == "(2 of 4 jobs, newest first; more: --limit)"

    code, out, _ = await cli("list", "--task", "echo", "--json")
    assert code == 0
    assert out.count('"task": "echo"') == 3 and "touched" not in out
    code, out, _ = await cli("list", "--task", "no-such-task")
    assert out.splitlines()[-1] == "(0 jobs, newest first)"


async def test_done_results_are_purged_and_the_job_still_says_done(
    producer: App, cli: Jobs
) -> None:
    handle = await producer.enqueue("echo", {"n": 1}, _key="done-1")
    async with working(producer):
        assert await handle.result(timeout=30) == {"n": 1}
    assert (await cli.shown("done-1"))["result"] == {"n": 1}

    assert await cli("purge", "--state", "done") == (0, "purged 1 results of done jobs\n", "")
    shown = await cli.shown("done-1")
    # The done marker stays: a copy of the job is still turned away, not run again.
    assert (shown["state"], shown["result"]) == (JobState.DONE.value, None)
    assert await cli("purge", "--state", "done") == (0, "purged 0 results of done jobs\n", "")


async def test_the_listing_searches_arguments_keys_and_a_time_range(
    producer: App, cli: Jobs
) -> None:
    for key, name in (("img-1", "Photo.PNG"), ("img-2", "scan.pdf"), ("doc-1", "photo.png")):
        await producer.enqueue("echo", name, _key=key, _delay=3600)

    code, out, err = await cli("list", "--search", "photo.png")
    assert code == 0, err
    lines = out.splitlines()
    assert sorted(line.split()[0] for line in lines[1:-1]) == ["doc-1", "img-1"]
    assert lines[-1] == "(2 found, newest first)"
    code, out, _ = await cli("list", "--key", "img-", "--search", "photo")
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["img-1"]
    # A delayed job is placed by when it is due: an hour from now.
    code, out, _ = await cli("list", "--until", "2000-01-01T00:00")
    assert out.splitlines()[-1] == "(0 found, newest first)"  # over the app's tasks: no count
    code, out, _ = await cli("list", "--since", "2000-01-01T00:00+00:00", "--json")
    assert out.count('"key"') == 3
    code, _, err = await cli("list", "--since", "yesterday")
    assert code == 2 and "'yesterday' is neither Unix seconds nor an ISO 8601 time" in err
