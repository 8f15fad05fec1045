"""Who may call what: the one rule the ``authenticate`` middleware enforces and
the OpenAPI document declares (per operation, from :func:`bearer_secret`).

=========================  ==================================================
``/healthz``, ``/readyz``  open: probes must work without secrets
an extension's open paths  open (``OPEN_ROUTES``: the dashboard's login page)
``/v1/cluster/...``        a route that checks its own credentials
                           (replication's HMAC signatures): no bearer token;
                           any other path there: ``Bearer <cluster key>``
everything else            ``Bearer <token>`` when the node has a token, or
                           ``Bearer <read token>`` to read (below)
=========================  ==================================================

Two scopes: the token may do anything; the read token (``--read-token``)
may only read, that is ``GET`` and ``HEAD`` but the stream (whose frames
write and take), and anything else it asks is 403. A browser carries its
credential in the ``forum_token`` cookie instead of the header (the
dashboard's login sets it, ``SameSite=Strict`` and ``HttpOnly``); a request
that changes something on a cookie's strength must also come from the
node's own origin (its ``Origin`` header), so no other site can act through
a logged-in browser. A browser that asks for one of an extension's pages
(``PAGES_ROOT``: ``GET``, ``Accept`` naming ``text/html``) without a good
credential is sent to sign in (303 to ``LOGIN_PAGE?next=<the page>``); the
API's routes, and anything else a page's script fetches, get the 401.
"""

from __future__ import annotations

import hmac
from typing import Literal, NoReturn
from urllib.parse import urlencode

from aiohttp import web
from aiohttp.typedefs import Handler

from node.config import NodeConfig
from node.web_bodies import ApiProblem
from node.web_keys import CONFIG, LOGIN_PAGE, OPEN_ROUTES, PAGES_ROOT, SELF_AUTHENTICATED

#: Routes under this prefix are for peers: they need the cluster key (see cluster_key).
CLUSTER_PREFIX = "/v1/cluster/"
#: Routes open to anyone (probes must work without secrets).
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
#: The cookie a browser sends its token in (the dashboard's login sets it).
TOKEN_COOKIE = "forum_token"
#: What the read token may do: read, but not over the stream (its frames write and take).
READ_METHODS = frozenset({"GET", "HEAD"})
READ_REFUSED = frozenset({"/v1/stream"})

#: What a credential allows: everything, or reading only.
Scope = Literal["all", "read"]


def cluster_key(config: NodeConfig) -> str | None:
    """The credential of the cluster routes: the cluster secret, else the token, else none.

    Never nothing while a token is set (the peer routes must not be a way
    around it), and nodes that share a token but have no secret still
    replicate with each other. Replication signs with it (``replication.auth``).
    """
    return config.cluster_secret if config.cluster_secret is not None else config.token


def bearer_secret(
    config: NodeConfig,
    self_authenticated: frozenset[str],
    path: str,
    *,
    routed: bool = True,
    open_paths: frozenset[str] = frozenset(),
) -> str | None:
    """The secret a request for ``path`` must send as its bearer token; ``None``
    when it needs none. ``routed``: ``path`` is a route the app serves (a
    route that checks its own credentials must exist to be trusted with them).
    ``open_paths``: an extension's routes open to anyone."""
    if path in OPEN_PATHS or (routed and path in open_paths):
        return None
    if not path.startswith(CLUSTER_PREFIX):
        return config.token
    if routed and path.startswith(tuple(self_authenticated)):
        return None
    return cluster_key(config)


def scope_of(config: NodeConfig, given: str) -> Scope | None:
    """What the client credential ``given`` allows on this node (``None``: nothing)."""
    if config.token is not None and _same(given, config.token):
        return "all"
    if config.read_token is not None and _same(given, config.read_token):
        return "read"
    return None


def may_read_only(request: web.Request) -> bool:
    """Whether the read token may make ``request``."""
    return request.method in READ_METHODS and request.path not in READ_REFUSED


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    config = request.app[CONFIG]
    secret = bearer_secret(
        config,
        request.app[SELF_AUTHENTICATED],
        request.path,
        routed=request.match_info.http_exception is None,
        open_paths=request.app[OPEN_ROUTES],
    )
    if secret is None:
        return await handler(request)
    given, by_cookie = _credential(request)
    if request.path.startswith(CLUSTER_PREFIX):  # the cluster key alone
        if not _same(given, secret):
            _refuse(config, request)
        return await handler(request)
    scope = scope_of(config, given)
    if scope is None:
        _refuse(config, request)
    if scope == "read" and not may_read_only(request):
        raise ApiProblem(
            403, "forbidden", f"the read-only token may not {request.method} {request.path}"
        )
    if by_cookie and request.method not in READ_METHODS and not _same_origin(request):
        raise ApiProblem(
            403,
            "forbidden",
            "a request made with the token cookie must come from this node's pages",
        )
    return await handler(request)


def _credential(request: web.Request) -> tuple[str, bool]:
    """The bearer token given, else the cookie's; and whether it is the cookie's."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return given.strip(), False
    cookie = request.cookies.get(TOKEN_COOKIE)
    if cookie is not None and not request.path.startswith(CLUSTER_PREFIX):
        return cookie, True
    return "", False


def _refuse(config: NodeConfig, request: web.Request) -> NoReturn:
    """401, naming the credential the path wants (and where a browser signs
    in); a browser asking for a page is sent there instead."""
    sign_in = _sign_in(request)
    if sign_in is not None:
        raise web.HTTPSeeOther(sign_in)
    cluster = request.path.startswith(CLUSTER_PREFIX)
    what = (
        "the cluster secret"
        if cluster and config.cluster_secret is not None
        else "the node's token"
    )
    login = request.app[LOGIN_PAGE]
    browser = f" (in a browser: sign in at {login})" if login and not cluster else ""
    raise ApiProblem(
        401,
        "unauthorized",
        f"missing or wrong credentials: send 'Authorization: Bearer <{what}>'{browser}",
        headers={"WWW-Authenticate": 'Bearer realm="forum"'},
    )


def _sign_in(request: web.Request) -> str | None:
    """Where to send a browser that asked for a page without a good
    credential: the login page, with the page to come back to (a path of
    this node: the login page takes no other). ``None``: not a browser
    asking for a page (an API call, a page's own fetch, a form's POST, a
    request that brought a wrong ``Authorization`` of its own)."""
    login, pages = request.app[LOGIN_PAGE], request.app[PAGES_ROOT]
    if not login or not pages or request.method != "GET" or "Authorization" in request.headers:
        return None
    if request.path != pages and not request.path.startswith(pages + "/"):
        return None
    if "text/html" not in request.headers.get("Accept", ""):
        return None
    return f"{login}?{urlencode({'next': str(request.rel_url)})}"


def _same_origin(request: web.Request) -> bool:
    return request.headers.get("Origin") == f"{request.scheme}://{request.host}"


def _same(given: str, secret: str) -> bool:
    # compare_digest: the time taken must not tell how much of the secret matched.
    return bool(given) and hmac.compare_digest(given.encode(), secret.encode())
