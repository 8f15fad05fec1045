"""Compaction against a model of the live set (hypothesis, three nodes in memory).

Random writes, takes, partitions (``network.cut``), restarts and compaction
passes (``Forum.compact`` with the replicator's horizon) run on three
replicating nodes. ``forget_after`` is either long (no member is ever
forgotten: the horizon waits for everyone) or next to nothing (every member
is always forgotten: each node compacts whatever it holds itself, the
hardest case for dead ranges and rechecks). After every node is healed and
running, each must end with the model's live set: every acknowledged write
not taken, and nothing taken ever live again.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from forum.node.core.entries import EntryId
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from forum.replication.auth import ClusterAuth
from forum.replication.memory import MemoryNetwork, MemoryTransport
from forum.replication.messages import Member
from forum.replication.metrics import ReplicationMetrics
from forum.replication.replicator import Replicator
from forum.replication.routes import Replication
from tests.fixtures.nodes import eventually
from tests.replication.test_compaction import FAST, JOBS

pytestmark = pytest.mark.slow

NAMES = ("a", "b", "c")
Op = tuple[str, int]
OPS = st.tuples(
    st.sampled_from(["write", "take", "cut", "heal", "restart", "compact", "compact_all"]),
    st.integers(0, len(NAMES) - 1),
)
#: The history that needs a recheck: a holds a Write live that b and c took
#: and dropped, Take and all, while a was cut off (its Take is gone for good).
STALE = [("write", 0), ("cut", 0), ("take", 1), ("compact_all", 0), ("heal", 0)]


class SimNode:
    """One node: a Forum on its own directory and its replicator, on the network."""

    def __init__(self, name: str, root: Path, network: MemoryNetwork, forget_after: float) -> None:
        self.name = name
        self.url = f"http://{name}.memory:1"
        self._root = root
        self._network = network
        self._forget_after = forget_after
        self.forum: Forum | None = None
        self.replicator: Replicator | None = None
        self._transport: MemoryTransport | None = None

    async def start(self) -> None:
        cfg = StrandConfig().with_storage(self._root / self.name).with_node_name(self.name)
        forum = Forum(await Strand.open(cfg.with_fsync("never")), remote_delay=0)
        auth = ClusterAuth("secret")
        self._transport = MemoryTransport(self._network, auth, FAST, caller=self.url)
        replicator = Replicator(
            forum=forum,
            me=Member(forum.strand.origin, self.url),
            seeds=[f"http://{n}.memory:1" for n in NAMES if n != self.name],
            transport=self._transport,
            metrics=ReplicationMetrics(CollectorRegistry()),
            config=FAST,
            forget_after=self._forget_after,
        )
        await replicator.__aenter__()
        self.forum, self.replicator = forum, replicator
        self._network.attach(self.url, Replication(replicator, auth))

    async def stop(self) -> None:
        if self.forum is None or self.replicator is None:
            return
        self._network.detach(self.url)
        await self.replicator.aclose()
        await self.forum.close()
        self.forum = self.replicator = None


@dataclass
class Model:
    written: dict[EntryId, bytes]
    taken: set[EntryId]

    def live(self) -> set[tuple[EntryId, bytes]]:
        return {(i, p) for i, p in self.written.items() if i not in self.taken}


def live(forum: Forum) -> set[tuple[EntryId, bytes]]:
    return {(t.id, t.payload) for t in forum.list(JOBS, limit=100_000).tuples}


async def step(op: str, node: SimNode, nodes: list[SimNode], network: MemoryNetwork,
               model: Model) -> None:  # fmt: skip
    """Do ``op`` on ``node`` (or the network, or every node), and note it in ``model``."""
    forum, replicator = node.forum, node.replicator
    if op == "write" and forum is not None:
        payload = b"job-%d" % (len(model.written) + 1)
        model.written[await forum.write(payload)] = payload
    elif op == "take" and forum is not None:
        found = await forum.take_entry(JOBS)
        if found is not None:
            model.taken.add(found.id)
    elif op == "cut":
        network.cut(node.url)
    elif op == "heal":
        network.heal(node.url)
    elif op == "restart":
        await node.stop()
        await node.start()
    elif op == "compact" and forum is not None and replicator is not None:
        await forum.compact(replicator.horizon(), seal=True)
    elif op == "compact_all":
        for other in nodes:
            if other.forum is not None and other.replicator is not None:
                await other.forum.compact(other.replicator.horizon(), seal=True)


async def run(root: Path, ops: list[Op], pauses: list[float], forget_after: float) -> None:
    network = MemoryNetwork()
    nodes = [SimNode(name, root, network, forget_after) for name in NAMES]
    model = Model({}, set())
    try:
        for node in nodes:
            await node.start()
        for (op, i), pause in zip(ops, pauses, strict=False):
            await step(op, nodes[i], nodes, network, model)
            await asyncio.sleep(pause)
        for node in nodes:
            network.heal(node.url)
        expected = model.live()

        async def at_the_model() -> bool:
            return all(n.forum is not None and live(n.forum) == expected for n in nodes)

        await eventually(at_the_model, 20, "every node at the model's live set")
    finally:
        for node in nodes:
            await node.stop()


@example(ops=STALE, pauses=[0.2, 0.0, 0.1, 0.0, 0.0], forget_after=1e-6)
@given(
    ops=st.lists(OPS, min_size=1, max_size=30),
    pauses=st.lists(st.sampled_from([0.0, 0.0, 0.02, 0.1]), min_size=30, max_size=30),
    forget_after=st.sampled_from([1e-6, 3600.0]),
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_histories_with_compaction_end_at_the_model(
    ops: list[Op], pauses: list[float], forget_after: float
) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(run(Path(root), ops, pauses, forget_after))
