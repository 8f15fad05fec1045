"""The benches' scaled-out cluster of real processes: G replica groups of R nodes, one map.

:class:`GroupedCluster` is a :class:`forum.deploy.cluster.Cluster` whose
nodes are started with ``--cluster-map`` (each finds its group by its URL,
and its group's other members are its peers) instead of ``--peer`` to every
other node; with one group of N it is the full mesh ``Cluster`` starts, so
one bench compares the two shapes on the same code. Beside each node runs
one worker (bench/cluster_worker.py: a coordinator ``Worker`` on a
``ClusterClient``, as ``forum worker`` will be once it takes a map), homed on
that node's group and reaching the group through that node first.

Which member of a group a ``ClusterClient`` calls is the first of the
group's members in its map (``NodePool`` is sticky, failing over in order).
So each client here is given the map with every group's members rotated
(:func:`rotated`): a worker beside member r of its group, and the producer's
client r, call member r first, as a deployment puts a worker next to its
node. The epoch is unchanged, so a refresh from a node does not undo it
(a client takes a map only at a higher epoch).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from forum.deploy.cluster import Cluster, ClusterConfig
from forum.deploy.demo import SINK_URL_ENV
from forum.deploy.processes import NodeService, WorkerService
from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.cluster import ClusterMap, Group, slot_of
from forum.node.core.space import Pattern

BENCH = Path(__file__).resolve().parent
#: How far the search for a client id homed on a given group goes (a group
#: is a client's home for about one id in G).
_HOMED_TRIES = 10_000


def rotated(cluster: ClusterMap, by: int) -> ClusterMap:
    """``cluster`` with each group's members rotated ``by`` places: a client
    given it calls member ``by`` (mod the group's size) of each group first."""
    groups = []
    for g in cluster.groups:
        first = by % len(g.members)
        groups.append(dataclasses.replace(g, members=g.members[first:] + g.members[:first]))
    return ClusterMap(cluster.epoch, tuple(groups))


def homed_id(cluster: ClusterMap, group: str, base: str) -> str:
    """A client id (``base-n``) whose first home group in ``cluster`` is ``group``."""
    for n in range(_HOMED_TRIES):
        candidate = f"{base}-{n}"
        if ClusterClient(cluster, client_id=candidate).home[0] == group:
            return candidate
    raise ValueError(f"no client id homed on group {group!r} in {_HOMED_TRIES} tries")


def owned_keys(cluster: ClusterMap, group: str, count: int, prefix: str = "job-") -> list[str]:
    """The first ``count`` keys ``<prefix><n>`` whose slot ``group`` owns:
    keyed writes that go to ``group`` (a client homed there writes and
    reserves in one group)."""
    keys: list[str] = []
    n = 0
    while len(keys) < count:
        key = f"{prefix}{n}"
        if cluster.owner(slot_of(key)).id == group:
            keys.append(key)
        n += 1
    return keys


async def one_copy_bytes(root: Path, prefix: str, jobs: int = 50) -> float:
    """What one job takes in one Strand, measured: a node of its own (under
    ``root``) is written ``jobs`` jobs as the bench writes them (one keyed
    write each), each then reserved and acked; its ``strand_bytes`` grew by
    this much per job. (A member that gets the job by replication gets it in
    batches, under fewer frames: a little less.)"""
    node = NodeService("one-copy", root)
    await node.start()
    try:
        async with ForumClient(node.url, timeout=10) as client:
            before = (await client.status()).strand_bytes
            for i in range(jobs):
                job = f"{prefix}{i:06d}"
                await client.write(job.encode(), key=job)
            for _ in range(jobs):
                found = await client.reserve(Pattern(prefix.encode()), 10.0)
                assert found is not None, "a job written alone was not there to reserve"
                await client.ack(found.id)
            return ((await client.status()).strand_bytes - before) / jobs
    finally:
        await node.stop()


class ClusterWorkerService(WorkerService):
    """bench/cluster_worker.py: a ``Worker`` on a ``ClusterClient`` (its
    metrics port, as ``forum worker``'s, says it is ready)."""

    def command(self) -> list[str]:
        return [sys.executable, str(BENCH / "cluster_worker.py"), "--metrics-port",
                str(self.port), *self.args]  # fmt: skip


class GroupedCluster(Cluster):
    """``groups`` replica groups of ``replicas`` nodes (``node-a``.. in group
    order, groups ``g1``..), one map, a worker beside each node (see the
    module's docstring). ``cfg.nodes`` and ``cfg.workers`` are set from them.
    ``home_only``: each worker looks in its home group alone, never stealing."""

    def __init__(
        self, cfg: ClusterConfig, groups: int, replicas: int, home_only: bool = False
    ) -> None:
        super().__init__(dataclasses.replace(cfg, nodes=groups * replicas, workers=0))
        self.replicas = replicas
        self.home_only = home_only
        #: Each group's nodes, in member order.
        self.groups = {
            f"g{g + 1}": self.nodes[g * replicas : (g + 1) * replicas] for g in range(groups)
        }
        self.map = ClusterMap(
            1, tuple(Group(gid, tuple(n.url for n in nodes)) for gid, nodes in self.groups.items())
        )
        self.map_path = self.root / "cluster-map.json"

    def _peer_args(self, node: NodeService) -> list[str]:
        # The map, not peers: a node's group's other members are its peers.
        return ["--cluster-map", str(self.map_path)]

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.map_path.write_text(json.dumps(self.map.to_document()))
        await super().start()
        for gid, nodes in self.groups.items():
            for place, node in enumerate(nodes):
                self.workers.append(self._worker(gid, place, node))
        for worker in self.workers:
            await worker.start()

    def _worker(self, gid: str, place: int, node: NodeService) -> ClusterWorkerService:
        name = f"worker-{node.name[-1]}1"
        worker = ClusterWorkerService(
            name,
            self.root,
            [
                "--map", str(self.map_path),
                "--rotate", str(place),
                "--client-id", homed_id(self.map, gid, name),
                "--redis-url", self.redis_url,
                "--prefix", self.cfg.prefix,
                "--concurrency", str(self.cfg.concurrency),
                "--lease", str(self.cfg.lease),
                "--owner", name,
                *(["--home-only"] if self.home_only else []),
            ],
        )  # fmt: skip
        worker.env.update({SINK_URL_ENV: self.sink_url, **self.cfg.worker_env})
        return worker
