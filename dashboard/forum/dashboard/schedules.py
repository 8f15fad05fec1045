"""The dashboard's Schedules panel: each periodic task of every app using the
Lens, with its schedule, next slot, last run and missed slots.

=========================  ================================================
``GET /ui/schedules``      every periodic task (forum.tasks.schedules)
=========================  ================================================

The node runs no app's code, so it cannot compute an app's slots; the
workers' periodic loops publish them into the Lens's Redis as they write
them (:mod:`forum.tasks.schedules`), and this panel reads that registry: one
sorted set, one pipeline of the tasks' records, one ``inspect`` of each
task's last slot. Loaded only with ``--lens-url`` (a node-only install has
no task layer).
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from forum.dashboard.keys import lens_view
from forum.dashboard.lensview import FAILURES
from forum.tasks.schedules import read_schedules


async def schedules_page(request: web.Request) -> dict[str, Any]:
    """The panel's values: the tasks' rows, and the time they were read at."""
    now = time.time()
    values: dict[str, Any] = {"schedules": [], "now": now}
    view = lens_view(request)
    if view is not None:
        try:
            values["schedules"] = await read_schedules(view.lens, now)
        except FAILURES as exc:
            values["error"] = str(exc)
    return values
