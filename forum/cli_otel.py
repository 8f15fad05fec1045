"""``--otel`` of ``forum serve`` and ``forum worker``: export traces over OTLP.

The flag sets up the OpenTelemetry SDK's tracer provider with its OTLP/HTTP
exporter (:func:`forum.node.core.tracing.export_otlp`; where to, from the
standard ``OTEL_EXPORTER_OTLP_*`` variables) before the node's app or the
worker is made, and shuts it down at exit, which sends the spans still
batched. Without the ``otel`` extra, the flag is one line's usage error.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from forum.cli_args import UsageError
from forum.node.core.errors import TracingUnavailable
from forum.node.core.tracing import export_otlp


def add_otel(parser: argparse.ArgumentParser) -> None:
    """The ``--otel`` switch."""
    parser.add_argument(
        "--otel",
        action="store_true",
        default=False,
        help="export traces over OTLP/HTTP to $OTEL_EXPORTER_OTLP_ENDPOINT (default "
        "http://localhost:4318; needs pip install 'forum[otel]'; docs/tracing.md)",
    )


@asynccontextmanager
async def otel_export(args: argparse.Namespace, service: str) -> AsyncIterator[None]:
    """With ``--otel``: traces exported as ``service`` while the body runs, the
    last of them sent as it ends; without: nothing."""
    if not args.otel:
        yield
        return
    try:
        provider = export_otlp(service)
    except TracingUnavailable as exc:
        raise UsageError(str(exc)) from None
    try:
        yield
    finally:
        await asyncio.to_thread(provider.shutdown)  # an HTTP post: not on the loop
