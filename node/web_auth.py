"""Who may call what: the one rule the ``authenticate`` middleware enforces and
the OpenAPI document declares (per operation, from :func:`bearer_secret`).

=========================  ==================================================
``/healthz``, ``/readyz``  open: probes must work without secrets
``/v1/cluster/...``        a route that checks its own credentials
                           (replication's HMAC signatures): no bearer token;
                           any other path there: ``Bearer <cluster key>``
everything else            ``Bearer <token>`` when the node has a token
=========================  ==================================================
"""

from __future__ import annotations

import hmac

from aiohttp import web
from aiohttp.typedefs import Handler

from node.config import NodeConfig
from node.web_bodies import ApiProblem
from node.web_keys import CONFIG, SELF_AUTHENTICATED

#: Routes under this prefix are for peers: they need the cluster key (see cluster_key).
CLUSTER_PREFIX = "/v1/cluster/"
#: Routes open to anyone (probes must work without secrets).
OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def cluster_key(config: NodeConfig) -> str | None:
    """The credential of the cluster routes: the cluster secret, else the token, else none.

    Never nothing while a token is set (the peer routes must not be a way
    around it), and nodes that share a token but have no secret still
    replicate with each other. Replication signs with it (``replication.auth``).
    """
    return config.cluster_secret if config.cluster_secret is not None else config.token


def bearer_secret(
    config: NodeConfig, self_authenticated: frozenset[str], path: str, *, routed: bool = True
) -> str | None:
    """The secret a request for ``path`` must send as its bearer token; ``None``
    when it needs none. ``routed``: ``path`` is a route the app serves (a
    route that checks its own credentials must exist to be trusted with them)."""
    if path in OPEN_PATHS:
        return None
    if not path.startswith(CLUSTER_PREFIX):
        return config.token
    if routed and path.startswith(tuple(self_authenticated)):
        return None
    return cluster_key(config)


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    config = request.app[CONFIG]
    secret = bearer_secret(
        config,
        request.app[SELF_AUTHENTICATED],
        request.path,
        routed=request.match_info.http_exception is None,
    )
    if secret is not None and not _bearer_matches(request, secret):
        peer_secret = request.path.startswith(CLUSTER_PREFIX) and config.cluster_secret is not None
        what = "the cluster secret" if peer_secret else "the node's token"
        raise ApiProblem(
            401,
            "unauthorized",
            f"missing or wrong credentials: send 'Authorization: Bearer <{what}>'",
            headers={"WWW-Authenticate": 'Bearer realm="forum"'},
        )
    return await handler(request)


def _bearer_matches(request: web.Request, secret: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # compare_digest: the time taken must not tell how much of the secret matched.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), secret.encode()
    )
