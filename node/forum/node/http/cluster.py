"""The cluster map a node serves (``GET /v1/map``) and names in every answer.

A node started with a map (forum.node.config.placement) holds it in a
:class:`MapHolder`: it serves the map, signed with the cluster secret when
one is set, and puts the map's epoch in the ``Forum-Map-Epoch`` header of
every HTTP answer, so a client with an older map learns there is a newer one
from whatever it asked. The holder looks at the map file every
``RELOAD_INTERVAL`` seconds and takes a changed file whose epoch is higher
(an operator's edit, a Kubernetes ConfigMap update); a lower or equal epoch,
or a file that cannot be read, is logged and the map in hand kept: a node
never goes back to an older map.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from forum.node.api.model import MAP_EPOCH_HEADER, ClusterMapBody
from forum.node.cluster.map import ClusterMap, Group, load_map
from forum.node.cluster.slots import slot_of
from forum.node.config.placement import Placement
from forum.node.core.errors import ClusterMapError
from forum.node.core.resource import in_background

log = logging.getLogger(__name__)

#: Seconds between two looks at the map file.
RELOAD_INTERVAL = 2.0


class MapHolder:
    """A node's current map, its group, and the file it came from."""

    def __init__(
        self,
        path: Path,
        placement: Placement,
        secret: str | None,
        counter: Counter | None = None,
    ) -> None:
        self.path = path
        self.map: ClusterMap = placement.map
        self.group: Group = placement.group
        self._secret = secret
        self._header = str(self.map.epoch)
        self._mtime = _mtime(path)
        #: Keyed tuples written here whose slot another group owns (a client
        #: fell through to this group, or routed by an older map).
        self.misplaced = 0
        self._misplaced = counter or misplaced_counter(None)

    def figures(self) -> tuple[str, int, int]:
        """What ``/v1/status`` shows: the group, the map's epoch, the misplaced writes."""
        return self.group.id, self.map.epoch, self.misplaced

    def note_write(self, key: str | bytes | None, count: int) -> None:
        """Count a write of ``count`` tuples under ``key`` if this group does not own its slot."""
        if key is not None and self.map.owner(slot_of(key)).id != self.group.id:
            self.misplaced += count
            self._misplaced.inc(count)

    def body(self) -> ClusterMapBody:
        """The map as ``GET /v1/map`` answers it."""
        document = self.map.to_document()
        signature = None if self._secret is None else self.map.signature(self._secret)
        return ClusterMapBody(**document, signature=signature, group=self.group.id)

    def reload(self) -> bool:
        """Take the file's map if it changed and its epoch is higher; whether it was taken."""
        mtime = _mtime(self.path)
        if mtime == self._mtime:
            return False
        self._mtime = mtime
        try:
            new = load_map(self.path)
        except ClusterMapError as exc:
            log.warning(
                "the cluster map file changed but cannot be used (%s); keeping epoch %d",
                exc,
                self.map.epoch,
            )
            return False
        if new.epoch <= self.map.epoch:
            log.warning(
                "the cluster map file changed to epoch %d, not above this node's %d; keeping %d",
                new.epoch, self.map.epoch, self.map.epoch,
            )  # fmt: skip
            return False
        try:
            self.group = new.group(self.group.id)
        except ClusterMapError:
            log.warning(
                "the cluster map of epoch %d no longer lists group %r", new.epoch, self.group.id
            )
        self.map, self._header = new, str(new.epoch)
        log.info("cluster map epoch %d taken (%d groups)", new.epoch, len(new.groups))
        return True

    async def on_response(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers[MAP_EPOCH_HEADER] = self._header

    async def watch(self, interval: float = RELOAD_INTERVAL) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reload()


def misplaced_counter(registry: CollectorRegistry | None) -> Counter:
    """``forum_cluster_misplaced_writes_total``: every node has it (0 without a map)."""
    return Counter(
        "forum_cluster_misplaced_writes",
        "Keyed tuples written here whose slot another group owns (misplaced, not lost).",
        registry=registry,
    )


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


async def watching(holder: MapHolder, app: web.Application) -> AsyncIterator[None]:
    """The holder's file watch while the app runs (a cleanup context)."""
    async with in_background(holder.watch(), "cluster-map-watch"):
        yield
