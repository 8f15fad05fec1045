"""Traces exported over OTLP to a real OpenTelemetry Collector
(``forum-otelcol``, built by scripts/install-tools from scripts/otelcol:
the OTLP receiver and the file exporter), from a ``forum serve --otel`` and a
``forum worker --otel``, and read back from the collector's file: the
worker's run span continues the trace this process's enqueue began, and the
node's request span the trace of the request that reached it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from forum.deploy.processes import Service, find_binary
from forum.node.client.remote import ForumClient
from tests.coordinator.harness import WorkerProcess, worker_processes
from tests.fixtures.nodes import ForumNodes, eventually
from tests.otel.conftest import named
from tests.otel.traced_app import app as traced_app

pytestmark = pytest.mark.slow

COLLECTOR = "forum-otelcol"
CONFIG = """\
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
exporters:
  file:
    path: {path}
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
"""


class Collector(Service):
    """``forum-otelcol`` receiving OTLP/HTTP on ``port``, writing each
    request's spans as a JSON line to ``spans``."""

    def __init__(self, root: Path) -> None:
        super().__init__("collector", root)
        self.spans = self.root / "spans.jsonl"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        config = self.root / "collector.yaml"
        config.write_text(CONFIG.format(port=self.port, path=self.spans))
        return [find_binary(COLLECTOR), "--config", str(config)]

    async def ready(self) -> bool:
        try:  # any answer (404 here) is the receiver listening
            async with aiohttp.ClientSession() as session, session.get(self.endpoint):
                return True
        except aiohttp.ClientError:
            return False


@asynccontextmanager
async def _collector(root: Path) -> AsyncIterator[Collector]:
    """A running collector (its absence fails the test: CI installs it)."""
    collector = Collector(root)
    try:
        await collector.start()
        yield collector
    finally:
        await collector.stop()


def exported(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each span the collector wrote (OTLP JSON, a request a line), with its
    resource's ``service.name``."""
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        for resource in json.loads(line).get("resourceSpans", []):
            attributes = resource.get("resource", {}).get("attributes", [])
            service = next(
                (a["value"]["stringValue"] for a in attributes if a["key"] == "service.name"), ""
            )
            for scope in resource.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    yield service, span


def _attribute(span: dict[str, Any], key: str) -> object:
    for attribute in span.get("attributes", []):
        if attribute["key"] == key:
            return next(iter(attribute["value"].values()))
    return None


async def test_a_node_and_a_worker_export_their_spans_to_a_collector(
    forum_nodes: ForumNodes, redis_url: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async with _collector(tmp_path) as collector:
        path = collector.spans
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        node = await forum_nodes.start("n1", "--otel", env=env)

        # A request over HTTP carries this process's span: the node's is its child.
        tracer = trace.get_tracer("tests.otel")
        async with ForumClient(node.url, transport="http") as client:
            with tracer.start_as_current_span("caller") as caller:
                await client.write(b"plain/1")
        want = f"{caller.get_span_context().span_id:016x}"

        def request_span() -> dict[str, Any] | None:
            return next(
                (s for service, s in exported(path)
                 if service == "forum-node" and s.get("parentSpanId") == want), None,
            )  # fmt: skip

        await eventually(request_span, what="the node's span of the write")
        served = request_span()
        assert served is not None and served["name"] == "POST /v1/tuples"
        assert served["traceId"] == f"{caller.get_span_context().trace_id:032x}"
        assert _attribute(served, "http.response.status_code") == "201"  # an int: a string

        # A job enqueued here, run by a `forum worker --otel`: one trace.
        async with worker_processes(tmp_path) as started:
            worker = WorkerProcess(
                "w1", tmp_path / "w1",
                ["--app", "tests.otel.traced_app:app", "--node", node.url,
                 "--redis-url", redis_url, "--take-wait", "0.2", "--otel"],
                env,
            )  # fmt: skip
            started.append(worker)
            await worker.start()
            async with traced_app.using(nodes=node.url, redis=redis_url) as app:
                handle = await app.enqueue("echo", "hello", _key="e1")
                assert await handle.result(timeout=30) == "hello"
            (enqueue,) = named(spans, "forum.enqueue echo")
            assert enqueue.context is not None
            trace_id = f"{enqueue.context.trace_id:032x}"

            def run_span() -> dict[str, Any] | None:
                return next(
                    (s for service, s in exported(path)
                     if service == "forum-worker" and s["traceId"] == trace_id), None,
                )  # fmt: skip

            await eventually(run_span, what="the worker's run span at the collector")
            run = run_span()
            assert run is not None and run["name"] == "forum.run echo"
            assert run["parentSpanId"] == f"{enqueue.context.span_id:016x}"
            assert _attribute(run, "forum.job.outcome") == "done"
            assert _attribute(run, "forum.worker") == "w1"
            assert await worker.signal(15) == 0
