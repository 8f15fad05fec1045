"""Producers and workers: the clients of the groups and the Lens.

A producer writes each job to its slot's group (the slot table's owner),
one member sticky per producer; a member that does not answer within
``TIMEOUT`` is passed over for the next, and a group none of whose members
answers for the slot's next group in rendezvous order (the write is then
misplaced, still durable and takeable).

A worker has a home group (the world assigns it: the least-staffed group,
ties by rendezvous on its id, or rendezvous alone, ``Config.homes``) and a
member of it, and reserves batches there by long poll; an empty answer moves
it to the next member. It steals when its home is empty (and, with
``steal_by_age``, when the directory shows a group whose oldest tuple is
``steal_age_factor`` times older than its home's plus ``steal_age_slack``):
two groups sampled with weights live x age, the deeper of the two, staying
while that group gives it work. With ``steal="rate"`` it also steals, batch by batch, the share that
matches the groups' deficit of homed workers for their write rate. A steal
does not wait at the node and is given up after ``STEAL_TIMEOUT``. Each job
is claimed in the Lens, run (``work_ms``, not CPU), its effect applied
through the sink, completed in the Lens and acked on the node that handed it
out.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from .engine import Cpu
from .lens import DirectoryRow
from .node import TIMEOUT, Node
from .records import Job
from .routing import name_hash

if TYPE_CHECKING:
    from .world import World

#: A steal's answer is awaited this long, then the worker goes home: a group
#: whose members are saturated (its backlog is why it was chosen) must not
#: hold every worker that tries it.
STEAL_TIMEOUT = 0.1


class Producer:
    def __init__(self, world: World, index: int, rate: float) -> None:
        self.world = world
        self.index = index
        self.name = f"p/{index}"
        self.zone = index % world.cfg.zones
        self.rate = rate
        self.producing = True
        self.table = world.table
        self.burst = 1.0
        self.inflight = 0
        self.made = 0
        self.open: dict[int, int] = {}
        self.sent = 0

    def start(self) -> None:
        sim = self.world.sim
        sim.every(self.world.cfg.producer_batch_s, self._tick)
        if self.world.cfg.bursty:
            sim.every(0.25, self._flip)

    def _flip(self) -> None:
        self.burst = 1.8 if self.world.sim.rng.random() < 0.5 else 0.2

    def _arrivals(self) -> int:
        """Poisson arrivals in one tick (Knuth's method: the means are small)."""
        mean = self.rate * self.burst * self.world.cfg.producer_batch_s
        rng = self.world.sim.rng
        limit, k, p = math.exp(-mean), 0, rng.random()
        while p > limit:
            k += 1
            p *= rng.random()
        return k

    def _tick(self) -> None:
        if not self.producing:
            return
        world = self.world
        window = world.cfg.producer_window
        if window is not None and self.inflight >= window:
            return  # closed loop: the producer waits for its answers
        backlog = world.cfg.backlog_window
        batches: dict[int, list[Job]] = {}
        count = self._arrivals()
        if world.cfg.batch_jobs is not None:
            count = min(world.cfg.batch_jobs, (world.cfg.total_jobs or 1 << 62) - self.made)
            self.made += count
            self.sent += 1
        share = 0 if backlog is None else max(1, math.ceil(backlog / len(world.producers)))
        for _ in range(count):
            job = world.new_job()
            order = self.table.order(job.slot)
            if share:
                if self.open.get(order[0], 0) >= share:
                    continue  # closed loop: this group has our share of its backlog
                self.open[order[0]] = self.open.get(order[0], 0) + 1
                job.by, job.owner = self.index, order[0]
            batches.setdefault(order[0], []).append(job)
        for jobs in batches.values():
            self._send(jobs, self.table.order(jobs[0].slot), 0, 0)

    def _send(self, jobs: list[Job], order: list[int], at: int, tries: int) -> None:
        world = self.world
        if at >= len(order):
            for job in jobs:
                world.stats.history.wrote(job.name, False)
            return
        group = world.groups[order[at]]
        if group.state != "active" and at + 1 < len(order):
            self._send(jobs, order, at + 1, 0)
            return
        node = group.nodes[(self.index + self.sent + tries) % len(group.nodes)]
        self._write(node, jobs, order, at, tries)

    def _next(self, jobs: list[Job], order: list[int], at: int, tries: int) -> None:
        """No answer: the group's next member, or once all were tried the
        slot's next group (the write is then misplaced)."""
        if tries < len(self.world.groups[order[at]].nodes):
            self._send(jobs, order, at, tries)
            return
        for job in jobs:
            job.misplaced = True
        self._send(jobs, order, at + 1, 0)

    def _write(self, node: Node, jobs: list[Job], order: list[int], at: int, tries: int) -> None:
        world = self.world
        answered = [False]

        def acked(ok: bool) -> None:
            if answered[0]:
                return
            answered[0] = True
            self.inflight -= 1
            for job in jobs:
                world.stats.history.wrote(job.name, ok)
                if at > 0:
                    world.stats.misplaced += 1
            if world.cfg.batch_jobs is not None:
                self._tick()  # the calibration's producer writes the next batch at once

        def reply(ok: bool) -> None:
            world.net.send(node.name, node.zone, self.name, self.zone, lambda: acked(ok))

        def timeout() -> None:
            if not answered[0]:
                answered[0] = True
                self.inflight -= 1
                self._next(jobs, order, at, tries + 1)

        for job in jobs:
            world.stats.history.attempted.add(job.name)
        self.inflight += 1
        world.net.send(
            self.name, self.zone, node.name, node.zone, lambda: node.handle_write(jobs, reply)
        )
        if world.lossy:
            world.sim.after(TIMEOUT * (4 if world.cfg.copies > 1 else 1), timeout)


class Worker:
    def __init__(self, world: World, index: int, home: int, cpu: Cpu) -> None:
        self.world = world
        self.index = index
        self.name = f"w{index}"
        self.zone = index % world.cfg.zones
        self.cpu = cpu
        self.home = home
        self.target = home
        self.member = name_hash(self.name) % world.cfg.replicas
        self.busy = 0
        self.reserving = False
        self.cache: dict[int, DirectoryRow] = {}
        self.cache_at = -1e9
        self.reading = False
        self.stopped = False
        self._sticky = True
        self._cands: list[int] = []
        self._published: dict[int, tuple[int, float]] = {}

    # -- finding work ------------------------------------------------------------

    def start(self) -> None:
        self._want()

    def _want(self) -> None:
        cfg = self.world.cfg
        if self.reserving or self.stopped or self.busy >= cfg.worker_slots:
            return
        group = self.world.groups[self.target]
        if group.state == "retired":
            self.target = self.home = self.world.home_of(self.name)
            group = self.world.groups[self.target]
        stealing = self.target != self.home
        if stealing:  # a steal asks any member: stealers must not all land on one
            node = group.nodes[self.world.sim.rng.randrange(len(group.nodes))]
        else:
            node = group.nodes[self.member % len(group.nodes)]
        self.reserving = True
        self._reserve(node, stealing)

    def _wait(self, stealing: bool) -> float:
        """How long the node may hold the reserve: a steal does not wait (an
        empty answer sends the worker home); at home a long poll, short when
        the directory shows a backlog elsewhere."""
        if stealing:
            return 0.0
        return 0.02 if self._candidates() else self.world.cfg.long_poll

    def _reserve(self, node: Node, stealing: bool) -> None:
        cfg = self.world.cfg
        n = cfg.worker_slots - self.busy
        wait = self._wait(stealing)
        answered = [False]

        def got(jobs: list[Job]) -> None:
            if answered[0]:
                # Late: the worker gave up on this answer and moved on; the
                # node reserved these for it, so it runs them (or they would
                # wait out their lease).
                if jobs:
                    self.busy += len(jobs)
                    for job in jobs:
                        self._run(node, job)
                return
            answered[0] = True
            self.reserving = False
            self._got(node, jobs)

        def timeout() -> None:
            if not answered[0]:
                answered[0] = True
                self.reserving = False
                if stealing:
                    self.target = self.home  # that group is slow to answer: home
                    self._want()
                    return
                self.member += 1  # that member is down or cut off: the next one
                self.world.sim.after(0.05, self._want)

        end = self.cpu.run(cfg.costs.worker_reserve / 3, "worker")
        self.world.net.send(
            self.name,
            self.zone,
            node.name,
            node.zone,
            lambda: node.handle_reserve(self, n, wait, got),
            at=end,
        )
        if stealing:
            self.world.sim.at(end + STEAL_TIMEOUT, timeout)
        elif self.world.lossy:
            self.world.sim.at(end + wait + TIMEOUT, timeout)

    def _got(self, node: Node, jobs: list[Job]) -> None:
        """A steal by age is sticky: the worker stays while that group gives
        it work and its home's oldest tuple (by the directory) is not much
        older; an empty answer sends it home, and strikes that group from
        its cache until the next read. An empty answer at home moves the
        worker to the next member of home."""
        if not jobs and self.target == self.home:
            self.member += 1
        if jobs:
            self.busy += len(jobs)
            for job in jobs:
                self._run(node, job)
        elif self.target in self.cache and self.target != self.home:
            self.cache[self.target] = replace(self.cache[self.target], live=0)
            if self.target in self._cands:
                self._cands.remove(self.target)
        if self.target != self.home and jobs and not self._home_older() and self._sticky:
            return self._want()  # that group still has work, home is not older: stay
        stolen, self.target = self.target != self.home, self.home
        if not stolen:
            self._maybe_steal(by_age=bool(jobs))
        self._want()

    def _home_older(self) -> bool:
        home, there = self.cache.get(self.home), self.cache.get(self.target)
        if home is None or there is None:
            return False
        cfg = self.world.cfg
        return home.oldest_age > cfg.steal_age_factor * there.oldest_age + cfg.steal_age_slack

    def _candidates(self) -> list[int]:
        """Groups the cached directory shows a backlog in, home aside
        (computed when the cache is filled or a group is struck from it)."""
        return self._cands

    def _fill(self, rows: dict[int, DirectoryRow]) -> None:
        now = self.world.sim.now
        fresh = 3 * self.world.cfg.directory_period
        groups = self.world.groups
        self.cache = rows
        self.cache_at = now
        self._cands = [
            g
            for g, row in rows.items()
            if g != self.home
            and row.live > 0
            and now - row.at < fresh
            and groups[g].state != "retired"
        ]

    def _maybe_steal(self, by_age: bool) -> None:
        cfg = self.world.cfg
        if not self.cache or self.world.sim.now - self.cache_at > cfg.directory_cache:
            self._read_directory()
        candidates = self._candidates()
        if candidates and (cfg.steal_by_age or not by_age):
            home = self.cache.get(self.home)
            home_age = home.oldest_age if home else 0.0
            oldest = max(self.cache[g].oldest_age for g in candidates)
            if not by_age or oldest > cfg.steal_age_factor * home_age + cfg.steal_age_slack:
                rows = [self.cache[g] for g in candidates]
                self._steal(candidates, [r.live * (r.oldest_age + 0.01) for r in rows])
                return
        if cfg.steal == "rate":
            self._steal_share()

    def _steal(self, candidates: list[int], weights: list[float], share: bool = False) -> None:
        """Power of two choices: two groups sampled by weight, the heavier."""
        if not candidates or sum(weights) <= 0:
            return
        two = self.world.sim.rng.choices(candidates, weights=weights, k=2)
        self.target = max(two, key=lambda g: weights[candidates.index(g)])
        self._sticky = not share
        self.world.stats.steals += 1

    def capacity(self) -> float:
        """Jobs a second this worker should serve: its slots over a job's
        time, or its core over a job's CPU, whichever is less, at 70 % (a
        queue near 100 % busy waits long)."""
        cfg = self.world.cfg
        full = min(cfg.worker_slots / (cfg.work_ms / 1000 + 0.01), 1 / cfg.costs.worker_job)
        return 0.7 * full

    def _steal_share(self) -> None:
        """Steal this batch with the probability that matches the deficit:
        groups short of homed workers for their write rate take the surplus
        of the others, spread over their workers."""
        cap = self.capacity()
        deficit: dict[int, float] = {}
        surplus = 0.0
        for g, row in self.cache.items():
            need = row.rate / cap - row.homed
            if need > 0 and g != self.home:
                deficit[g] = need
            elif need < 0:
                surplus -= need
        home = self.cache.get(self.home)
        if not deficit or home is None or home.homed <= 0 or surplus <= 0:
            return
        spare = home.homed - home.rate / cap
        if spare <= 0:
            return
        p = min(1.0, sum(deficit.values()) / surplus) * spare / home.homed
        if self.world.sim.rng.random() < p:
            groups = list(deficit)
            self._steal(groups, [deficit[g] for g in groups], share=True)

    def _read_directory(self) -> None:
        """HGETALL of the queue's directory, into the cache (~1 s)."""
        if self.reading:
            return
        world = self.world
        master = world.lens.directory_master
        self.reading = True
        cost = world.cfg.costs.redis_dir_read + world.cfg.costs.redis_dir_read_per_group * len(
            world.groups
        )

        def answer() -> None:
            rows = dict(world.lens.directory)
            world.net.send(master.name, master.zone, self.name, self.zone, lambda: fill(rows))

        def fill(rows: dict[int, DirectoryRow]) -> None:
            self.reading = False
            self._fill(rows)

        def ask() -> None:
            if master.up:
                world.stats.directory_reads += 1
                master.cpu.run(cost, "redis", answer)

        if not world.net.send(self.name, self.zone, master.name, master.zone, ask):
            self.reading = False
        world.sim.after(1.0, lambda: setattr(self, "reading", False))

    def publish(self, group_id: int) -> None:
        """The directory's row for ``group_id``: one status call to a member,
        one HSET (nothing per job)."""
        world = self.world
        group = world.groups[group_id]
        if group.state == "retired" or self.stopped:
            return
        node = next((n for n in group.nodes if n.up), None)
        master = world.lens.directory_master
        if node is None:
            return

        def write(live: int, age: float, writes: int) -> None:
            now = world.sim.now
            last = self._published.get(group_id)
            self._published[group_id] = (writes, now)
            rate = (writes - last[0]) / (now - last[1]) if last and now > last[1] else 0.0
            row = DirectoryRow(live, age, now, rate, world.homed(group_id))

            def hset() -> None:
                if master.up:
                    world.stats.directory_writes += 1
                    master.cpu.run(
                        world.cfg.costs.redis_dir_write,
                        "redis",
                        lambda: world.lens.directory.__setitem__(group_id, row),
                    )

            world.net.send(self.name, self.zone, master.name, master.zone, hset)

        def status() -> None:
            live, age = node.status()
            writes = node.writes
            world.net.send(
                node.name, node.zone, self.name, self.zone, lambda: write(live, age, writes)
            )

        world.net.send(
            self.name,
            self.zone,
            node.name,
            node.zone,
            lambda: node.cpu.run(world.cfg.costs.status_call, "node", status),
        )

    # -- running a job -----------------------------------------------------------

    def _run(self, node: Node, job: Job) -> None:
        costs = self.world.cfg.costs
        end = self.cpu.run(costs.worker_reserve + costs.worker_claim, "worker")
        self._claim(node, job, at=end)

    def _claim(
        self, node: Node, job: Job, until: float | None = None, at: float | None = None
    ) -> None:
        """The claim script: decided as it reaches the master (Redis runs
        commands in arrival order), answered when the master's CPU is done."""
        world = self.world
        lens = world.lens
        master = lens.master_of(job)
        deadline = until if until is not None else world.sim.now + world.cfg.lease
        answered = [False]

        def result(outcome: str, token: int) -> None:
            if answered[0]:
                return
            answered[0] = True
            if outcome == "granted":
                self._granted(node, job, token)
            elif outcome == "done":
                world.stats.claims_refused += 1
                self._ack(node, job)
            else:
                self._retry(node, job, deadline)

        def at_master() -> None:
            if not master.up:
                return
            outcome, token = lens.claim(job, self.name, world.cfg.claim_lease)
            end = master.cpu.run(world.cfg.costs.redis_claim, "redis")
            world.net.send(
                master.name,
                master.zone,
                self.name,
                self.zone,
                lambda: result(outcome, token),
                at=end,
            )

        def timeout() -> None:
            if not answered[0]:
                answered[0] = True
                self._retry(node, job, deadline)

        world.net.send(self.name, self.zone, master.name, master.zone, at_master, at=at)
        if world.lossy:
            world.sim.at((at or world.sim.now) + TIMEOUT, timeout)

    def _retry(self, node: Node, job: Job, deadline: float) -> None:
        """The Lens did not answer, or another holder has the job: try again
        until the reservation's lease ends, then let it go (the node offers
        the tuple again)."""
        if self.world.sim.now + 0.1 >= deadline:
            self._free()
            return
        self.world.sim.after(0.1, lambda: self._claim(node, job, deadline))

    def _granted(self, node: Node, job: Job, token: int) -> None:
        world = self.world
        world.stats.history.delivered([job.name])
        if job.name not in world.stats.first_claim:
            world.stats.first_claim.add(job.name)
            start = max(job.written, job.not_before)
            if job.not_before == 0.0 and world.cfg.warmup <= job.written < world.cfg.duration:
                world.stats.claim_latency.append(world.sim.now - start)
        world.sim.after(world.cfg.work_ms / 1000, lambda: self._finish(node, job, token))

    def _finish(self, node: Node, job: Job, token: int) -> None:
        world = self.world
        if world.sink.apply(job, token):
            world.stats.done_at.append(world.sim.now)
            if job.by >= 0:
                world.producers[job.by].open[job.owner] -= 1
        master = world.lens.master_of(job)
        answered = [False]

        def result(ok: bool) -> None:
            if answered[0]:
                return
            answered[0] = True
            if ok:
                self._ack(node, job)
            else:
                self._free()  # ClaimLost: not acked; the tuple comes back, a rerun

        def at_master() -> None:
            if not master.up:
                return
            ok = world.lens.complete(job, self.name, token)
            if ok:
                world.sink.complete(job)
            end = master.cpu.run(world.cfg.costs.redis_complete, "redis")
            world.net.send(
                master.name, master.zone, self.name, self.zone, lambda: result(ok), at=end
            )

        end = self.cpu.run(world.cfg.costs.worker_complete, "worker")
        world.net.send(self.name, self.zone, master.name, master.zone, at_master, at=end)
        if world.lossy:
            world.sim.at(end + 2 * TIMEOUT, lambda: result(False))

    def _ack(self, node: Node, job: Job) -> None:
        world = self.world
        answered = [False]

        def done() -> None:
            if not answered[0]:
                answered[0] = True
                self._free()

        end = self.cpu.run(world.cfg.costs.worker_ack, "worker")
        world.net.send(
            self.name,
            self.zone,
            node.name,
            node.zone,
            lambda: node.handle_ack(self, [job], done),
            at=end,
        )
        if world.lossy:
            world.sim.at(end + TIMEOUT, done)

    def _free(self) -> None:
        self.busy -= 1
        self._want()
