"""The demo workload's handler: what ``forum cluster demo`` runs on every worker.

``forum worker --handler forum.deploy.demo:open_handler`` with ``FORUM_SINK_URL``
set (the launcher does that). Each job's payload is its name; the handler
records the delivery, does its "work" (``FORUM_DEMO_WORK_MS`` milliseconds,
default 5), verifies its claim right before the irreversible step, and applies
the effect in the :class:`~forum.deploy.sink.EffectSink` under its fencing token.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

from forum.coordinator import Handler, Job
from forum.deploy.sink import EffectSink

SINK_URL_ENV = "FORUM_SINK_URL"
WORK_MS_ENV = "FORUM_DEMO_WORK_MS"


@contextlib.asynccontextmanager
async def open_handler() -> AsyncIterator[Handler]:
    work = float(os.environ.get(WORK_MS_ENV, "5")) / 1000
    async with EffectSink.from_url(os.environ[SINK_URL_ENV]) as sink:

        async def handle(job: Job) -> None:
            name = job.payload.decode()
            await sink.delivered(name)
            await asyncio.sleep(work)
            await job.verify()  # right before the irreversible step
            await sink.apply(name, job.key, job.token)

        yield handle
