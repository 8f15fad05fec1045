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
dashboard's login sets it, ``SameSite=Strict`` and ``HttpOnly``). A browser
that asks for one of an extension's pages (``PAGES_ROOT``: ``GET``,
``Accept`` naming ``text/html``) without a good credential is sent to sign
in (303 to ``LOGIN_PAGE?next=<the page>``); the API's routes, and anything
else a page's script fetches, get the 401.

Before any of that, :func:`browser_guard` judges where a request comes
from, on every route, the stream's WebSocket handshake included, with or
without a token (a browser carries no token of its own, but it carries the
cookie, and a node without a token needs none):

* ``Origin`` the node's own (the scheme and ``Host`` of the request), or one
  of ``allow_origins``: let in, the node's own pages;
* any other ``Origin``, ``null`` included (a sandboxed frame's, a ``file:``
  page's: no page of the node's): 403;
* no ``Origin``, but ``Sec-Fetch-Site: same-site`` or ``cross-site``: 403 (a
  request another site's page made without one: an ``<img>``, a no-cors
  ``fetch``), but for a ``GET``/``HEAD`` top-level navigation, a link
  followed from elsewhere, which reads only;
* no ``Origin``, the cookie, and a request that acts (not a read, or the
  stream): 403, since browsers name the origin of every such request;
* no ``Origin`` and no ``Sec-Fetch-Site``: let in, not a browser's (the
  Python client, peers, curl).

Another site on the same host is "same-site" to a browser (sites ignore
ports), so the ``SameSite=Strict`` cookie does not keep a page on another
port out: the ``Origin`` does. And on a node without a token, a ``Host``
that is none of the node's names is refused (421) before anything else (but
on the probes, and on the peer routes while they want the cluster key):
DNS rebinding gives a page of another site the node's address under that
site's own name, which makes the page's requests same-origin; its ``Host``
still says the other name (:class:`Browsers`).
"""

from __future__ import annotations

import hmac
import socket
from dataclasses import dataclass
from typing import Literal, NoReturn
from urllib.parse import urlencode, urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from forum.node.config.node import NodeConfig
from forum.node.config.origin import (
    WebOrigin,
    is_address,
    is_loopback_name,
    normal_name,
    split_host,
)
from forum.node.http.bodies import ApiProblem
from forum.node.http.keys import CONFIG, LOGIN_PAGE, OPEN_ROUTES, PAGES_ROOT, SELF_AUTHENTICATED

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
    replicate with each other. Replication signs with it (``forum.replication.auth``).
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
    return _reads(request)


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
    given, _ = _credential(request)
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
    return await handler(request)


@dataclass(frozen=True, slots=True)
class Browsers:
    """Where a node takes browsers' requests from, and the names it answers to.

    ``origins``: the origins besides each request's own (``Origin`` equal to
    the scheme and ``Host`` it was made with) whose pages may call the node.
    ``names``: the ``Host`` names a node without a token answers to besides
    addresses and loopback names (``None``: any, the node has a token). A
    name is the node's when its operator wrote it down: the listen and
    advertise addresses, the peers' (a cluster is often given one list, each
    node in it), ``allow_hosts``, the machine's own name. A rebinding
    attacker's name is none of these: it is one the attacker's DNS answers.
    An address in ``Host`` is always let in, since no DNS answer stands behind
    it, and so are ``localhost`` and the names under it, which browsers
    resolve to loopback themselves.
    """

    origins: frozenset[WebOrigin]
    names: frozenset[str] | None

    @classmethod
    def of(cls, config: NodeConfig) -> Browsers:
        origins = frozenset(WebOrigin.parse(origin) for origin in config.allow_origins)
        if config.token is not None:
            return cls(origins, None)
        urls = (*config.peers, *([config.advertise] if config.advertise else []))
        written = [config.host, socket.gethostname(), *config.allow_hosts]
        written += [urlsplit(url).hostname or "" for url in urls]
        return cls(origins, frozenset(normal_name(name) for name in written if name))

    def answers_to(self, host: str) -> bool:
        """Whether ``host`` (a ``Host`` header) names this node."""
        if self.names is None:
            return True
        try:
            name, _ = split_host(host)
        except ValueError:
            return False
        return is_address(name) or is_loopback_name(name) or name in self.names

    def lets_in(self, origin: str, request: web.Request) -> bool:
        """Whether a page of ``origin`` (an ``Origin`` header) may call the node."""
        try:
            given = WebOrigin.parse(origin)
            if given in self.origins:
                return True
            # The Host as sent (request.host would look the machine's name up without one).
            return given == WebOrigin.serving(request.scheme, request.headers.get("Host", ""))
        except ValueError:  # null, or no origin at all; no Host, or one that is no name
            return False


def browser_guard(config: NodeConfig) -> Middleware:
    """The middleware that refuses a browser's request from elsewhere (the
    table at the top), judged by :class:`Browsers` made from ``config``."""
    browsers = Browsers.of(config)
    # Not the Host of the probes, which answer whatever the name (a load
    # balancer may probe by one the node was not told, and they say nothing a
    # page could use), nor of the peer routes while they want the cluster
    # key: that is what a rebound page lacks, as the token is.
    signed = cluster_key(config) is not None

    def host_checked(path: str) -> bool:
        return path not in OPEN_PATHS and not (signed and path.startswith(CLUSTER_PREFIX))

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        if host is not None and host_checked(request.path) and not browsers.answers_to(host):
            raise ApiProblem(
                421,
                "misdirected_request",
                f"Host {host!r} is not a name of this node: without a token it answers only "
                "to its addresses, localhost and the names it was given (listen, advertise, "
                "peers, allow_hosts), against DNS rebinding; add the name with --allow-host "
                "or set a token",
            )
        origin = request.headers.get("Origin")
        if origin is not None:
            if not browsers.lets_in(origin, request):
                raise ApiProblem(
                    403,
                    "forbidden",
                    f"a page of another site (Origin {origin!r}) may not call this node: only "
                    "its own pages and its allow_origins may",
                )
        elif _from_another_site(request):
            raise ApiProblem(
                403,
                "forbidden",
                "a page of another site may not call this node (Sec-Fetch-Site "
                f"{request.headers['Sec-Fetch-Site']!r}): only its own pages may",
            )
        elif _credential(request)[1] and not _reads(request):
            raise ApiProblem(
                403,
                "forbidden",
                "a request made with the token cookie must come from this node's pages "
                "(its Origin header naming the node)",
            )
        return await handler(request)

    return guard


def _from_another_site(request: web.Request) -> bool:
    """Whether a browser says it made ``request`` for a page of another
    origin, other than by following a link (a top-level ``GET``, which
    reads). ``same-site`` counts: another port of the same host is one."""
    if request.headers.get("Sec-Fetch-Site") not in ("same-site", "cross-site"):
        return False
    followed = (
        request.method in READ_METHODS
        and request.headers.get("Sec-Fetch-Mode") == "navigate"
        and request.headers.get("Sec-Fetch-Dest") == "document"
    )
    return not followed


def _reads(request: web.Request) -> bool:
    """Whether ``request`` only reads: a ``GET`` or ``HEAD`` but the stream's."""
    return request.method in READ_METHODS and request.path not in READ_REFUSED


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


def _same(given: str, secret: str) -> bool:
    # compare_digest: the time taken must not tell how much of the secret matched.
    return bool(given) and hmac.compare_digest(given.encode(), secret.encode())
