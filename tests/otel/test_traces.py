"""The trace of a job, from its enqueue through each attempt, recorded with
the SDK's in-memory exporter: a real node and Redis, the worker in this
process (the trace's shape is the task layer's, wherever its worker runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from forum.coordinator import Backoff
from forum.node.core.space import Pattern
from forum.tasks import Context
from tests.coordinator.harness import REPO
from tests.fixtures.nodes import eventually
from tests.otel.conftest import named
from tests.tasks.conftest import AppFactory, working

QUICK = Backoff(base=0.01, cap=0.02, jitter=0.0)


def _busy() -> str:
    raise OSError("disk busy")


async def _nothing(ctx: Context) -> None:
    return None


async def test_a_job_is_one_trace_from_enqueue_to_its_run(
    make_app: AppFactory, spans: InMemorySpanExporter
) -> None:
    app = make_app()

    @app.task(queue="mail")
    async def send(ctx: Context, to: str) -> str:
        return f"sent to {to}"

    async with app:
        handle = await send.enqueue("ada", _key="m1")
        async with working(app) as workers:
            assert await handle.result(timeout=15) == "sent to ada"
            await eventually(lambda: named(spans, "forum.run send"), what="the run span")
    (enqueue,) = named(spans, "forum.enqueue send")
    (run,) = named(spans, "forum.run send")
    assert enqueue.kind == SpanKind.PRODUCER and run.kind == SpanKind.CONSUMER
    assert enqueue.context is not None and run.context is not None and run.parent is not None
    assert run.context.trace_id == enqueue.context.trace_id
    assert run.parent.span_id == enqueue.context.span_id  # the context rode in the job
    assert dict(enqueue.attributes or {}) == {
        "messaging.system": "forum", "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue", "forum.task": "send",
        "messaging.message.id": "m1", "messaging.destination.name": "mail",
    }  # fmt: skip
    attributes = dict(run.attributes or {})
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.destination.name"] == "mail"
    assert attributes["messaging.message.id"] == "m1"
    assert attributes["forum.job.attempt"] == 1
    assert attributes["forum.worker"] == workers[0].owner
    assert attributes["forum.job.outcome"] == "done"
    assert [event.name for event in run.events] == ["forum.claimed"]
    assert run.status.status_code == StatusCode.UNSET


async def test_a_retried_job_has_a_run_span_per_attempt(
    make_app: AppFactory, spans: InMemorySpanExporter
) -> None:
    app = make_app()

    @app.task(retries=2, backoff=QUICK)
    async def flaky(ctx: Context) -> str:
        return "ok" if ctx.attempt > 1 else _busy()

    async with app:
        handle = await flaky.enqueue(_key="f1")
        async with working(app):
            assert await handle.result(timeout=15) == "ok"
            await eventually(lambda: len(named(spans, "forum.run flaky")) == 2, what="2 runs")
    (enqueue,) = named(spans, "forum.enqueue flaky")
    first, second = named(spans, "forum.run flaky")
    assert enqueue.context is not None
    for run in (first, second):  # both children of the one enqueue
        assert run.parent is not None and run.parent.span_id == enqueue.context.span_id
    assert [run.attributes and run.attributes["forum.job.attempt"] for run in (first, second)] == [
        1,
        2,
    ]
    assert first.attributes and first.attributes["forum.job.outcome"] == "retrying"
    assert first.status.status_code == StatusCode.ERROR
    assert first.status.description == "OSError: disk busy"
    assert [event.name for event in first.events] == ["forum.claimed", "exception"]
    assert second.attributes and second.attributes["forum.job.outcome"] == "done"


async def test_a_job_that_gives_up_ends_its_span_dead(
    make_app: AppFactory, spans: InMemorySpanExporter
) -> None:
    app = make_app()

    @app.task(retries=0)
    def broken(ctx: Context) -> None:
        raise ValueError("no such order")

    async with app:
        await broken.enqueue(_key="b1")
        async with working(app):
            await eventually(lambda: named(spans, "forum.run broken"), what="the run span")
    (run,) = named(spans, "forum.run broken")
    assert run.attributes and run.attributes["forum.job.outcome"] == "dead"
    assert run.status.description == "ValueError: no such order"


async def test_enqueue_many_is_one_span_every_job_run_its_child(
    make_app: AppFactory, spans: InMemorySpanExporter
) -> None:
    app = make_app()

    @app.task
    async def add(ctx: Context, a: int, b: int) -> int:
        return a + b

    async with app:
        handles = await app.enqueue_many([add.s(1, 2), add.s(3, 4)])
        async with working(app):
            assert [await h.result(timeout=15) for h in handles] == [3, 7]
            await eventually(lambda: len(named(spans, "forum.run add")) == 2, what="2 runs")
    (batch,) = named(spans, "forum.enqueue_many")
    assert batch.kind == SpanKind.PRODUCER and batch.context is not None
    assert batch.attributes and batch.attributes["messaging.batch.message_count"] == 2
    for run in named(spans, "forum.run add"):
        assert run.parent is not None and run.parent.span_id == batch.context.span_id


async def test_without_a_provider_nothing_is_traced_nor_carried(make_app: AppFactory) -> None:
    app = make_app()
    app.task("plain")(_nothing)
    async with app:
        await app.enqueue("plain", _key="p1")
        payload = await app.space.read(Pattern(app.prefix))
    assert payload is not None and b"trace" not in payload  # the job as before


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--data-dir", "/nonexistent/forum-otel-test"],
        ["worker", "--app", "tests.otel.traced_app:app", "--app-dir", str(REPO),
         "--redis-url", "redis://127.0.0.1:9/0", "--node", "http://127.0.0.1:9"],
    ],
    ids=["serve", "worker"],
)  # fmt: skip
def test_otel_without_the_extra_is_one_line(command: list[str]) -> None:
    # A process where opentelemetry cannot be imported, as without the extra.
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from forum.cli import main\n"
        "sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *command, "--otel"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"forum {command[0]}: --otel needs the otel extra (pip install 'forum[otel]'): "
        "import of opentelemetry halted; None in sys.modules"
    ]
