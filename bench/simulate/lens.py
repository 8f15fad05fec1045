"""The Lens on Redis masters, the effect sink, and the depth directory.

* Each master is a single-core CPU queue. A job's Lens shard is
  ``slot % lens_shards`` (a power of two dividing 16,384, so a slot is in one
  shard), and a shard's master is ``shard % masters``.
* A claim grants a fencing token (one counter, rising) unless the job is done
  or held under a live lease; a completion marks it done. A failover of a
  master loses the records written to it in its last ``lose`` seconds and
  bumps its epoch (the Lens's clock-based tokens stay above the old ones).
* The sink is the fenced effect store of ``forum.deploy.sink``: keyed by the
  claim key, it refuses a lower token and counts a second application under
  the same key as a rerun only when that key's master lost its state in
  between; any other second application is a duplicate effect (the run fails).
* The directory is one hash per queue in Redis, a field per group: the
  group's live tuples and its oldest one's age, written every
  ``directory_period`` by the group's publisher (2 x G writes a second).
"""

from __future__ import annotations

from dataclasses import dataclass

from .engine import Cpu, Sim
from .records import Job, Stats


@dataclass(slots=True)
class Claim:
    holder: str
    token: int
    until: float
    at: float


class Master:
    def __init__(self, sim: Sim, index: int, zone: int) -> None:
        self.cpu = Cpu(sim)
        self.index = index
        self.name = f"redis/m{index}"
        self.zone = zone
        self.up = True
        self.epoch = 0


@dataclass(frozen=True, slots=True)
class DirectoryRow:
    """One group's field: live tuples, the oldest one's age, the writes a
    second into it over the last period, and the workers homed on it (from
    the workers' registry)."""

    live: int
    oldest_age: float
    at: float
    rate: float = 0.0
    homed: int = 0


class Lens:
    def __init__(self, sim: Sim, stats: Stats, masters: int, shards: int, zones: int) -> None:
        self.sim = sim
        self.stats = stats
        self.shards = shards
        self.masters = [Master(sim, i, i % zones) for i in range(masters)]
        self.claims: dict[str, Claim] = {}
        self.done: dict[str, float] = {}
        self.token = 0
        self.directory: dict[int, DirectoryRow] = {}
        self._jobs: dict[str, Job] = {}

    def master_of(self, job: Job) -> Master:
        return self.masters[(job.slot % self.shards) % len(self.masters)]

    @property
    def directory_master(self) -> Master:
        return self.masters[0]

    def claim(self, job: Job, holder: str, lease: float) -> tuple[str, int]:
        """``("granted", token)``, ``("done", 0)`` or ``("held", 0)``."""
        if job.name in self.done:
            return "done", 0
        held = self.claims.get(job.name)
        now = self.sim.now
        if held is not None and held.until > now and held.holder != holder:
            return "held", 0
        self.token += 1
        self.claims[job.name] = Claim(holder, self.token, now + lease, now)
        return "granted", self.token

    def complete(self, job: Job, holder: str, token: int) -> bool:
        held = self.claims.get(job.name)
        if held is None or held.token != token:
            return False
        del self.claims[job.name]
        self.done[job.name] = self.sim.now
        return True

    def heartbeat(self, job: Job, token: int, lease: float) -> bool:
        held = self.claims.get(job.name)
        if held is None or held.token != token:
            return False
        held.until = self.sim.now + lease
        return True

    def failover(self, master: Master, lose: float) -> None:
        """The replica promoted lacks the master's last ``lose`` seconds."""
        since = self.sim.now - lose
        master.epoch += 1
        for name in [n for n, c in self.claims.items() if c.at >= since]:
            if self._on(name, master):
                del self.claims[name]
        for name in [n for n, at in self.done.items() if at >= since]:
            if self._on(name, master):
                del self.done[name]
        self.token += 1_000_000  # clock-based tokens: above every one granted before

    def _on(self, name: str, master: Master) -> bool:
        job = self._jobs.get(name)
        return job is not None and self.master_of(job) is master

    def know(self, job: Job) -> None:
        self._jobs[job.name] = job


class Sink:
    """The effect store, keyed by claim key (the job's key) as
    ``forum.deploy.sink`` is: what the history's ``applied`` and ``reruns``
    see. A lower token than the last applied is refused (``StaleToken``). A
    second application under a higher token is a *rerun* when the job was
    never completed in the Lens (its holder applied the effect and then
    could not complete: it died, or lost Redis) or when the job's master lost
    its state since; after a completion the Lens kept, it is a *duplicate
    effect*: the Lens handed out a claim on a done job, and the run fails."""

    def __init__(self, lens: Lens) -> None:
        self.lens = lens
        self.tokens: dict[str, tuple[int, int]] = {}
        self.completed: dict[str, int] = {}

    def apply(self, job: Job, token: int) -> bool:
        """Apply the job's effect under ``token``; True the first time."""
        history = self.lens.stats.history
        epoch = self.lens.master_of(job).epoch
        held = self.tokens.get(job.name)
        if held is None:
            self.tokens[job.name] = (token, epoch)
            history.applied([job.name])
            return True
        if token <= held[0]:
            return False  # StaleToken: refused, not counted
        self.tokens[job.name] = (token, epoch)
        done_epoch = self.completed.get(job.name)
        if done_epoch is None or epoch > done_epoch:
            history.reruns[job.name] += 1
        else:
            history.applied([job.name])
        return False

    def complete(self, job: Job) -> None:
        """The Lens recorded the job done (under the master's epoch now)."""
        self.completed[job.name] = self.lens.master_of(job).epoch
