"""A simulated deployment, run and measured: G groups, producers, workers,
the Lens; the faults of its config; the figures and the checked history.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from forum.deploy.history import Verdict

from .actors import Producer, Worker
from .engine import Cpu, Latency, Net, Sim, percentile
from .lens import Lens, Sink
from .node import Node
from .params import Config, Fault
from .records import Job, Stats
from .routing import SLOTS, SlotTable, Zipf, balanced, name_hash, ranked, score, slot_of

INTRA = Latency(0.0001, 0.0005)
CROSS = Latency(0.001, 0.002)


class Group:
    def __init__(self, gid: int, nodes: list[Node]) -> None:
        self.id = gid
        self.nodes = nodes
        self.state = "active"


def masters_for(cfg: Config) -> int:
    """Redis masters the Lens needs for the offered load, each at
    ``redis_utilisation`` of a core (the Lens scaled with G)."""
    if cfg.redis_masters is not None:
        return cfg.redis_masters
    load = cfg.rate_per_group * cfg.groups * cfg.costs.redis_job
    return max(1, math.ceil(load / cfg.redis_utilisation))


@dataclass(frozen=True, slots=True)
class Result:
    """One run's figures (rates per simulated second, CPU in ms per job)."""

    groups: int
    masters: int
    offered: float
    throughput: float
    takes_per_job: float
    p50_ms: float
    p99_ms: float
    node_ms: float
    worker_ms: float
    redis_ms: float
    redis_peak: float
    steals: int
    misplaced: int
    directory_writes_per_s: float
    events: int
    verdict: Verdict

    @property
    def cost_ms(self) -> float:
        return self.node_ms + self.worker_ms + self.redis_ms


class World:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.sim = Sim(cfg.seed)
        self.net = Net(self.sim, INTRA, CROSS)
        self.stats = Stats()
        self.lossy = bool(cfg.faults)
        self.host = Cpu(self.sim, cfg.host_cores) if cfg.host_cores else None
        self.lens = Lens(self.sim, self.stats, masters_for(cfg), cfg.lens_shards, cfg.zones)
        if self.host is not None:
            for master in self.lens.masters:
                master.cpu = self.host
        self.sink = Sink(self.lens)
        self.groups: list[Group] = []
        for _ in range(cfg.groups):
            self._add_group()
        self.table = SlotTable(self.active(), self.cfg.slot_table == "bounded")
        self._jobs = 0
        self._skew = Zipf(SLOTS, cfg.slot_skew) if cfg.slot_skew > 0 else None
        self._queues = Zipf(cfg.queues, 1.2)
        self._slot_perm = list(range(SLOTS))
        self.sim.rng.shuffle(self._slot_perm)
        self.workers = self._make_workers()
        self._publisher: list[Worker] = []
        n_producers = max(1, cfg.producers_per_group * cfg.groups)
        rate = cfg.rate_per_group * cfg.groups / n_producers
        self.producers = [Producer(self, i, rate) for i in range(n_producers)]

    # -- building -------------------------------------------------------------------

    def _cpu(self) -> Cpu:
        return self.host if self.host is not None else Cpu(self.sim)

    def _add_group(self) -> Group:
        gid = len(self.groups)
        nodes = [
            Node(self.sim, self.net, self.cfg, self.stats, gid, i, self._cpu())
            for i in range(self.cfg.replicas)
        ]
        for node in nodes:
            node.peers = [p for p in nodes if p is not node]
        group = Group(gid, nodes)
        self.groups.append(group)
        for node in nodes:
            for peer in node.peers:
                self.sim.every(self.cfg.ae_interval, partial(node.anti_entropy, peer), 0.2)
            self.sim.every(0.25, node.sweep)
        return group

    def active(self) -> list[int]:
        return [g.id for g in self.groups if g.state == "active"]

    def homed(self, group: int) -> int:
        """Workers homed on ``group`` (the workers' registry in the Lens)."""
        return self._homed.get(group, 0)

    def home_of(self, worker: str) -> int:
        return ranked(name_hash(worker), self.active())[0]

    def _make_workers(self) -> list[Worker]:
        count = max(1, round(self.cfg.workers_per_group * self.cfg.groups))
        workers = [Worker(self, i, 0, self._cpu()) for i in range(count)]
        self._assign_homes(workers)
        return workers

    def _assign_homes(self, workers: list[Worker]) -> None:
        """Each worker's home over the active groups (``cfg.homes``), and its
        member there: the workers of a group spread over its members."""
        cfg = self.cfg
        groups = self.active()
        if cfg.uneven_workers:
            groups = groups[: max(1, len(groups) // 2)]
        counts = dict.fromkeys(groups, 0)
        homes = balanced([w.name for w in workers], groups) if cfg.homes == "balanced" else {}
        for worker in workers:
            home = (
                homes[worker.name]
                if worker.name in homes
                else ranked(name_hash(worker.name), groups)[0]
            )
            worker.home = worker.target = home
            worker.member = counts[home]
            counts[home] += 1
        self._homed = counts

    def new_job(self) -> Job:
        cfg, rng = self.cfg, self.sim.rng
        self._jobs += 1
        name = f"j{self._jobs}"
        slot = self._slot_perm[self._skew.sample(rng)] if self._skew else slot_of(name)
        not_before = 0.0
        if cfg.delayed_fraction and rng.random() < cfg.delayed_fraction:
            not_before = self.sim.now + rng.uniform(0.1, 1.0)
        job = Job(name, slot, self._queues.sample(rng), self.sim.now, not_before)
        self.lens.know(job)
        return job

    def _publishers(self) -> None:
        """Each group's directory row is kept by the worker first in the
        group's rendezvous order over all workers (a group with no home
        workers is still published)."""
        if len(self._publisher) != len(self.groups):
            ids = [name_hash(w.name) for w in self.workers]
            self._publisher = []
            for group in self.groups:
                scores = [score(i, group.id) for i in ids]
                self._publisher.append(self.workers[scores.index(max(scores))])
        for group, worker in zip(self.groups, self._publisher, strict=True):
            if group.state != "retired":
                worker.publish(group.id)

    # -- faults ---------------------------------------------------------------------

    def _schedule(self, fault: Fault) -> None:
        sim = self.sim
        group = self.groups[fault.group] if fault.group < len(self.groups) else None
        node = group.nodes[fault.member] if group else None
        end = fault.at + fault.duration
        if fault.kind == "partition_member" and node is not None:
            pairs = [frozenset((node.name, p.name)) for p in node.peers]
            sim.at(fault.at, lambda: self.net.cut.update(pairs))
            sim.at(end, lambda: self.net.cut.difference_update(pairs))
        elif fault.kind == "partition_producers" and group is not None:
            pair = frozenset(("p", f"g{group.id}"))
            sim.at(fault.at, lambda: self.net.cut.add(pair))
            sim.at(end, lambda: self.net.cut.discard(pair))
        elif fault.kind == "partition_redis" and group is not None:
            pairs = [frozenset((w.name, "redis")) for w in self.workers if w.home == group.id]
            sim.at(fault.at, lambda: self.net.cut.update(pairs))
            sim.at(end, lambda: self.net.cut.difference_update(pairs))
        elif fault.kind in ("crash", "wipe") and node is not None:
            sim.at(fault.at, node.crash)
            sim.at(end, lambda: node.restart(wiped=fault.kind == "wipe"))
        elif fault.kind == "stall" and node is not None:
            for k in range(int(fault.duration / 0.5)):
                sim.at(fault.at + 0.5 * k, lambda: node.cpu.stall(0.2))
        elif fault.kind == "redis_failover":
            master = self.lens.masters[fault.member % len(self.lens.masters)]
            sim.at(fault.at, lambda: self._fail_over(master.index, 0.2))
            sim.at(end, lambda: setattr(master, "up", True))
        elif fault.kind == "add_group":
            sim.at(fault.at, self._grow)
        elif fault.kind == "drain_group" and group is not None:
            sim.at(fault.at, lambda: self._drain(group))

    def _fail_over(self, index: int, lose: float) -> None:
        master = self.lens.masters[index]
        master.up = False
        self.lens.failover(master, lose)

    def _remap(self) -> None:
        """A new map epoch: producers learn it from their next answer (here:
        at once), workers re-home over the active groups."""
        self.table = SlotTable(self.active(), self.cfg.slot_table == "bounded")
        for producer in self.producers:
            producer.table = self.table
        self._assign_homes(self.workers)

    def _grow(self) -> None:
        group = self._add_group()
        for node in group.nodes:
            node.sweep()
        self._remap()

    def _drain(self, group: Group) -> None:
        group.state = "draining"
        self._remap()

        def retire_when_empty() -> None:
            live = sum(len(n.own) + len(n.remote) + len(n.reserved) for n in group.nodes)
            if live == 0:
                group.state = "retired"
            else:
                self.sim.after(0.25, retire_when_empty)

        self.sim.after(0.25, retire_when_empty)

    # -- running --------------------------------------------------------------------

    def start(self, produce: bool = True) -> None:
        cfg, sim = self.cfg, self.sim
        for fault in cfg.faults:
            self._schedule(fault)
        host = self.host
        if host is not None and cfg.host_busy > 0:
            slice_s = 0.002
            period = slice_s / (cfg.host_busy * len(host.free))
            sim.every(period, lambda: host.run(slice_s, "other"))
        if produce:
            for producer in self.producers:
                producer.start()
        for worker in self.workers:
            sim.after(0.001 * sim.rng.random(), worker.start)
        sim.every(cfg.directory_period, self._publishers)

    def cpu_ms(self) -> dict[str, float]:
        """CPU handed out so far, per account (node, worker, redis), in ms."""
        return {k: v * 1000 for k, v in self._cpu_seconds().items()}

    def run(self) -> Result:
        cfg, sim, stats = self.cfg, self.sim, self.stats
        self.start()
        sim.run(cfg.warmup)
        before = self._cpu_seconds()
        redis_before = [m.cpu.busy.get("redis", 0.0) for m in self.lens.masters]
        done_before = len(stats.done_at)
        dir_before = stats.directory_writes
        sim.run(cfg.duration)
        after = self._cpu_seconds()
        window = cfg.duration - cfg.warmup
        done = len(stats.done_at) - done_before
        dir_writes = stats.directory_writes - dir_before
        peak = (
            max(
                m.cpu.busy.get("redis", 0.0) - b
                for m, b in zip(self.lens.masters, redis_before, strict=True)
            )
            / window
        )
        for producer in self.producers:
            producer.producing = False
        sim.run(cfg.duration + cfg.drain, done=self._drained)
        verdict = stats.history.check()
        per_job = {k: (after[k] - before[k]) / max(done, 1) * 1000 for k in after}
        return Result(
            groups=len(self.groups),
            masters=len(self.lens.masters),
            offered=cfg.rate_per_group * cfg.groups,
            throughput=done / window,
            takes_per_job=stats.takes / max(verdict.done, 1),
            p50_ms=percentile(stats.claim_latency, 0.50) * 1000,
            p99_ms=percentile(stats.claim_latency, 0.99) * 1000,
            node_ms=per_job["node"],
            worker_ms=per_job["worker"],
            redis_ms=per_job["redis"],
            redis_peak=peak,
            steals=stats.steals,
            misplaced=stats.misplaced,
            directory_writes_per_s=dir_writes / window,
            events=sim.events,
            verdict=verdict,
        )

    def _drained(self) -> bool:
        """Every write answered (or given up) and every acknowledged job done."""
        if any(p.inflight for p in self.producers):
            return False
        effects = self.stats.history.effects
        return all(effects.get(job, 0) for job in self.stats.history.acknowledged)

    def _cpu_seconds(self) -> dict[str, float]:
        cpus: list[Cpu] = []
        if self.host is not None:
            cpus.append(self.host)
        else:
            cpus.extend(n.cpu for g in self.groups for n in g.nodes)
            cpus.extend(w.cpu for w in self.workers)
            cpus.extend(m.cpu for m in self.lens.masters)
        totals = {"node": 0.0, "worker": 0.0, "redis": 0.0}
        for cpu in cpus:
            for account, busy in cpu.busy.items():
                totals[account] = totals.get(account, 0.0) + busy
        return totals


def simulate(cfg: Config) -> Result:
    return World(cfg).run()
