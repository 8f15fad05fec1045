"""The runs the bench makes: the scaling runs and the failure scenarios.

Scaling, at each G (R=3, 5 workers of 16 slots per group on average,
homed by rendezvous, 5 ms jobs):

* a *latency* run: producers open loop at ``LATENCY_RATE`` jobs/s per group
  (about 65 % of a group's capacity), the Lens scaled with G: write-to-claim
  latency, takes per job, CPU per job, the history;
* throughput(1): at G=1, producers closed on the group's backlog (at most
  ``BACKLOG`` jobs written and not done), offering more than it takes;
* a *sustained* run: producers open loop at 0.92 x throughput(1) per group:
  the jobs/s completed against what is offered, and the latency (bounded
  when the groups keep up), with the Lens scaled with G or fixed at 1 or 4
  masters. A closed loop at every G would hide the imbalance stealing has to
  fix: a bounded backlog per group makes every group look equally deep.

Failure scenarios, each at G=5 under the latency run's load, each history
checked: see :data:`FAILURES`.
"""

from __future__ import annotations

import math

from .params import Config, Fault

LATENCY_RATE = 1000.0
#: The sustained runs offer this share of throughput(1) per group.
SUSTAINED_SHARE = 0.92
CAPACITY_RATE = 4000.0
BACKLOG = 600
#: A group's capacity as the capacity run measures it at G=1 (jobs/s), from
#: which the scaled Lens is sized: one Redis master per this many jobs/s.
GROUP_CAPACITY = 1550.0


def lens_masters(groups: int, utilisation: float = 0.5) -> int:
    """Masters for G groups at full capacity, each ``utilisation`` busy
    (0.37 ms of Redis CPU per job: ~1,350 jobs/s per master at 50 %)."""
    cfg = Config()
    return max(1, math.ceil(groups * GROUP_CAPACITY * cfg.costs.redis_job / utilisation))


def latency(groups: int, seed: int = 1, duration: float = 3.5) -> Config:
    return Config(
        groups=groups,
        rate_per_group=LATENCY_RATE,
        redis_masters=lens_masters(groups),
        duration=duration,
        warmup=1.5,
        seed=seed,
    )


def saturated(groups: int, seed: int = 1) -> Config:
    """Producers closed on each group's backlog, offering more than it takes:
    what the groups complete is their capacity (at G=1: throughput(1))."""
    return sustained(groups, CAPACITY_RATE, seed=seed).but(
        backlog_window=BACKLOG, duration=2.5, warmup=1.0
    )


def sustained(groups: int, per_group: float, masters: int | None = None, seed: int = 1) -> Config:
    """Producers open loop at ``per_group`` x G jobs/s (0.92 x throughput(1)
    a group): completing at least 0.9 x G x throughput(1) of it, with a
    bounded write-to-claim latency, is the target met."""
    return Config(
        groups=groups,
        rate_per_group=per_group,
        redis_masters=masters if masters is not None else lens_masters(groups),
        duration=3.0,
        warmup=1.5,
        drain=60.0,
        seed=seed,
    )


def _faulted(name: str, *faults: Fault, **changes: object) -> tuple[str, Config]:
    base = latency(5, duration=4.0).but(faults=faults, drain=30.0)
    return name, base.but(**changes) if changes else base


#: Name -> run. Times are simulated seconds from the start (the window is
#: 1.5-4 s); each fault starts inside it.
FAILURES: tuple[tuple[str, Config], ...] = (
    _faulted("member partitioned from its group", Fault("partition_member", 2.0, 1.5, 0, 0)),
    _faulted("group partitioned from producers", Fault("partition_producers", 2.0, 1.5, 1)),
    _faulted("workers partitioned from Redis", Fault("partition_redis", 2.0, 1.0, 2)),
    _faulted("node killed, back on its disk", Fault("crash", 2.0, 1.0, 0, 1)),
    _faulted("node killed, disk lost (copies=1)", Fault("wipe", 2.0, 1.0, 0, 1)),
    _faulted("node killed, disk lost (copies=2)", Fault("wipe", 2.0, 1.0, 0, 1), copies=2),
    _faulted("slow node (200 ms stalls)", Fault("stall", 2.0, 2.0, 3, 0)),
    _faulted("Redis failover losing 200 ms", Fault("redis_failover", 2.0, 0.5, 0, 0)),
    _faulted("group added mid-run", Fault("add_group", 2.0)),
    _faulted("group drained mid-run", Fault("drain_group", 2.0, 0.0, 4)),
    _faulted("hot slots (Zipf 1.0 over slots)", slot_skew=1.0),
    _faulted(
        "bursty, 10 % delayed, workers on half the groups",
        bursty=True,
        delayed_fraction=0.1,
        uneven_workers=True,
    ),
)
