"""The dashboard's Jobs and Workers panels, and the job actions' routes.

=========================  ================================================
``GET /ui/jobs``           jobs by ``?state=`` and key ``?prefix=``;
                           ``?key=`` opens that job's page
``GET /ui/job?key=K``      a job: payload, state, attempts, worker, error,
                           result, claim history; its actions. A raw
                           Worker's job (no task record) by its claim key:
                           its claim, done marker and history
``POST /ui/job/retry``     ``?key=``: requeue a dead job (``app.retry``)
``POST /ui/job/cancel``    ``?key=``: cancel a job not running
``POST /ui/jobs/act``      ``?action=`` (retry, cancel), ``state``,
                           ``prefix``: the same, for every job the filter finds
``GET /ui/jobs/purge``     asks to confirm purging the dead
``POST /ui/jobs/purge``    ``?confirm=yes``: purge them (``app.purge``)
``GET /ui/workers``        the workers' presence records
=========================  ================================================

Every action is the task layer's own call, with its checks (a job that
cannot be retried or cancelled says why, and nothing changes). The POSTs
pass the node's middleware like any API call: the full token only (a read
token gets 403), and a cookie-borne one only from the node's own pages
(forum.node.http.auth). An action answers 303 to the page it came from, with what
it did in ``?message=``; input no action can take (no key, no such action
or state, a purge not confirmed) is a 400 and nothing is done. Their input
is the query string, as every node route's without a body (forum.node.http.app
refuses a body it does not read).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from forum.dashboard.keys import lens_view
from forum.dashboard.lensview import FAILURES, LensView
from forum.node.http.bodies import bad_request
from forum.tasks import InvalidJob, JobNotFound, JobState

#: The states a listing may be filtered by, in the order of the page's menu.
STATES = tuple(state.value for state in JobState)


def _state(raw: str) -> JobState | None:
    if not raw:
        return None
    if raw not in STATES:
        raise ValueError(f"no job state {raw!r}: one of {', '.join(STATES)}")
    return JobState(raw)


async def jobs_page(request: web.Request) -> dict[str, Any]:
    """The listing's values (``key`` given: a redirect to its page)."""
    key = request.query.get("key", "").strip()
    if key:
        raise web.HTTPSeeOther(f"job?{urlencode({'key': key})}")
    state, prefix = request.query.get("state", ""), request.query.get("prefix", "")
    values: dict[str, Any] = {"state": state, "prefix": prefix, "states": STATES, "jobs": []}
    view = lens_view(request)
    if view is None:
        return values
    try:
        wanted = _state(state)
    except ValueError as exc:
        return values | {"error": str(exc), "http_status": 400}
    try:
        values["jobs"] = await view.jobs(wanted, prefix)
    except FAILURES as exc:
        values["error"] = str(exc)
    return values


async def job_page(request: web.Request) -> dict[str, Any]:
    """A job's values: a task job's, or a raw job's by its claim key (the
    page says which). A key no job can have is a 400, one nothing knows a
    404: the page says why either way."""
    key = request.query.get("key", "")
    values: dict[str, Any] = {"key": key, "job": None}
    view = lens_view(request)
    if view is not None:
        try:
            values["job"] = await view.job(key)
        except InvalidJob as exc:
            values |= {"error": str(exc), "http_status": 400}
        except JobNotFound:
            values |= {"error": f"no job {key!r}: no task, claim or history", "http_status": 404}
        except FAILURES as exc:
            values["error"] = str(exc)
    return values


async def workers_page(request: web.Request) -> dict[str, Any]:
    values: dict[str, Any] = {"workers": []}
    view = lens_view(request)
    if view is not None:
        try:
            values["workers"] = await view.workers()
        except FAILURES as exc:
            values["error"] = str(exc)
    return values


async def purge_page(request: web.Request) -> dict[str, Any]:
    """The confirmation step: how many dead jobs a purge would drop."""
    values: dict[str, Any] = {"dead": None}
    view = lens_view(request)
    if view is not None:
        try:
            values["dead"] = len(await view.jobs(JobState.DEAD, ""))
        except FAILURES as exc:
            values["error"] = str(exc)
    return values


def _key(request: web.Request) -> str:
    key = request.query.get("key", "")
    if not key:
        raise bad_request("invalid_parameter", "key: the job's key is needed")
    return key


async def retry(request: web.Request) -> web.StreamResponse:
    key = _key(request)
    view = _needed(request)
    try:
        await (await view.app()).retry(key)
        said = f"{key}: requeued"
    except FAILURES as exc:
        said = f"{key}: not requeued: {exc}"
    raise web.HTTPSeeOther(f"../job?{urlencode({'key': key, 'message': said})}")


async def cancel(request: web.Request) -> web.StreamResponse:
    key = _key(request)
    view = _needed(request)
    try:
        outcome = await (await view.app()).cancel(key)
        said = f"{key}: {_cancelled(outcome.state, outcome.owner)}"
    except FAILURES as exc:
        said = f"{key}: not cancelled: {exc}"
    raise web.HTTPSeeOther(f"../job?{urlencode({'key': key, 'message': said})}")


def _cancelled(state: str, owner: str | None) -> str:
    if state == "cancelled":
        return f"cancelled (it was running on {owner}: stopped)" if owner else "cancelled"
    return "not cancelled: it was over already"


async def act(request: web.Request) -> web.StreamResponse:
    """Retry or cancel every job the listing's filter finds."""
    form = request.query
    action, prefix = str(form.get("action", "")), str(form.get("prefix", ""))
    state_text = str(form.get("state", ""))
    view = _needed(request)
    back = {"state": state_text, "prefix": prefix}
    if action not in ("retry", "cancel"):
        raise bad_request("invalid_parameter", f"action: retry or cancel, not {action!r}")
    try:
        state = _state(state_text)
    except ValueError as exc:
        raise bad_request("invalid_parameter", f"state: {exc}") from None
    try:
        app = await view.app()
        found = await view.jobs(state, prefix)
        done = 0
        for status in found:
            if action == "retry" and status.state is JobState.DEAD:
                await app.retry(status.key)
                done += 1
            elif action == "cancel" and not status.state.final:
                done += (await app.cancel(status.key)).state == "cancelled"
        said = f"{action}: {done} of {len(found)} jobs"
    except FAILURES as exc:
        said = f"{action} stopped: {exc}"
    raise web.HTTPSeeOther(f"../jobs?{urlencode({**back, 'message': said})}")


async def purge(request: web.Request) -> web.StreamResponse:
    if request.query.get("confirm") != "yes":
        raise bad_request("invalid_parameter", "confirm=yes is needed: the page asks first")
    view = _needed(request)
    try:
        said = f"purged {await (await view.app()).purge()} dead jobs"
    except FAILURES as exc:
        said = f"not purged: {exc}"
    raise web.HTTPSeeOther(f"../jobs?{urlencode({'state': 'dead', 'message': said})}")


def _needed(request: web.Request) -> LensView:
    view = lens_view(request)
    if view is None:
        raise web.HTTPConflict(text="no Lens configured: start the node with --lens-url\n")
    return view


#: The panels' values, by name (forum.dashboard.pages renders them).
PAGES: dict[str, Callable[[web.Request], Awaitable[dict[str, Any]]]] = {
    "jobs_page": jobs_page,
    "job_page": job_page,
    "purge_page": purge_page,
    "workers_page": workers_page,
}
#: The job actions (POST; the node's middleware refuses them a read token).
ACTIONS: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "/ui/job/retry": retry,
    "/ui/job/cancel": cancel,
    "/ui/jobs/act": act,
    "/ui/jobs/purge": purge,
}
