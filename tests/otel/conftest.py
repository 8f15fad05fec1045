"""The tracing tests' fixtures: an SDK tracer provider recording into memory
(``spans``), set as the process's for one test and taken away after it, so
no other test runs traced; the task layer's node and Redis (``make_app``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from forum.node.core import tracing
from tests.tasks.conftest import make_app

__all__ = ["make_app", "named", "spans"]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """What this test's spans were, once ended (the SDK's in-memory exporter)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _unset()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        _unset()


def _unset() -> None:
    """No provider set, as in a process that never set one (OpenTelemetry's
    globals are set once per process: its own tests reset them so), and
    Forum's tracer forgotten with it."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    tracing._tracer = None


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The ended spans called ``name``, in the order they started."""
    found = [span for span in exporter.get_finished_spans() if span.name == name]
    return sorted(found, key=lambda span: span.start_time or 0)
