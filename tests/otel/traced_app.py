"""The app ``tests/otel/test_collector.py`` runs in a ``forum worker --otel``."""

from __future__ import annotations

from forum.tasks import App, Context

app = App(prefix=b"otel-test/")


@app.task
async def echo(ctx: Context, text: str) -> str:
    return text
