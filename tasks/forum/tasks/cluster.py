"""How an app reaches its cluster: :class:`AppCluster`, one
:class:`~forum.node.client.cluster.ClusterClient` over the app's nodes.

An app is given a few node URLs (``App(nodes=[...])``), any nodes of the
cluster. Before its first call it asks the first of them that answers for
the cluster map (``GET /v1/map``, once per open app), so that every enqueue
goes to its key's group (every enqueue has a key: the slot's group sees
every copy of one job, and dedup at write stays exact) however many groups
the cluster has. Reads gather over the groups (status reads every group
until one has the job; listings page through them one after another), and
the client takes a newer map whenever an answer names one.

A cluster without a map (the node answers 404) is its nodes, as before:
the calls go through a :class:`~forum.node.client.pool.NodePool` of them,
the same requests and the same client CPU per enqueue as before this
module (routing by slot costs a ClusterClient some 10 µs a write, for
nothing when there is one group), after that one look, and one more every
``MAP_REFRESH`` seconds (as a ClusterClient looks for a newer map): a node
that has a map by then, or names a map's epoch in an answer, gives the app
its map.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from forum.coordinator.directory import DirectoryKeeper, RedisDirectory
from forum.coordinator.presence import client_for
from forum.coordinator.redis_url import close
from forum.coordinator.settings import LensConfig
from forum.node.client.cluster import MAP_REFRESH, ClusterClient
from forum.node.client.pool import NodePool
from forum.node.cluster.map import ClusterMap
from forum.node.core.errors import NodeUnavailable
from forum.node.core.resource import AsyncResource

log = logging.getLogger(__name__)
T = TypeVar("T")


async def worker_space(urls: Sequence[str], token: str | None, **options: Any) -> ClusterClient:
    """A worker's :class:`ClusterClient` of the cluster whose map the first
    of ``urls`` to answer serves (of those nodes as one group when it has
    none). When none answers yet, of those nodes as one group, as a worker
    that waits for its node: it takes the map from the first answer that
    names its epoch. ``options`` are the client's."""
    try:
        return await ClusterClient.discover(urls, token, **options)
    except NodeUnavailable as exc:
        log.warning("no node answers yet (%s): waiting for one", exc)
        return ClusterClient(urls, token, **options)


@contextlib.asynccontextmanager
async def worker_cluster(
    urls: Sequence[str],
    token: str | None,
    config: LensConfig,
    owner: str,
    cluster: ClusterMap | None = None,
) -> AsyncIterator[ClusterClient]:
    """A worker's space for the body (``cluster``'s, else :func:`worker_space`'s),
    homed by its ``owner`` id, stealing by the directory in the Lens's Redis
    (``config``'s), with a :class:`DirectoryKeeper` publishing it beside it
    (forum.coordinator.directory; it publishes nothing for one group)."""
    redis = client_for(config)
    try:
        directory = RedisDirectory(redis, config.namespace)
        if cluster is None:
            space = await worker_space(urls, token, client_id=owner, directory=directory)
        else:
            space = ClusterClient(
                cluster,
                token,
                client_id=owner,
                directory=directory,
                prefer=urls[0] if urls else None,
            )
        keeper = DirectoryKeeper(
            redis,
            config.namespace,
            lambda: space.map,
            owner,
            token=token,
            prefer=space.home,
            on_keepers=space.balance,
        )
        async with space, keeper:
            yield space
    finally:
        await close(redis)


class AppCluster(AsyncResource):
    """The app's cluster (see the module docstring): :meth:`call` runs an
    operation on its :attr:`space` once the map is known."""

    def __init__(self, urls: Sequence[str], token: str | None = None) -> None:
        self._urls = tuple(urls)
        self._token = token
        #: The app's space: its nodes as one group until the map is taken.
        self.space = ClusterClient(self._urls, token)
        #: The nodes, while they serve no map (``None`` once one is taken).
        self._nodes: NodePool | None = None
        self._mapped = False
        self._mapping = asyncio.Lock()
        #: When to ask a node without a map for one again (loop time).
        self._look_again = 0.0

    async def call(self, operation: Callable[[Any], Awaitable[T]]) -> T:
        """``operation(space)``, the cluster's map taken first (on the first
        call); on a node of the app's, as before, while they serve none."""
        if not self._mapped:
            await self._take_map()
        nodes = self._nodes
        if nodes is None:
            return await operation(self.space)
        try:
            return await nodes.call(operation)
        finally:
            # The node named a map's epoch (an HTTP answer), or it is time to
            # look again (as a ClusterClient does): ask for the map next call.
            if nodes.current.map_epoch or asyncio.get_running_loop().time() >= self._look_again:
                self._mapped = False

    async def _take_map(self) -> None:
        """Take the map a node serves (none: the nodes are one group);
        ``NodeUnavailable`` when none answers, as an enqueue raises it."""
        async with self._mapping:
            if self._mapped:
                return
            async with await ClusterClient.discover(self._urls, self._token) as found:
                mapless = found.map.epoch == 0 and len(found.map.groups) == 1
                self.space.take_map(found.map)
            self._look_again = asyncio.get_running_loop().time() + MAP_REFRESH
            if mapless and self._nodes is None:
                self._nodes = NodePool(self._urls, self._token)
            elif not mapless and self._nodes is not None:
                await self._nodes.aclose()
                self._nodes = None
            self._mapped = True

    async def aclose(self) -> None:
        try:
            if self._nodes is not None:
                await self._nodes.aclose()
        finally:
            await self.space.aclose()
