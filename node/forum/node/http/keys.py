"""The node app's typed state: what handlers and extensions reach through ``app[KEY]``.

Extensions (replication) read the Forum and the config, register their
metrics in the app's own registry, and fill the ``peers`` section of status::

    def replication(app: web.Application) -> None:
        forum = app[FORUM]
        app[PEERS] = replicator.status            # () -> list[PeerStatus]
        Counter("forum_pushes", "...", registry=app[METRICS_REGISTRY])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from forum.node.api.model import Limits
from forum.node.api.status import PeerStatus, Readiness
from forum.node.config.node import NodeConfig
from forum.node.http.cluster import MapHolder
from forum.node.http.longpoll import LongPolls
from forum.node.http.ops import Space
from forum.node.http.stream import Streams
from forum.node.space.compactor import Compactor
from forum.node.space.forum import Forum
from forum.node.space.watch import WatchHub

#: Returns one row per peer (url, state, lag, ...), for ``/v1/status``.
PeersProvider = Callable[[], Sequence[PeerStatus]]
#: What replication says of this node taking writes (its clock against its
#: peers'), for ``/readyz`` and ``/v1/status``.
ReadinessProvider = Callable[[], Readiness]
#: Returns what a repair from peers found and did, for ``/v1/status`` (``None``: none ran).
RepairProvider = Callable[[], Mapping[str, Any] | None]
#: Adds routes, startup/cleanup handlers or metrics to the node's app before it starts.
Extension = Callable[[web.Application], None]

FORUM = web.AppKey("forum", Forum)
CONFIG = web.AppKey("config", NodeConfig)
#: The bounds the node enforces and its OpenAPI document advertises (from CONFIG).
LIMITS = web.AppKey("limits", Limits)
#: One registry per app, so two nodes in one process (tests) keep their metrics apart.
METRICS_REGISTRY = web.AppKey("metrics_registry", CollectorRegistry)
PEERS = web.AppKey[PeersProvider]("peers")
READINESS = web.AppKey[ReadinessProvider]("readiness")
#: Filled by replication when ``forum serve --repair`` repairs the node (forum.replication.repair).
REPAIR = web.AppKey[RepairProvider]("repair")
LONG_POLLS = web.AppKey("long_polls", LongPolls)
#: The operations both the HTTP handlers and the stream call (forum.node.http.ops).
SPACE = web.AppKey("space", Space)
#: The open streams (``GET /v1/stream``) and their figures.
STREAMS = web.AppKey("streams", Streams)
#: The background compactor; replication sets its horizon (``Compactor.set_horizon``).
COMPACTOR = web.AppKey("compactor", Compactor)
#: Path prefixes of an extension's routes that check their own credentials
#: (replication signs every request with an HMAC of the cluster secret, so the
#: secret itself never crosses the wire): no bearer token is asked of them.
SELF_AUTHENTICATED = web.AppKey[frozenset[str]]("self_authenticated")
#: Exact paths of an extension's routes open to anyone (the dashboard's login
#: page, which asks for the token): no bearer token is asked of them.
OPEN_ROUTES = web.AppKey[frozenset[str]]("open_routes")
#: Where a browser signs in (the dashboard's login page), named in a 401's
#: message on the client routes; empty without one.
LOGIN_PAGE = web.AppKey("login_page", str)
#: The path under which an extension serves pages to people (the dashboard's
#: ``/ui``): a browser's ``GET`` of one without a good credential is sent to
#: ``LOGIN_PAGE`` (303) instead of a 401 (forum.node.http.auth); empty without one.
PAGES_ROOT = web.AppKey("pages_root", str)
#: OpenAPI path items of an extension's own routes, by path (the dashboard's
#: pages): the node's document (forum.node.http.openapi) lists them beside its own,
#: with the refusals any route may give and the security the middleware
#: enforces added; empty without one.
DESCRIBED = web.AppKey[dict[str, dict[str, Any]]]("described")
#: Awaited before each ``GET /metrics`` renders (forum.node.http.metrics): an
#: extension's collectors read what they show there, at scrape time (the
#: dashboard's Lens counts); absent without one.
SCRAPE_REFRESH = web.AppKey[Callable[[], Awaitable[None]]]("scrape_refresh")
#: Monotonic time the app was built, for uptime in status.
STARTED = web.AppKey("started", float)
#: The node's watchers and the events they follow (``GET /v1/watch``, forum.node.http.watch).
WATCH_HUB = web.AppKey("watch_hub", WatchHub)
#: The cluster map and this node's group in it (absent on a node without a map).
CLUSTER = web.AppKey("cluster", MapHolder)
