"""What a simulated run is: the costs it charges and the world it builds.

Costs are CPU service times in seconds on one core, from the repository's
measured single-cluster runs (:mod:`.calibration` checks them); a run's
shape, load and faults are a :class:`Config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal


@dataclass(frozen=True, slots=True)
class Costs:
    """CPU per operation, seconds. The node's per-job cost splits into the
    writer's request handling (``write_job``), the taker's reserve and ack,
    and, on each other member, the apply of the job's two entries (its Write
    and its Take) plus the sender's push of each: 0.40 ms per extra member
    per job, the slope of the measured 3 / 5 / 7-node runs."""

    write_call: float = 0.00010
    write_job: float = 0.00040
    reserve_call: float = 0.00010
    reserve_job: float = 0.00020
    ack_job: float = 0.00040
    push_call: float = 0.00005
    push_entry: float = 0.00006
    apply_entry: float = 0.00014
    ae_side: float = 0.00150
    lend_call: float = 0.00010
    status_call: float = 0.00005
    worker_reserve: float = 0.00030
    worker_claim: float = 0.00050
    worker_complete: float = 0.00060
    worker_ack: float = 0.00050
    redis_claim: float = 0.00018
    redis_complete: float = 0.00019
    redis_dir_write: float = 0.00003
    redis_dir_read: float = 0.00002
    redis_dir_read_per_group: float = 0.0000005

    @property
    def worker_job(self) -> float:
        return self.worker_reserve + self.worker_claim + self.worker_complete + self.worker_ack

    @property
    def redis_job(self) -> float:
        return self.redis_claim + self.redis_complete


FaultKind = Literal[
    "partition_member",  # one member of a group cut from the others (its workers stay)
    "partition_producers",  # a whole group cut from every producer
    "partition_redis",  # the workers of a group cut from the Lens's Redis
    "crash",  # a node killed and restarted on its disk
    "wipe",  # a node killed and restarted with its disk lost
    "stall",  # a node's CPU stalls 200 ms in every 500 ms
    "redis_failover",  # a Redis master fails over, losing its last writes
    "add_group",  # a group joins the map
    "drain_group",  # a group is drained (no new writes) and retired when empty
]


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    at: float
    duration: float = 1.0
    group: int = 0
    member: int = 0


@dataclass(frozen=True, slots=True)
class Config:
    """One run. Durations are simulated seconds (scaled down from minutes:
    the directory's period and the caches are scaled with them)."""

    groups: int = 1
    replicas: int = 3
    zones: int = 3
    workers_per_group: float = 4.0
    worker_slots: int = 16
    work_ms: float = 5.0
    producers_per_group: int = 3
    rate_per_group: float = 1000.0
    producer_batch_s: float = 0.005
    #: ``None``: producers write at ``rate_per_group`` whatever happens (open
    #: loop); a number: each producer keeps at most that many batches
    #: unanswered (the calibration's producer: one at a time).
    producer_window: int | None = None
    #: A number: at most that many jobs written to each group and not yet
    #: done, split over the producers (the capacity runs: they offer more than
    #: the groups take, and a bounded backlog per group measures what each
    #: group completes, not how fast a queue grows; a slow group does not
    #: hold back the producers' writes to the others).
    backlog_window: int | None = None
    #: The calibration's producer: batches of exactly this many jobs, round
    #: robin over the members, ``total_jobs`` in all (``None``: Poisson
    #: arrivals at ``rate_per_group``, each producer sticky to one member).
    batch_jobs: int | None = None
    total_jobs: int | None = None
    bursty: bool = False
    #: Redis masters for the Lens; ``None``: as many as the offered load
    #: needs at ``redis_utilisation`` of a core each (the Lens scaled with G).
    redis_masters: int | None = None
    redis_utilisation: float = 0.5
    lens_shards: int = 1024
    #: ``bounded``: rendezvous with bounded loads (every group holds the
    #: mean +- 1 slot); ``rendezvous``: plain rendezvous, equal weights (the
    #: largest of 100 groups holds 1.19 x the mean).
    slot_table: Literal["bounded", "rendezvous"] = "bounded"
    lending: bool = True
    remote_delay: float = 0.010
    remote_hold: float = 2.0
    batch_delay: float = 0.002
    max_batch: int = 512
    ae_interval: float = 1.0
    lease: float = 2.0
    claim_lease: float = 3.0
    long_poll: float = 0.5
    directory_period: float = 0.5
    directory_cache: float = 1.0
    #: ``age``: steal when home is empty or much younger than a backlog
    #: (the lead's rule); ``rate``: also steal a share of batches matching
    #: the groups' deficit of workers (their write rate over the capacity of
    #: the workers homed on them), so a steady imbalance is served steadily.
    steal: Literal["age", "rate"] = "rate"
    #: A worker whose home still gives it work also steals when a group's
    #: oldest tuple is ``steal_age_factor`` x home's + ``steal_age_slack``
    #: old. Off: at 100 groups some group nearly always looks that old, and
    #: the steals pull workers off groups that then fall behind (0.82 of
    #: linear in a 5 s run, against 0.917 without). An empty home steals
    #: whatever this says.
    steal_by_age: bool = False
    steal_age_factor: float = 2.0
    steal_age_slack: float = 0.5
    copies: int = 1
    delayed_fraction: float = 0.0
    slot_skew: float = 0.0
    queues: int = 20
    uneven_workers: bool = False
    #: ``balanced``: a worker's home is the group with the fewest workers
    #: homed, ties by rendezvous on its id (what a worker can do reading the
    #: workers' registry in the Lens); ``rendezvous``: the first group in
    #: rendezvous order on its id (k=1, the lead's choice: the counts are
    #: Poisson-uneven, and some groups get none; the bench shows both).
    homes: Literal["rendezvous", "balanced"] = "balanced"
    duration: float = 4.0
    warmup: float = 1.5
    drain: float = 20.0
    #: The calibration's shared machine: every process on ``host_cores``
    #: cores (``None``: one core per process).
    host_cores: int | None = None
    #: The share of the host's cores other work takes (the measured runs'
    #: machine was shared: load average 5-7 on 2 cores).
    host_busy: float = 0.0
    seed: int = 1
    faults: tuple[Fault, ...] = field(default_factory=tuple)
    costs: Costs = field(default_factory=Costs)

    def __post_init__(self) -> None:
        if self.groups < 1 or self.replicas < 1 or self.copies > self.replicas:
            raise ValueError(f"bad shape: {self.groups} groups of {self.replicas}")
        if self.warmup >= self.duration:
            raise ValueError("warmup must end before the run does")

    def but(self, **changes: object) -> Config:
        return replace(self, **changes)  # type: ignore[arg-type]
