"""One node process of a replica group: its Strand (per-origin logs), the
live tuples it hands out, push and anti-entropy with its group's members,
turns and the pool, and lending.

What it models of ``forum.node`` and ``forum.replication``:

* a write is appended on the node the producer reached (the writer) and
  pushed to each peer in batches: one push in flight per peer, an idle link
  sends at once, a busy one waits ``batch_delay`` to gather up to
  ``max_batch``; a receiver applies a push only from the gap-free end of
  the origin's log (a gap waits for anti-entropy);
* anti-entropy: every ``ae_interval`` each node pulls from each peer what
  its vector lacks (``ae_side`` of CPU each side, plus the entries' apply);
* reservations are local: the other members still see the tuple live until
  the Take of its ack arrives;
* a remote tuple (one another member wrote) is handed out here only at its
  turn, ``remote_delay`` x its rank among the members, and only if a taker
  waits then; a turn nobody wanted puts it in the pool for ``remote_hold``;
* lending (issue 29): while the writer is alive, its tuples are handed out by
  it alone; a member with waiting takers and nothing of its own borrows from
  a writer (one round trip). A writer this node thinks down gets turns again.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from .engine import Cpu, Net, Sim
from .params import Config
from .records import Entry, Job, Stats
from .routing import name_hash

if TYPE_CHECKING:
    from .actors import Worker

Reply = Callable[[list[Job]], None]
TIMEOUT = 0.5


class Waiter:
    __slots__ = ("deadline", "n", "reply", "served", "worker")

    def __init__(self, worker: Worker, n: int, deadline: float, reply: Reply) -> None:
        """``reply`` runs at the worker, once the answer has crossed the network."""
        self.worker = worker
        self.n = n
        self.deadline = deadline
        self.reply = reply
        self.served = False


class Node:
    def __init__(
        self, sim: Sim, net: Net, cfg: Config, stats: Stats, group: int, index: int, cpu: Cpu
    ) -> None:
        self.sim, self.net, self.cfg, self.stats = sim, net, cfg, stats
        self.costs = cfg.costs
        self.group = group
        self.index = index
        self.name = f"g{group}/n{index}"
        self.zone = index % cfg.zones
        self.cpu = cpu
        self.up = True
        self.incarnation = 0
        self.origin = f"{self.name}#0"
        self.peers: list[Node] = []
        self.logs: dict[str, list[Entry]] = {}
        self.own: dict[str, Job] = {}
        self.remote: dict[str, tuple[Job, str]] = {}
        self.remote_count: dict[str, int] = {}
        self.ready: dict[str, Job] = {}
        self.taken: set[str] = set()
        self.reserved: dict[str, tuple[Job, float]] = {}
        self.waiters: list[Waiter] = []
        self.down: set[str] = set()
        self.queue: dict[str, list[Entry]] = {}
        self.in_flight: dict[str, bool] = {}
        self.copies_wait: list[tuple[int, Callable[[bool], None]]] = []
        self.takes = 0
        self.writes = 0
        self.borrowing = False
        #: Faults can lose messages: only then are timeouts scheduled (in a
        #: run without faults every request is answered, so they never fire).
        self.lossy = bool(cfg.faults)

    # -- the log ---------------------------------------------------------------

    def _append(self, take: bool, job: Job) -> Entry:
        log = self.logs.setdefault(self.origin, [])
        entry = Entry(self.origin, len(log) + 1, take, job)
        log.append(entry)
        for peer in self.peers:
            self.queue.setdefault(peer.name, []).append(entry)
            self._kick(peer)
        return entry

    def _apply(self, entry: Entry) -> bool:
        log = self.logs.setdefault(entry.origin, [])
        if entry.seq != len(log) + 1:
            return False
        log.append(entry)
        name = entry.job.name
        if entry.take:
            self._gone(name)
            self.taken.add(name)
        elif name not in self.taken:
            self.writes += 1
            self._remote_add(entry.job, entry.origin)
            if self._turns_for(entry.origin):
                self._schedule_turn(entry.job, entry.origin)
        return True

    def _gone(self, name: str) -> None:
        self.own.pop(name, None)
        self._remote_pop(name)
        self.ready.pop(name, None)

    def _remote_add(self, job: Job, origin: str) -> None:
        if job.name not in self.remote:
            self.remote_count[origin] = self.remote_count.get(origin, 0) + 1
        self.remote[job.name] = (job, origin)

    def _remote_pop(self, name: str) -> None:
        held = self.remote.pop(name, None)
        if held is not None:
            self.remote_count[held[1]] -= 1

    def _turns_for(self, origin: str) -> bool:
        return not self.cfg.lending or origin in self.down

    def _rank(self, job: Job, origin: str) -> int:
        others = [p for p in self.peers if p.origin != origin and p.origin not in self.down]
        mine = name_hash(job.name + self.name)
        return 1 + sum(1 for p in others if name_hash(job.name + p.name) < mine)

    def _schedule_turn(self, job: Job, origin: str) -> None:
        delay = self.cfg.remote_delay * self._rank(job, origin)
        due = max(job.not_before, self.sim.now) + delay
        self.sim.at(due, lambda: self._turn(job))

    def _turn(self, job: Job) -> None:
        held = self.remote.get(job.name)
        if held is None or not self.up or job.name in self.reserved:
            return
        if not self._turns_for(held[1]):
            return
        if self.waiters or self.cfg.remote_hold <= 0:
            self.ready[job.name] = job
            self._serve_waiters()
        else:
            self.sim.after(self.cfg.remote_hold, lambda: self._air(job))

    def _air(self, job: Job) -> None:
        held = self.remote.get(job.name)
        if held is not None and self.up and self._turns_for(held[1]):
            self.ready[job.name] = job
            self._serve_waiters()

    # -- the producer's side ---------------------------------------------------

    def handle_write(self, jobs: list[Job], reply: Callable[[bool], None]) -> None:
        if not self.up:
            return
        cost = self.costs.write_call + self.costs.write_job * len(jobs)
        self.cpu.run(cost, "node", lambda: self._commit(jobs, reply))

    def _commit(self, jobs: list[Job], reply: Callable[[bool], None]) -> None:
        if not self.up:
            return
        last = 0
        for job in jobs:
            job.group = self.group
            job.writer = self.origin
            self.writes += 1
            last = self._append(False, job).seq
            if job.not_before > self.sim.now:
                self.sim.at(job.not_before, partial(self._due, job))
            else:
                self.own[job.name] = job
        if self.cfg.copies > 1 and self.peers:
            self.copies_wait.append((last, reply))
            self.sim.after(TIMEOUT * 4, lambda: self._copies_timeout(reply))
        else:
            reply(True)
        self._serve_waiters()

    def _due(self, job: Job) -> None:
        if self.up and job.name not in self.taken and job.name not in self.reserved:
            self.own[job.name] = job
            self._serve_waiters()

    def _held_by_peer(self, seq: int) -> None:
        fired = [(s, r) for s, r in self.copies_wait if s <= seq]
        if fired:
            self.copies_wait = [(s, r) for s, r in self.copies_wait if s > seq]
            for _, reply in fired:
                reply(True)

    def _copies_timeout(self, reply: Callable[[bool], None]) -> None:
        for s, r in self.copies_wait:
            if r is reply:
                self.copies_wait.remove((s, r))
                reply(False)
                return

    # -- the worker's side -----------------------------------------------------

    def handle_reserve(self, worker: Worker, n: int, wait: float, reply: Reply) -> None:
        if not self.up:
            return
        self.stats.reserves += 1
        self.cpu.run(self.costs.reserve_call, "node")
        self._reserve(Waiter(worker, n, self.sim.now + wait, reply))

    def _pick(self, n: int, own_only: bool = False) -> list[Job]:
        picked: list[Job] = []
        expiry = self.sim.now + self.cfg.lease
        for source in (self.own,) if own_only else (self.own, self.ready):
            while source and len(picked) < n:
                name = next(iter(source))
                job = source.pop(name)
                self._remote_pop(name)
                self.reserved[name] = (job, expiry)
                picked.append(job)
        return picked

    def _reserve(self, waiter: Waiter) -> None:
        if not self.up:
            return
        picked = self._pick(waiter.n)
        if picked:
            self._answer(waiter, picked)
            return
        self.waiters.append(waiter)
        self.sim.at(waiter.deadline, lambda: self._expire_waiter(waiter))
        if self.cfg.lending and not self.borrowing:
            self._borrow()

    def _answer(self, waiter: Waiter, jobs: list[Job]) -> None:
        waiter.served = True
        end = self.cpu.run(self.costs.reserve_job * len(jobs), "node")
        w = waiter.worker
        self.net.send(self.name, self.zone, w.name, w.zone, lambda: waiter.reply(jobs), at=end)

    def _expire_waiter(self, waiter: Waiter) -> None:
        if not waiter.served and waiter in self.waiters:
            self.waiters.remove(waiter)
            waiter.served = True
            if self.up:
                w = waiter.worker
                self.net.send(self.name, self.zone, w.name, w.zone, lambda: waiter.reply([]))

    def _serve_waiters(self) -> None:
        while self.waiters and (self.own or self.ready):
            waiter = self.waiters.pop(0)
            if waiter.served:
                continue
            self._answer(waiter, self._pick(waiter.n))

    def _borrow(self) -> bool:
        """Ask the writer holding the most of its tuples here for some
        (lending); False when no writer this node thinks alive has any."""
        counts = {o: c for o, c in self.remote_count.items() if c > 0 and o not in self.down}
        lenders = [p for p in self.peers if p.up or p.origin in counts]
        best = max(lenders, key=lambda p: counts.get(p.origin, 0), default=None)
        if best is None or counts.get(best.origin, 0) == 0:
            return False
        want = max(1, sum(w.n for w in self.waiters if not w.served))
        self.stats.borrows += 1
        self.borrowing = True
        answered = [False]

        def got(jobs: list[Job]) -> None:
            answered[0] = True
            self.borrowing = False
            self._heard(best)
            for job in jobs:
                if job.name in self.taken:
                    continue
                self._remote_pop(job.name)
                self.ready[job.name] = job
            self._serve_waiters()
            if jobs and any(not w.served for w in self.waiters):
                self._borrow()  # takers still wait: ask again

        def timeout() -> None:
            if not answered[0]:
                self.borrowing = False
                self._lost(best)

        self.net.send(
            self.name,
            self.zone,
            best.name,
            best.zone,
            lambda: best.handle_lend(self, want, got),
        )
        if self.lossy:
            self.sim.after(TIMEOUT, timeout)
        return True

    def handle_lend(self, borrower: Node, n: int, reply: Reply) -> None:
        if not self.up:
            return

        jobs = self._pick(n, own_only=True)
        end = self.cpu.run(self.costs.lend_call + self.costs.reserve_job * len(jobs), "node")
        self.net.send(
            self.name, self.zone, borrower.name, borrower.zone, lambda: reply(jobs), at=end
        )

    def handle_ack(self, worker: Worker, jobs: list[Job], reply: Callable[[], None]) -> None:
        """The Takes are appended as the request arrives (the CPU queue
        charges them first, ahead of their pushes); the answer leaves when
        that work is done."""
        if not self.up:
            return
        end = self.cpu.run(self.costs.ack_job * len(jobs), "node")
        for job in jobs:
            self.reserved.pop(job.name, None)
            if job.name in self.taken:
                continue
            self._gone(job.name)
            self.taken.add(job.name)
            self._append(True, job)
            self.takes += 1
            self.stats.takes += 1
        self.net.send(self.name, self.zone, worker.name, worker.zone, reply, at=end)

    def sweep(self) -> None:
        """Reservations past their lease are live again (here: the writer's
        own, or a turned remote copy)."""
        now = self.sim.now
        expired = [name for name, (_, until) in self.reserved.items() if until < now]
        for name in expired:
            job, _ = self.reserved.pop(name)
            if name not in self.taken and self.up:
                self._relive(job)
        if expired:
            self._serve_waiters()

    def status(self) -> tuple[int, float]:
        """Live tuples this group holds as seen here, and the oldest one's age."""
        live = len(self.own) + len(self.remote) + len(self.ready)
        oldest = min(
            (j.written for j in (*self.own.values(), *self.ready.values())), default=self.sim.now
        )
        for job, _ in list(self.remote.values())[:1]:
            oldest = min(oldest, job.written)
        return live, self.sim.now - oldest

    # -- replication -----------------------------------------------------------

    def _kick(self, peer: Node) -> None:
        if self.in_flight.get(peer.name) or not self.queue.get(peer.name):
            return
        self._push(peer)

    def _push(self, peer: Node) -> None:
        pending = self.queue.get(peer.name)
        if not pending or not self.up:
            self.in_flight[peer.name] = False
            return
        batch = pending[: self.cfg.max_batch]
        del pending[: self.cfg.max_batch]
        self.in_flight[peer.name] = True
        answered = [False]

        def acked(seq: int) -> None:
            answered[0] = True
            self._heard(peer)
            self._held_by_peer(seq)
            self.sim.after(self.cfg.batch_delay, lambda: self._push(peer))

        def timeout() -> None:
            if not answered[0]:
                self.in_flight[peer.name] = False
                self.queue[peer.name] = []  # dropped for that peer: anti-entropy brings them
                self._lost(peer)

        end = self.cpu.run(self.costs.push_entry * len(batch), "node")
        self.net.send(
            self.name,
            self.zone,
            peer.name,
            peer.zone,
            lambda: peer.handle_push(self, batch, acked),
            at=end,
        )
        if self.lossy:
            self.sim.at(end + TIMEOUT, timeout)

    def handle_push(self, sender: Node, entries: list[Entry], acked: Callable[[int], None]) -> None:
        if not self.up:
            return
        cost = self.costs.push_call + self._apply_cost(entries)

        def apply() -> None:
            if not self.up:
                return
            for entry in entries:
                self._apply(entry)
            self._serve_waiters()
            seq = len(self.logs.get(sender.origin, ()))
            self.net.send(self.name, self.zone, sender.name, sender.zone, lambda: acked(seq))

        self.cpu.run(cost, "node", apply)

    def _apply_cost(self, entries: list[Entry]) -> float:
        """Applying is charged for the entries new here; one this node
        holds already (a push and a pull crossing) costs a decode and a
        compare, a tenth of it."""
        new = sum(1 for e in entries if e.seq > len(self.logs.get(e.origin, ())))
        return self.costs.apply_entry * (new + 0.1 * (len(entries) - new))

    def anti_entropy(self, peer: Node) -> None:
        """One pull from ``peer``: our vector out, the entries we lack back."""
        if not self.up:
            return
        vector = {origin: len(log) for origin, log in self.logs.items()}
        answered = [False]

        def page(entries: list[Entry]) -> None:
            answered[0] = True
            self._heard(peer)
            if not self.up:
                return

            def apply() -> None:
                for entry in entries:
                    self._apply(entry)
                self._serve_waiters()

            self.cpu.run(self._apply_cost(entries), "node", apply)

        def timeout() -> None:
            if not answered[0]:
                self._lost(peer)

        end = self.cpu.run(self.costs.ae_side, "node")
        self.net.send(
            self.name,
            self.zone,
            peer.name,
            peer.zone,
            lambda: peer.handle_pull(self, vector, page),
            at=end,
        )
        if self.lossy:
            self.sim.at(end + 2 * TIMEOUT, timeout)

    def handle_pull(
        self, puller: Node, vector: dict[str, int], page: Callable[[list[Entry]], None]
    ) -> None:
        if not self.up:
            return
        self._held_by_peer(vector.get(self.origin, 0))

        def answer() -> None:
            if not self.up:
                return
            entries: list[Entry] = []
            for origin, log in self.logs.items():
                entries.extend(log[vector.get(origin, 0) :])
            self.net.send(self.name, self.zone, puller.name, puller.zone, lambda: page(entries))

        self.cpu.run(self.costs.ae_side, "node", answer)

    def _lost(self, peer: Node) -> None:
        if peer.origin in self.down:
            return
        self.down.add(peer.origin)
        if self.cfg.lending:
            for job, origin in list(self.remote.values()):
                if origin == peer.origin:
                    self._schedule_turn(job, origin)

    def _heard(self, peer: Node) -> None:
        if peer.origin in self.down:
            self.down.discard(peer.origin)
            if self.cfg.lending:
                for name in [n for n, j in self.ready.items() if self._origin_of(j) == peer.origin]:
                    self.ready.pop(name)

    def _origin_of(self, job: Job) -> str:
        held = self.remote.get(job.name)
        return held[1] if held else ""

    # -- faults ----------------------------------------------------------------

    def crash(self) -> None:
        self.up = False
        self.waiters = []
        self.queue = {}
        self.in_flight = {}
        self.copies_wait = []

    def restart(self, wiped: bool) -> None:
        """Back on its disk (reservations, in memory, are gone: the tuples
        are live again), or on an empty one with a new origin."""
        if wiped:
            old = self.origin
            self.incarnation += 1
            self.origin = f"{self.name}#{self.incarnation}"
            self.logs, self.own, self.remote, self.ready = {}, {}, {}, {}
            self.remote_count = {}
            self.taken = set()
            for peer in self.peers:
                peer._lost_origin(old)
        self.down = set()
        self.up = True
        reserved, self.reserved = self.reserved, {}
        for name, (job, _) in reserved.items():
            if name not in self.taken and not wiped:
                self._relive(job)

    def _relive(self, job: Job) -> None:
        """A reservation that ended without an ack: the writer's own tuple is
        live again here; a copy goes back to waiting for its writer or turn."""
        if job.writer == self.origin:
            self.own[job.name] = job
        else:
            self._remote_add(job, job.writer)
            if self._turns_for(job.writer):
                self._schedule_turn(job, job.writer)

    def _lost_origin(self, origin: str) -> None:
        if origin not in self.down:
            self.down.add(origin)
            for job, o in list(self.remote.values()):
                if o == origin:
                    self._schedule_turn(job, o)
