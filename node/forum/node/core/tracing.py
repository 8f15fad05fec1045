"""Tracing with OpenTelemetry, optional: every part's spans start here.

Tracing is on when the OpenTelemetry API is installed (``pip install
'forum[otel]'``) *and* a tracer provider is set: the program's own
(``opentelemetry.trace.set_tracer_provider``), as with every OpenTelemetry
instrumentation, or the one :func:`export_otlp` sets up for ``forum serve
--otel`` and ``forum worker --otel``. Otherwise :func:`tracer` is ``None``
and each caller skips its span: no span objects, no context copied into a
job (docs/tracing.md).

What it costs when off: without the package, a module global read per call
(the failed import is remembered); with the package and no provider, a read
of the API's provider global too (~0.1 µs), until a provider is set (a
provider is set once per process, so the tracer found is kept).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from forum.node.core.errors import TracingUnavailable
from forum.node.core.version import installed_version

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

#: The instrumentation scope of every span, and ``messaging.system``'s value.
SCOPE = "forum"
#: What to install for tracing: said by :class:`TracingUnavailable`.
EXTRA = "pip install 'forum[otel]'"

#: Whether the environment names a provider for the API to load
#: (OpenTelemetry's auto-instrumentation): then its public call decides.
_BY_ENVIRONMENT = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
#: ``opentelemetry.trace`` once imported; ``False`` when it is not installed.
_api: Any = None
#: The tracer, once a provider is set.
_tracer: Tracer | None = None


def tracer() -> Tracer | None:
    """Forum's tracer, or ``None`` while tracing is off (see the module docstring)."""
    if _tracer is not None:
        return _tracer
    return _find_tracer()


def _find_tracer() -> Tracer | None:
    global _api, _tracer
    if _api is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _api = False
            return None
        _api = trace
    if _api is False:
        return None
    if getattr(_api, "_TRACER_PROVIDER", _api) is None and not _BY_ENVIRONMENT:
        # None set: known from the API's global in ~0.1 µs, where its public
        # get_tracer_provider() looks in os.environ each time (~2 µs a job).
        return None
    provider = _api.get_tracer_provider()
    if isinstance(provider, _api.ProxyTracerProvider | _api.NoOpTracerProvider):
        return None  # none set: the API's stand-ins record nothing
    _tracer = provider.get_tracer(SCOPE, installed_version())
    return _tracer


def carrier() -> dict[str, str] | None:
    """The current span's context as W3C Trace Context fields
    (``traceparent``, and ``tracestate`` when set), to carry in a job or a
    request's headers; ``None`` while tracing is off or no span is current."""
    if tracer() is None:
        return None
    from opentelemetry.propagate import inject

    fields: dict[str, str] = {}
    inject(fields)
    return fields or None


def parent_of(fields: Mapping[str, str] | None) -> Context | None:
    """The context carried in ``fields`` (:func:`carrier`'s), to parent a
    span on; ``None`` when there are none."""
    if not fields:
        return None
    from opentelemetry.propagate import extract

    return extract(fields)


def export_otlp(service: str) -> TracerProvider:
    """Set up an SDK tracer provider exporting over OTLP/HTTP in batches,
    as the ``OTEL_EXPORTER_OTLP_*`` variables say (default
    ``http://localhost:4318``), named ``service`` unless ``OTEL_SERVICE_NAME``
    names it; the caller shuts it down at exit (which sends what is left).
    :class:`TracingUnavailable` without the ``otel`` extra."""
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(f"--otel needs the otel extra ({EXTRA}): {exc}") from None
    named = "OTEL_SERVICE_NAME" in os.environ
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider
