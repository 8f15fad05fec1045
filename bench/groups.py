"""The benches' scaled-out cluster of real processes: G replica groups of R nodes, one map.

:class:`GroupedCluster` is a :class:`forum.deploy.cluster.Cluster` with
groups (its nodes started with ``--cluster-map``: each finds its group by
its URL, and its group's other members are its peers); with one group of N
it is the full mesh, so one bench compares the two shapes on the same code. Beside each node runs
one worker (bench/cluster_worker.py: a coordinator ``Worker`` on a
``ClusterClient``, as ``forum worker`` will be once it takes a map), homed on
that node's group and reaching the group through that node first.

Which member of a group a ``ClusterClient`` calls first is the one given
as its ``prefer``, else one its client id draws (then it fails over in
order). A worker is given its own node: bench/cluster_worker.py's
``--rotate r`` is its place in its group (:func:`rotated` puts it first),
as a deployment puts a worker next to its node. The producer's clients
start from the members their ids draw.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from forum.deploy.cluster import Cluster, ClusterConfig
from forum.deploy.demo import SINK_URL_ENV
from forum.deploy.processes import NodeService, WorkerService
from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import ClusterMap, load_map
from forum.node.cluster.slots import slot_of
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
    """``groups`` replica groups of ``replicas`` nodes under the map
    :class:`Cluster` writes (its ``groups``), a worker beside each node (see
    the module's docstring). ``home_only``: each worker looks in its home
    group alone, never stealing."""

    def __init__(
        self, cfg: ClusterConfig, groups: int, replicas: int, home_only: bool = False
    ) -> None:
        super().__init__(dataclasses.replace(cfg, groups=groups, replicas=replicas, workers=0))
        self.replicas = replicas
        self.home_only = home_only
        self.map = ClusterMap(0, ())

    async def start(self) -> None:
        await super().start()
        assert self.map_path is not None  # a cluster with groups has a map
        self.map = load_map(self.map_path)
        for gid, nodes in self.groups.items():
            for place, node in enumerate(nodes):
                self.workers.append(self._worker(gid, place, node))
        for worker in self.workers:
            await worker.start()

    def _worker(self, gid: str, place: int, node: NodeService) -> ClusterWorkerService:
        name = f"worker-{node.name}"
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
