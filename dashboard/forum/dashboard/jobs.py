"""The dashboard's Jobs and Workers panels, and the job actions' routes.

=========================  ================================================
``GET /ui/jobs``           a page of the jobs a search finds, sorted, with
                           a cursor to the next (forum.dashboard.listing);
                           ``?key=`` opens that job's page
``GET /ui/job?key=K``      a job: its timeline (forum.dashboard.timeline),
                           arguments, state, worker, error, result, claim
                           history; its actions. A raw Worker's job (no
                           task record) by its claim key: its claim, done
                           marker and history
``POST /ui/job/retry``     ``?key=``: requeue a dead job (``app.retry``)
``POST /ui/job/cancel``    ``?key=``: cancel a job not running
``POST /ui/jobs/act``      ``?action=`` (retry, cancel), ``state``,
                           ``prefix``: the same, for every job the filter finds
``POST /ui/jobs/bulk``     ``?action=`` (retry, cancel, delete) and each
                           ``key=`` ticked (forum.dashboard.bulk)
``GET /ui/jobs/purge``     asks to confirm purging the dead
``POST /ui/jobs/purge``    ``?confirm=yes``: purge them (``app.purge``)
``GET /ui/workers``        the workers' presence records
=========================  ================================================

Each page and action is of one app, ``?app=`` (its prefix; the apps are
those their workers announced, forum.tasks.registry), by default the only
one (:meth:`forum.dashboard.lensview.LensView.scoped`).

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

from forum.dashboard.bulk import bulk
from forum.dashboard.keys import lens_view
from forum.dashboard.lensview import EVERY, FAILURES, LensView, Scoped
from forum.dashboard.listing import LIMITS, STATES, JobSearch
from forum.node.http.bodies import bad_request
from forum.tasks import App, InvalidJob, JobCounts, JobNotFound, JobState


async def jobs_page(request: web.Request) -> dict[str, Any]:
    """The listing's values: one page of the selected app's jobs the search
    finds (forum.dashboard.listing; ``key`` given: a redirect to its page)."""
    key = request.query.get("key", "").strip()
    if key:
        app_name = request.query.get("app", "")
        raise web.HTTPSeeOther(f"job?{urlencode({'key': key} | _app_param(app_name))}")
    values: dict[str, Any] = {"search": JobSearch(), "states": STATES, "limits": LIMITS,
                              "found": None, "apps": [], "app": None, "tasks": [],
                              "every": False}  # fmt: skip
    view = lens_view(request)
    if view is None:
        return values
    try:
        search = values["search"] = JobSearch.of(request.query)
    except ValueError as exc:
        return values | {"error": str(exc), "http_status": 400}
    try:
        scoped = await view.scoped(search.app)
        counted = await scoped.app.counts()
        values |= {"apps": scoped.apps, "app": scoped.app, "tasks": _tasks(scoped, counted),
                   "every": scoped.every, "owner": scoped.owner, "all_apps": EVERY}  # fmt: skip
        values["found"] = await search.run(scoped.app)
    except InvalidJob as exc:
        values |= {"error": str(exc), "http_status": 400}
    except FAILURES as exc:
        values["error"] = str(exc)
    return values


def _tasks(scoped: Scoped, counted: JobCounts) -> list[str]:
    """The task names the form offers: the app's, as its workers announced
    them, and those its jobs in the index name."""
    return sorted(set(scoped.app.tasks) | set(counted.by_task))


def _app_param(name: str) -> dict[str, str]:
    return {"app": name} if name else {}


async def job_page(request: web.Request) -> dict[str, Any]:
    """A job's values: a task job's, or a raw job's by its claim key (the
    page says which), in the app of ``?app=`` (default: as the Jobs page's).
    A key no job can have is a 400, one nothing knows a 404: the page says
    why either way."""
    key, app_name = request.query.get("key", ""), request.query.get("app", "")
    values: dict[str, Any] = {"key": key, "job": None, "app_name": app_name}
    view = lens_view(request)
    if view is not None:
        try:
            values["job"] = await view.job(key, app_name)
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
    app_name = request.query.get("app", "")
    values: dict[str, Any] = {"dead": None, "app_name": app_name}
    view = lens_view(request)
    if view is not None:
        try:
            counted = await (await _one_app(view, app_name)).counts()
            values["dead"] = counted.by_state.get(JobState.DEAD, 0)
        except FAILURES as exc:
            values["error"] = str(exc)
    return values


def _key(request: web.Request) -> str:
    key = request.query.get("key", "")
    if not key:
        raise bad_request("invalid_parameter", "key: the job's key is needed")
    return key


async def retry(request: web.Request) -> web.StreamResponse:
    key, app_name = _key(request), request.query.get("app", "")
    view = _needed(request)
    try:
        await (await view.job_app(key, await view.scoped(app_name))).retry(key)
        said = f"{key}: requeued"
    except FAILURES as exc:
        said = f"{key}: not requeued: {exc}"
    back = {"key": key} | _app_param(app_name) | {"message": said}
    raise web.HTTPSeeOther(f"../job?{urlencode(back)}")


async def cancel(request: web.Request) -> web.StreamResponse:
    key, app_name = _key(request), request.query.get("app", "")
    view = _needed(request)
    try:
        outcome = await (await view.job_app(key, await view.scoped(app_name))).cancel(key)
        said = f"{key}: {_cancelled(outcome.state, outcome.owner)}"
    except FAILURES as exc:
        said = f"{key}: not cancelled: {exc}"
    back = {"key": key} | _app_param(app_name) | {"message": said}
    raise web.HTTPSeeOther(f"../job?{urlencode(back)}")


def _cancelled(state: str, owner: str | None) -> str:
    if state == "cancelled":
        return f"cancelled (it was running on {owner}: stopped)" if owner else "cancelled"
    return "not cancelled: it was over already"


async def act(request: web.Request) -> web.StreamResponse:
    """Retry or cancel every job the listing's filter finds (state and key
    prefix, in the app of ``?app=``)."""
    form = request.query
    action, prefix = str(form.get("action", "")), str(form.get("prefix", ""))
    state_text, app_name = str(form.get("state", "")), str(form.get("app", ""))
    view = _needed(request)
    back = {"state": state_text, "prefix": prefix} | _app_param(app_name)
    if action not in ("retry", "cancel"):
        raise bad_request("invalid_parameter", f"action: retry or cancel, not {action!r}")
    try:
        state = JobSearch(state=state_text).job_state
    except ValueError as exc:
        raise bad_request("invalid_parameter", f"state: {exc}") from None
    try:
        app = await _one_app(view, app_name)
        found = await view.jobs(app, state, prefix)
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
    app_name = request.query.get("app", "")
    view = _needed(request)
    try:
        said = f"purged {await (await _one_app(view, app_name)).purge()} dead jobs"
    except FAILURES as exc:
        said = f"not purged: {exc}"
    back = {"state": "dead"} | _app_param(app_name) | {"message": said}
    raise web.HTTPSeeOther(f"../jobs?{urlencode(back)}")


async def _one_app(view: LensView, name: str) -> App:
    """The app of prefix ``name`` for an action over a filter (``InvalidJob``
    when the page shows every app's jobs: one app's prefix says where its
    dead letters are)."""
    scoped = await view.scoped(name)
    if scoped.every:
        raise InvalidJob("pick one app first: this acts on one app's jobs")
    return scoped.app


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
    "/ui/jobs/bulk": bulk,
    "/ui/jobs/purge": purge,
}
