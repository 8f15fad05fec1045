"""The dashboard's routes as the node's OpenAPI document describes them.

The pages are for people (``text/html``), not a client's API, but they are
routes of the node like any other: behind its token, taking query
parameters and refusing bad ones with a 4xx. So the node's document
(``GET /v1/openapi.json``) lists them beside its own
(:data:`forum.node.http.keys.DESCRIBED`), and adds the refusals any route may give
and the security its middleware enforces. The Jobs, Job, Purge and Workers
pages take their parameters only with a Lens (``--lens-url``; without one
they say so whatever they are given), and the job actions are served only
then: each is described as it is served.
"""

from __future__ import annotations

from typing import Any

#: The states the Jobs panel filters by (forum.tasks.JobState's values, which this
#: module may not import: a node-only install has no task layer; a test
#: holds the two equal).
JOB_STATES = ("queued", "delayed", "running", "retrying", "done", "dead", "expired", "cancelled")
#: What the job actions do to the jobs of a filter.
ACTIONS = ("retry", "cancel")

_HTML = {"text/html": {"schema": {"type": "string"}}}
_ERROR = {"$ref": "#/components/responses/Error"}
#: A refusal a page explains in the page itself, or the node's JSON error.
_REFUSED = {
    "text/html": {"schema": {"type": "string"}},
    "application/json": {"schema": {"$ref": "#/components/schemas/Problem"}},
}
_SIGN_IN = {
    "description": "A browser (Accept: text/html) without credentials: to the login page, "
    "with ?next= this page."
}


def _query(name: str, description: str, *, required: bool = False, **schema: Any) -> dict[str, Any]:
    described: dict[str, Any] = {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": "string", **schema},
    }
    if required:
        described["required"] = True
    return described


def _page(summary: str, *parameters: dict[str, Any], **statuses: str) -> dict[str, Any]:
    """A page: 200 ``text/html``; ``statuses`` (``s400=...``) it answers with
    the page too, saying what was wrong."""
    responses: dict[str, Any] = {"200": {"description": summary, "content": _HTML}, "303": _SIGN_IN}
    for status, description in statuses.items():
        responses[status.removeprefix("s")] = {"description": description, "content": _REFUSED}
    operation: dict[str, Any] = {"summary": summary, "responses": responses}
    if parameters:
        operation["parameters"] = list(parameters)
    return {"get": operation}


def _action(summary: str, *parameters: dict[str, Any]) -> dict[str, Any]:
    """A job action: 303 to the page it came from, saying what it did."""
    return {
        "post": {
            "summary": summary,
            "description": "Called by the page's form (a cookie-borne call must come from "
            "the node's own pages); the read token gets 403.",
            "parameters": list(parameters),
            "responses": {
                "303": {"description": "Done or not: to the page, with what it did in ?message="},
                "400": _ERROR,
            },
        }
    }


def describe(root: str, next_pattern: str, lens: bool) -> dict[str, dict[str, Any]]:
    """Path items of every route the dashboard serves under ``root``, with
    the job actions when it has a Lens."""
    message = _query("message", "A line to show: what an action did (its redirect sets it).")
    key = _query(
        "key", "The job's key (a task's, or a raw Worker's claim key).", required=True, minLength=1
    )
    lens_params: list[dict[str, Any]] = [message] if lens else []
    paths: dict[str, dict[str, Any]] = {
        root: _page("Overview: every node's rates, contents, Strand and compaction"),
        f"{root}/prefixes": _page(
            "Prefixes: live, delayed and reserved tuples per group",
            _query("separator", "Group payloads up to and including it (default /).", minLength=1),
            s400="The separator is empty (the page says so).",
        ),
        f"{root}/peers": _page("Peers: each peer's state, lag and what it holds back"),
        f"{root}/guarantees": _page("Guarantees: double takes caught; the Lens's figures"),
        f"{root}/jobs": _page(
            "Jobs: the task layer's jobs by state and key prefix",
            *(
                [
                    _query("state", "Only jobs in this state.", enum=list(JOB_STATES)),
                    _query("prefix", "Only jobs whose key starts with it."),
                    _query("key", "Open this job's page (a 303 to it)."),
                    message,
                ]
                if lens
                else []
            ),
            **({"s400": "No such state (the page says so)."} if lens else {}),
        ),
        f"{root}/job": _page(
            "A job: a task job's state, payload, error, result and claim history, or a raw "
            "Worker's claim, done marker and history",
            *([key, message] if lens else []),
            **(
                {
                    "s400": "A key no job can have (the page says why).",
                    "s404": "No task, claim or history has the key (the page says so).",
                }
                if lens
                else {}
            ),
        ),
        f"{root}/jobs/purge": _page("Asks to confirm purging the dead jobs", *lens_params),
        f"{root}/workers": _page(
            "Workers: each worker's slots, jobs, beats, counters", *lens_params
        ),
        f"{root}/schedules": _page(
            "Schedules: each periodic task's next slot, last run and missed slots", *lens_params
        ),
        f"{root}/login": {
            "get": {
                "summary": "Asks for the token (open); signed in, goes to next",
                "parameters": [
                    _query(
                        "next",
                        f"The page to go to once signed in (default {root}): a "
                        "path of this dashboard, nothing else.",
                        pattern=f"^{next_pattern}$",
                    ),
                ],
                "responses": {
                    "200": {"description": "The login page.", "content": _HTML},
                    "400": _ERROR,
                },
            }
        },
        f"{root}/session": {
            "get": {
                "summary": "Keeps the bearer token of the request in the forum_token cookie "
                "(HttpOnly, SameSite=Strict), for the pages a browser navigates to",
                "responses": {"204": {"description": "Kept (Set-Cookie)."}},
            }
        },
        f"{root}/static/dashboard.js": _static("The pages' script (open)", "text/javascript"),
        f"{root}/static/dashboard.css": _static("The pages' stylesheet (open)", "text/css"),
        f"{root}/static/theme.js": _static("The pages' colour theme (open)", "text/javascript"),
    }
    if lens:
        paths |= {
            f"{root}/job/retry": _action("Requeue a dead job", key),
            f"{root}/job/cancel": _action("Cancel a job not running", key),
            f"{root}/jobs/act": _action(
                "Retry or cancel every job the filter finds",
                _query("action", "What to do.", required=True, enum=list(ACTIONS)),
                _query("state", "Only jobs in this state.", enum=list(JOB_STATES)),
                _query("prefix", "Only jobs whose key starts with it."),
            ),
            f"{root}/jobs/purge": paths[f"{root}/jobs/purge"]
            | _action(
                "Purge the dead jobs' letters",
                _query("confirm", "Must be yes: the page asks first.", required=True, enum=["yes"]),
            ),
        }
    return paths


def _static(summary: str, media: str) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "responses": {
                "200": {"description": summary, "content": {media: {"schema": {"type": "string"}}}}
            },
        }
    }
