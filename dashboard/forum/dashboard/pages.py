"""The dashboard's routes on the node's app, and the extension that adds them.

=====================  ==============================================================
``GET /ui``            Overview: every node's rates, contents, Strand and compaction;
                       with a cluster map, its replica groups and their members
``GET /ui/prefixes``   Prefixes, grouped at ``?separator=`` (``/`` by default),
                       counted over every group of the cluster map
``GET /ui/peers``      Peers, as this node's replication knows them
``GET /ui/guarantees`` Guarantees: double takes caught; the Lens's figures
``GET /ui/jobs ...``   Jobs and Workers, and the job actions (forum.dashboard.jobs)
``GET /ui/schedules``  Schedules: each periodic task (forum.dashboard.schedules)
``GET /ui/login``      open: asks for the token (the only page without it), then
                       goes to ``?next=`` (a ``/ui`` path; where a browser without
                       the token was sent from, forum.node.http.auth)
``GET /ui/session``    with ``Authorization: Bearer``: keeps it in the cookie
``GET /ui/static/..``  open: the page's CSS and JS (vendored, no CDN)
=====================  ==============================================================

Every route is in the node's OpenAPI document (forum.dashboard.openapi). The
pages are behind the node's token like the API (forum.node.http.auth: the cookie
the login sets stands for the header). The Prefixes buttons call the
API itself (``POST /v1/prefixes/{prefix}/pause``); the job actions, which
the node's API does not have, are the dashboard's own POSTs calling the task
layer (forum.dashboard.jobs), behind the same middleware: a read token is refused
both.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from forum.dashboard.groups import Groups, group_rows, sampled_elsewhere
from forum.dashboard.keys import LENS_VIEW, lens_view
from forum.dashboard.openapi import describe
from forum.dashboard.sampler import INTERVAL, KEEP, Sampler
from forum.dashboard.throughput import GroupRates
from forum.dashboard.views import (
    DEAD_PREFIX,
    SPARK_HEIGHT,
    SPARK_WIDTH,
    LensGroups,
    PrefixRow,
    ago,
    duration,
    health,
    merged_prefixes,
    node_rows,
    peer_state,
    per_second,
    prefix_rows,
    size,
    stamp,
)
from forum.node.api.model import JSON
from forum.node.api.parameters import MAX_GROUPS
from forum.node.http.auth import TOKEN_COOKIE, Scope, scope_of
from forum.node.http.bodies import ApiProblem, bad_request
from forum.node.http.handlers import node_status
from forum.node.http.keys import (
    CLUSTER,
    CONFIG,
    DESCRIBED,
    FORUM,
    LOGIN_PAGE,
    OPEN_ROUTES,
    PAGES_ROOT,
    PEERS,
    SPACE,
    WATCH_HUB,
    Extension,
)
from forum.node.space.applying import SEPARATOR as DOUBLE_TAKES_SEPARATOR

ROOT = "/ui"
STATIC = Path(__file__).parent / "static"
#: The panels, in the order of the page's tabs: (path, title).
PANELS = (
    (ROOT, "Overview"),
    (f"{ROOT}/prefixes", "Prefixes"),
    (f"{ROOT}/peers", "Peers"),
    (f"{ROOT}/guarantees", "Guarantees"),
    (f"{ROOT}/jobs", "Jobs"),
    (f"{ROOT}/workers", "Workers"),
    (f"{ROOT}/schedules", "Schedules"),
)
#: Seconds between two refreshes of a panel in the browser.
REFRESH = 2.0
#: The files under ``/ui/static/``, and their media types: one route each, so
#: the node's OpenAPI document names each (vendored, no CDN).
ASSETS = {
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
    "theme.js": "text/javascript",
}
#: What the login page's ``next`` may be: a path of this dashboard, relative to
#: the node (no scheme, no host, no ``//``, no backslash a browser would read
#: as a slash, no control character). Anything else would make the login
#: page an open redirect.
NEXT = ROOT + r"(?:[/?#][^\x00-\x1f\x7f\\]*)?"

#: Every page forbids being framed: a page of another site that framed one
#: could have its visitor click its buttons (clickjacking). The node's
#: browser guard refuses such a frame's request already where the browser
#: says what it is for (``Sec-Fetch-Dest``); these headers are for the others.
NO_FRAMES = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}

SAMPLER = web.AppKey("dashboard_sampler", Sampler)
RATES = web.AppKey("dashboard_group_rates", GroupRates)
TEMPLATES = web.AppKey("dashboard_templates", jinja2.Environment)
#: The other replica groups (forum.dashboard.groups); absent on a node without a map.
GROUPS = web.AppKey("dashboard_groups", Groups)


def dashboard(
    interval: float = INTERVAL, keep: int = KEEP, lens_url: str | None = None
) -> Extension:
    """The extension that serves the dashboard, sampling every ``interval`` s,
    showing jobs and workers from the Lens at ``lens_url`` (``ValueError``
    now for a URL that is no Redis's)."""
    if lens_url is not None:
        # Only now: a node-only install (no Redis client) serves the rest.
        try:
            from forum.dashboard import jobs, lensmetrics  # noqa: PLC0415
            from forum.dashboard.lensview import LensView  # noqa: PLC0415
        except ImportError as exc:
            raise ValueError(f"lens_url needs the Redis client, not here: {exc}") from None

        LensView.check_url(lens_url)

    def install(app: web.Application) -> None:
        config = app[CONFIG]
        if lens_url is not None:
            app[LENS_VIEW] = LensView(lens_url, config.token, lambda: node_status(app).advertise)
            lensmetrics.install(app, app[LENS_VIEW])
            for path, action in jobs.ACTIONS.items():
                app.router.add_post(path, action)
        holder = app.get(CLUSTER)
        if holder is not None:
            app[GROUPS] = Groups(holder, config.token)
        app[SAMPLER] = Sampler(
            local=lambda: node_status(app),
            # Its group's members are its peers; the other groups' are asked too.
            peers=lambda: [p.url for p in app[PEERS]()] + sampled_elsewhere(holder),
            token=config.token,
            interval=interval,
            keep=keep,
        )
        app[RATES] = GroupRates(app[WATCH_HUB], lambda: app[FORUM].strand.origin)
        environment = jinja2.Environment(
            loader=jinja2.PackageLoader("forum.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        environment.filters |= {
            "size": size, "ago": ago, "stamp": stamp, "duration": duration,
            "per_second": per_second,
        }  # fmt: skip
        app[TEMPLATES] = environment
        static = {f"{ROOT}/static/{name}": media for name, media in ASSETS.items()}
        app[OPEN_ROUTES] = app[OPEN_ROUTES] | {f"{ROOT}/login"} | set(static)
        app[LOGIN_PAGE] = f"{ROOT}/login"
        app[PAGES_ROOT] = ROOT
        app[DESCRIBED] = app[DESCRIBED] | describe(ROOT, NEXT, lens=lens_url is not None)
        for path, handler in ROUTES.items():
            app.router.add_get(path, handler)
        for path, media in static.items():
            app.router.add_get(path, _asset(STATIC / path.rpartition("/")[2], media))
        app.cleanup_ctx.append(_sampling)

    return install


async def _sampling(app: web.Application) -> AsyncIterator[None]:
    groups = app.get(GROUPS)
    async with (
        app[SAMPLER].running(),
        app[RATES].running(),
        contextlib.nullcontext() if groups is None else groups.running(),
    ):
        try:
            yield
        finally:
            view = app.get(LENS_VIEW)
            if view is not None:
                await view.aclose()


async def overview(request: web.Request) -> web.Response:
    sampler = request.app[SAMPLER]
    status = node_status(request.app)
    ok, line = health(status)
    rows = node_rows(list(sampler.histories.values()), status.advertise, sampler.keep)
    groups = request.app.get(GROUPS)
    return _page(
        request, "overview.html", rows=rows, healthy=ok, health=line,
        groups=None if groups is None else group_rows(groups.holder, sampler.histories),
        epoch=None if groups is None else groups.holder.map.epoch,
    )  # fmt: skip


async def prefixes(request: web.Request) -> web.Response:
    """The node's groups (``GET /v1/prefixes?separator=``, oldest ages
    included; with a cluster map, the other groups' added in:
    forum.dashboard.groups), each with its dead letters (the node's live tuples under
    :data:`DEAD_PREFIX`, grouped alike), its rates (counted from now on, while
    the panel is looked at), its double takes when grouped at the separator
    the node counts them at, and, with a Lens, the workers' running jobs and
    parked retries."""
    separator = request.query.get("separator", "/")
    rows: list[PrefixRow] = []
    error = lens_error = None
    unplaced = None
    unreachable: list[str] = []
    try:
        if not separator:
            raise bad_request("invalid_parameter", "the separator must not be empty")
        sep = separator.encode()
        found = request.app[SPACE].prefixes(JSON, sep).prefixes  # a bad separator: 400 here
        groups = request.app.get(GROUPS)
        if groups is not None:
            elsewhere, unreachable = await groups.prefixes(separator)
            found = merged_prefixes(found, elsewhere)
        dead = request.app[FORUM].live_groups(sep, MAX_GROUPS, DEAD_PREFIX)
        counter = request.app[RATES]
        counter.looked(sep)
        measured = counter.rates(sep)
        lens, lens_error = await _lens_groups(request, sep)
        doubles = None
        if sep == DOUBLE_TAKES_SEPARATOR:
            doubles = request.app[FORUM].double_takes_by_prefix()
        rows = prefix_rows(
            found,
            {group[len(DEAD_PREFIX) :]: n for group, n in dead.items()},
            None if measured is None else measured[0],
            lens,
            MAX_GROUPS,
            double_takes=doubles,
        )
        unplaced = None if measured is None else measured[1]
    except ApiProblem as exc:
        error = exc.message
    return _page(
        request, "prefixes.html", rows=rows, separator=separator, error=error,
        lens_error=lens_error, unplaced=unplaced, dead_prefix=DEAD_PREFIX.decode(),
        grouped=GROUPS in request.app, unreachable=unreachable,
        double_takes_separator=DOUBLE_TAKES_SEPARATOR.decode(),
        http_status=400 if error else 200,
    )  # fmt: skip


async def _lens_groups(
    request: web.Request, separator: bytes
) -> tuple[LensGroups | None, str | None]:
    """Per group, the jobs running and the retries parked, from the workers'
    presence records; none without a Lens, and why when it did not answer."""
    view = lens_view(request)
    if view is None:
        return None, None
    from forum.dashboard.lensview import FAILURES  # noqa: PLC0415  (loaded with --lens-url already)

    try:
        workers = await view.workers()
    except FAILURES as exc:
        return None, str(exc)
    return LensGroups.of(workers, separator, time.time()), None


async def peers(request: web.Request) -> web.Response:
    status = node_status(request.app)
    ok, line = health(status)
    return _page(
        request,
        "peers.html",
        status=status,
        peers=status.peers,
        state=peer_state,
        healthy=ok,
        health=line,
    )


async def guarantees(request: web.Request) -> web.Response:
    sampler = request.app[SAMPLER]
    status = node_status(request.app)
    rows = node_rows(list(sampler.histories.values()), status.advertise, sampler.keep)
    view = lens_view(request)
    figures = None if view is None else await view.figures()
    return _page(request, "guarantees.html", rows=rows, status=status, lens=figures)


async def jobs_list(request: web.Request) -> web.Response:
    return _page(request, "jobs.html", **await _from_lens(request, "jobs_page"))


async def job(request: web.Request) -> web.Response:
    values = await _from_lens(request, "job_page")
    return _page(request, "job.html", **({"key": request.query.get("key", "")} | values))


async def purge(request: web.Request) -> web.Response:
    return _page(request, "purge.html", **await _from_lens(request, "purge_page"))


async def workers(request: web.Request) -> web.Response:
    """The workers, each alive or dead by its last beat; a dead one's claims
    with what became of them (forum.coordinator.presence ``awaiting``)."""
    now = time.time()
    values = await _from_lens(request, "workers_page")
    view = lens_view(request)
    abandoned: dict[str, Any] = {}
    if view is not None and values.get("workers"):
        from forum.dashboard.lensview import FAILURES  # noqa: PLC0415  (loaded with --lens-url)

        try:
            abandoned = await view.abandoned(values["workers"], now)
        except FAILURES as exc:
            values["error"] = str(exc)
    return _page(request, "workers.html", now=now, abandoned=abandoned, **values)


async def schedules(request: web.Request) -> web.Response:
    """Every periodic task, from the workers' registry (forum.dashboard.schedules,
    imported only with a Lens, as the task layer is)."""
    if lens_view(request) is None:
        return _page(request, "schedules.html")
    from forum.dashboard.schedules import schedules_page  # noqa: PLC0415

    return _page(request, "schedules.html", **await schedules_page(request))


async def _from_lens(request: web.Request, page: str) -> dict[str, Any]:
    """The values of a Lens panel (forum.dashboard.jobs), none without a Lens (the
    page then says so, and the task layer is never imported)."""
    if lens_view(request) is None:
        return {}
    from forum.dashboard import jobs  # noqa: PLC0415  (loaded with --lens-url already)

    values: dict[str, Any] = await jobs.PAGES[page](request)
    return values


async def login(request: web.Request) -> web.Response:
    """The token form (open: it is how a browser gets the cookie); signed
    in, the browser goes to ``?next=`` (a page of this dashboard), else the
    Overview."""
    back = request.query.get("next", ROOT)
    if not is_page_path(back):
        raise bad_request(
            "invalid_parameter", f"next must be a path of this node's dashboard ({ROOT}...)"
        )
    page = request.app[TEMPLATES].get_template("login.html").render(root=ROOT, next=back)
    return web.Response(text=page, content_type="text/html", headers=NO_FRAMES)


def is_page_path(target: str) -> bool:
    """Whether ``target`` is a path of this dashboard (:data:`NEXT`), fit to
    send a browser to after it signs in."""
    return re.fullmatch(NEXT, target) is not None


def _asset(path: Path, media: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def serve(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(path, headers={"Content-Type": media})

    return serve


async def session(request: web.Request) -> web.Response:
    """Keep the bearer token this request was let in with in the cookie, for
    the pages a browser navigates to (a header cannot follow a link)."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    answer = web.Response(status=204)
    if scheme.lower() == "bearer":
        answer.set_cookie(TOKEN_COOKIE, given.strip(), path="/", httponly=True, samesite="Strict")
    return answer


def _scope(request: web.Request) -> Scope:
    """What the viewer's credential allows (everything when the node has no token)."""
    config = request.app[CONFIG]
    if config.token is None:
        return "all"
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    credential = given.strip() if scheme.lower() == "bearer" else request.cookies.get(TOKEN_COOKIE)
    # The middleware let the request in, so the credential is one of the two.
    return scope_of(config, credential or "") or "read"


def _page(request: web.Request, template: str, **values: Any) -> web.Response:
    """``template`` rendered with ``values`` (``http_status``: the answer's
    status, 200 unless the page says what was wrong with the request)."""
    request.app[SAMPLER].viewed()
    status_code = values.pop("http_status", 200)
    status = values.get("status") or node_status(request.app)
    page = (
        request.app[TEMPLATES]
        .get_template(template)
        .render(
            root=ROOT,
            panels=PANELS,
            path=request.path,
            node=status,
            scope=_scope(request),
            secured=request.app[CONFIG].token is not None,
            refresh_ms=int(REFRESH * 1000),
            spark_width=SPARK_WIDTH,
            spark_height=SPARK_HEIGHT,
            lens_where=None if (view := lens_view(request)) is None else view.where,
            message=request.query.get("message"),
            error=values.pop("error", None),
            **values,
        )
    )
    return web.Response(text=page, content_type="text/html", status=status_code, headers=NO_FRAMES)


#: Every page's handler, by path.
ROUTES: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    ROOT: overview,
    f"{ROOT}/prefixes": prefixes,
    f"{ROOT}/peers": peers,
    f"{ROOT}/guarantees": guarantees,
    f"{ROOT}/jobs": jobs_list,
    f"{ROOT}/job": job,
    f"{ROOT}/jobs/purge": purge,
    f"{ROOT}/workers": workers,
    f"{ROOT}/schedules": schedules,
    f"{ROOT}/login": login,
    f"{ROOT}/session": session,
}
