"""The Jobs page's bulk actions: retry, cancel or delete the jobs selected.

``POST /ui/jobs/bulk?action=retry&key=a&key=b&back=...`` does ``action`` to
each key, one after the other, each through the task layer's own call and
checks (``app.retry``, ``app.cancel``, :func:`forum.tasks.admin.purge_job`),
and answers 303 to the listing it came from (``back``: its query string),
saying each key's outcome in ``?message=``, counted: ``3 retried, 1 was not
dead (k4)``. A key's failure is its own outcome; the others are still done.
Like every dashboard action it passes the node's middleware: the read token
gets 403 and nothing is done (forum.dashboard.jobs).

Its input is the query string, as every node route's without a body: the
page's script puts the ticked keys there (forum.dashboard's dashboard.js).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import parse_qsl, urlencode

from aiohttp import web

from forum.dashboard.keys import lens_view
from forum.dashboard.lensview import FAILURES
from forum.node.http.bodies import bad_request
from forum.tasks import App, InvalidJob, JobNotFound
from forum.tasks.admin import purge_job
from forum.tasks.message import check_key

__all__ = ["BULK", "MOST", "bulk", "said"]

#: The most keys one bulk action takes (a page of the listing at its largest).
MOST = 500
#: How many keys of an outcome other than the action's own the message names.
NAMED = 5


async def _retry(app: App, key: str) -> str:
    try:
        await app.retry(key)
    except InvalidJob:  # no dead letter: the job is not dead
        return "was not dead"
    return "retried"


async def _cancel(app: App, key: str) -> str:
    outcome = await app.cancel(key)
    return "cancelled" if outcome.state == "cancelled" else "was over already"


async def _delete(app: App, key: str) -> str:
    return "deleted" if await purge_job(app, key) else "was not dead or done"


#: Each action: what it does to one key, the outcome it names when done.
BULK: dict[str, Callable[[App, str], Awaitable[str]]] = {
    "retry": _retry,
    "cancel": _cancel,
    "delete": _delete,
}


def said(action: str, outcomes: Sequence[tuple[str, str]]) -> str:
    """The flash line of ``(key, outcome)`` pairs: each outcome counted, in
    the order first met, the action's own first; the keys of the others
    named (the first :data:`NAMED` of each)."""
    done = {"retry": "retried", "cancel": "cancelled", "delete": "deleted"}[action]
    counts = Counter(outcome for _, outcome in outcomes)
    order = sorted(counts, key=lambda outcome: outcome != done)
    parts = []
    for outcome in order:
        part = f"{counts[outcome]} {outcome}"
        if outcome != done:
            keys = [key for key, o in outcomes if o == outcome]
            more = f", +{len(keys) - NAMED}" if len(keys) > NAMED else ""
            part += f" ({', '.join(keys[:NAMED])}{more})"
        parts.append(part)
    return ", ".join(parts) or f"{action}: no job selected"


async def bulk(request: web.Request) -> web.StreamResponse:
    """Do ``?action=`` to every ``?key=``; 400 for no such action, no key or
    too many, and nothing done."""
    query = request.query
    action = query.get("action", "")
    keys = list(dict.fromkeys(k for k in query.getall("key", []) if k))
    if action not in BULK:
        raise bad_request("invalid_parameter", f"action: one of {', '.join(BULK)}, not {action!r}")
    if not keys:
        raise bad_request("invalid_parameter", "key: tick at least one job")
    if len(keys) > MOST:
        raise bad_request("invalid_parameter", f"key: at most {MOST} jobs at once, not {len(keys)}")
    view = lens_view(request)
    if view is None:
        raise web.HTTPConflict(text="no Lens configured: start the node with --lens-url\n")
    outcomes: list[tuple[str, str]] = []
    try:
        scoped = await view.scoped(query.get("app", ""))
    except FAILURES as exc:
        message = f"{action}: nothing done: {exc}"
    else:
        for key in keys:
            try:
                check_key(key)
            except InvalidJob:
                outcomes.append((key, "is no job's key"))
                continue
            try:
                app = await view.job_app(key, scoped)  # of every app's: the job's own
                outcomes.append((key, await BULK[action](app, key)))
            except JobNotFound:
                outcomes.append((key, "not found"))
            except FAILURES as exc:
                outcomes.append((key, f"failed: {exc}"))
        message = said(action, outcomes)
    # The listing's own query, but for an earlier action's message.
    back = [(k, v) for k, v in parse_qsl(query.get("back", "")) if k != "message"]
    raise web.HTTPSeeOther(f"../jobs?{urlencode([*back, ('message', message)])}")
