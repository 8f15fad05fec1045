"""Wiring replication into a node's app: ``forum serve`` passes :func:`extension`.

The extension adds the routes at once and, through ``cleanup_ctx``, runs
replication while the app runs::

    install   the routes; the node's Compactor gets a horizon of nothing, so
              nothing is compacted until replication knows the members
    startup   open the peer transport, start the replicator (a task group with
              one push and one anti-entropy task per peer), fill the status
              "peers" provider and the per-peer gauges, and give the Compactor
              the replicator's horizon (what every member holds)
    cleanup   the Compactor's horizon is nothing again; cancel the replicator's
              tasks and wait for them (in-flight calls are cancelled), close
              the transport

The app's own cleanup closes the Forum afterwards (it was set up first).
Settings come from the node's config (peers, advertise, and the cluster key:
the cluster secret, else the token, see :func:`forum.node.http.app.cluster_key`) and
from ``FORUM_REPL_*`` (:class:`~forum.replication.config.ReplicationConfig`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from forum.node.config.node import NodeConfig
from forum.node.http.app import cluster_key
from forum.node.http.keys import (
    COMPACTOR,
    CONFIG,
    FORUM,
    METRICS_REGISTRY,
    PEERS,
    READINESS,
    REPAIR,
    SELF_AUTHENTICATED,
)
from forum.replication.auth import ClusterAuth
from forum.replication.clocks import ClockWatch
from forum.replication.config import ReplicationConfig
from forum.replication.messages import ROUTE_PREFIX, Member
from forum.replication.metrics import ReplicationMetrics
from forum.replication.replicator import Replicator
from forum.replication.routes import REPLICATION, Replication, add_routes
from forum.replication.transport import HttpTransport

log = logging.getLogger(__name__)


def extension(app: web.Application) -> None:
    """Replicate the app's Forum with its peers, tuned from ``FORUM_REPL_*``."""
    configured(ReplicationConfig.from_env())(app)


def configured(config: ReplicationConfig) -> Callable[[web.Application], None]:
    """An extension with explicit tuning (tests, the benchmark)."""

    def install(app: web.Application) -> None:
        add_routes(app)
        # Every replication request carries an HMAC of the cluster key,
        # checked by the routes: the node asks no bearer secret of them.
        app[SELF_AUTHENTICATED] = app[SELF_AUTHENTICATED] | {ROUTE_PREFIX}
        # The node alone would compact up to its own vector; a member of a
        # cluster must not before it knows what the others hold.
        app[COMPACTOR].set_horizon(_nothing_stable)
        app.cleanup_ctx.append(functools.partial(_replicating, config))

    return install


async def _replicating(config: ReplicationConfig, app: web.Application) -> AsyncIterator[None]:
    node = app[CONFIG]
    forum = app[FORUM]
    me = Member(forum.strand.origin, advertised_url(node))
    auth = ClusterAuth(cluster_key(node), config.max_clock_skew)
    metrics = ReplicationMetrics(app[METRICS_REGISTRY])
    clocks = ClockWatch(config.warn_clock_skew, config.max_clock_skew)
    async with (
        HttpTransport(auth, config, clocks) as transport,
        Replicator(
            forum=forum,
            me=me,
            seeds=node.peers,
            transport=transport,
            metrics=metrics,
            config=config,
            forget_after=node.forget_after,
            clocks=clocks,
        ) as replicator,
    ):
        app[REPLICATION] = Replication(replicator, auth)
        app[PEERS] = lambda: clocks.annotate(replicator.status())
        # A node whose clock its peers refuse takes writes that reach no one.
        app[READINESS] = clocks.readiness
        metrics.watch_peers(replicator.status)
        app[REPAIR] = replicator.repair_document
        if forum.strand.damage is not None:
            # Before the node listens: clients never see the damaged live set.
            await replicator.repair()
        elif forum.strand.config.repair:
            log.info("repair: the data directory is whole; nothing to repair")
        app[COMPACTOR].set_horizon(replicator.horizon)
        log.info(
            "replication: advertising %s, %d seed peer(s), requests signed with %s",
            me.url or "nothing (port 0 and no --advertise: peers cannot learn this node)",
            len(node.peers),
            _key_source(node),
        )
        try:
            yield
        finally:
            app[COMPACTOR].set_horizon(_nothing_stable)
            metrics.close()


def _nothing_stable() -> dict[str, int]:
    """The horizon while replication does not run: nothing may be dropped."""
    return {}


def _key_source(node: NodeConfig) -> str:
    if node.cluster_secret is not None:
        return "the cluster secret"
    if node.token is not None:
        return "the token (no --cluster-secret: peers must share the token)"
    return "nothing (no --cluster-secret or --token: the routes are open)"


def advertised_url(node: NodeConfig) -> str | None:
    """The URL peers should dial us at; ``None`` if unknown (port 0 and no --advertise)."""
    if node.advertise is None and node.port == 0:
        return None
    return node.advertise_url()
