"""Forum over HTTP against a Redis reliable queue, side by side, in one run.

Usage: ``python bench/http_bench.py [--seconds 3] [--fsync always]
[--clients 1 16] [--repeats 3] [--one-client] [--one-prefix]
[--node-tree DIR | --node-ref REF] [--out PATH]``

What is measured, each for a fixed time at 1 and at 16 concurrent clients
(``--clients``); the two queues take turns (``--repeats``, which goes first
alternating), medians kept:

===========  ==========================================  ===================================
work         Forum (ForumClient -> forum serve)           Redis (redis-py -> redis-server)
===========  ==========================================  ===================================
write        POST /v1/tuples                              LPUSH queue
take         reserve + ack (drains a prefilled queue)     LMOVE queue processing + LREM
job          write, reserve, ack: the reliable job        LPUSH, LMOVE, LREM
batch job    write_many(N), reserve_many(N), ack_many     pipelined LPUSH(N) + N x (LMOVE+LREM)
===========  ==========================================  ===================================

Each client is what a user's program has: its own ``ForumClient`` (so its
own stream to the node), looping on its own prefix (``job-<i>/``), against
its own redis-py asyncio client looping on its own list
(``bench:queue:<i>``); both clients with their defaults, made once and kept
for the whole run. Beside the rates, the CPU per operation of each server
process and of this one (the clients; the two sides never run at once).

LMOVE + LREM is the reliable-queue pattern: a taken job sits in a
processing list until it is acknowledged (LREM), so a crashed consumer does
not lose it. Forum's counterpart is a reservation (a lease: a holder that
dies lets it run out, and the tuple is live again) and its ack, so both
sides give the same guarantee.
Both servers are started here on free loopback ports and stopped at the end.
Before each measurement both are settled, outside the clock: Forum compacts
its Strand (``POST /v1/compact``), Redis rewrites its AOF (``BGREWRITEAOF``),
so that none pays for the garbage an earlier one left (see :func:`measure`).
Durability is matched: ``--fsync always`` (the default) runs the node with
``--fsync always`` against Redis with ``appendonly yes, appendfsync always``;
``--fsync never`` against Redis without persistence; ``both`` runs the two.
``--node-tree DIR`` runs the node from another checkout, ``--node-ref REF``
from a commit of this repository unpacked (bench/trees.py), the clients
staying this checkout's: run once each way to compare a change of the node
before and after against the same Redis figures.

Why a client each (issue 29). Until then every loop of this bench shared one
``ForumClient`` and one prefix (``job-``), and one redis-py client (a pool)
and one list. It put the reliable job at 0.84x / 0.95x Redis at 1 / 16
clients (quiet VM, 8ed8fbd), while 16 ``ForumClient`` instances each looping
on its own prefix, and Redis the same way, gave 0.81-0.84x / 0.60-0.61x. The
difference is the shared ``ForumClient``. All 16 loops' requests then go
over one stream, on which the node sends the answers it has ready at once as
one message (:mod:`forum.node.client.stream`), so a job costs it and the
client less CPU than on 16 streams; a user's 16 processes, or 16 clients, do
not share one. Each difference on its own (``--one-client``,
``--one-prefix``), the job at 16 clients, ``--seconds 3 --repeats 3``, on
the shared 2-core VM (load average 6-8; bench/results/http_bench*.json):

=========================  ========  =============  ===============  ============
clients                    ratio     node ms / job  client ms / job  Redis's side
=========================  ========  =============  ===============  ============
a client and prefix each   1.78x     0.29           0.087            0.063 / 0.167
one client (own prefixes)  2.30x     0.27           0.070            0.059 / 0.157
one prefix (own clients)   1.90x     0.33           0.081            0.054 / 0.154
one client and one prefix  2.34x     0.22           0.069            0.057 / 0.160
=========================  ========  =============  ===============  ============

(Redis's side: its server's and its client's CPU ms per job.) Sharing the
client raises Forum's ratio 1.29-1.31x and cuts its CPU per job (node and
client) by a tenth to a quarter; the prefix alone moves it within the noise;
Redis's side is the same in every shape, since redis-py's pool already gives
each loop in flight a connection of its own. The same once by hand, outside
this bench, all eight shapes alternated in one session (5 rounds of 2 s,
medians, with no settling between them, so settling is not the cause
either): Forum on one client 2,213-2,249 jobs/s, on a client each
1,515-1,761/s (node 0.21-0.23 against 0.26-0.31 ms/job, client 0.065 against
0.084); Redis's four shapes 763-937/s, within their noise. At 1 client the
two shapes are one client either way, which is why both measurements agreed
there. The quiet VM was not free to measure again: the factor the shared
client gives here (1.3) is most of the one between 0.95x and 0.60x (1.58). A
second pair of runs (a client each; one client and one prefix) half an hour
later (``http_bench_repeat*.json``), the disk moving between 270 and 1,260
fsyncs a second within each run: the job at 16 clients 1.74x against 1.30x
(the second run's Redis side caught the disk fast), the node's CPU 0.36
against 0.22 ms per job, the client's 0.087 against 0.065. The CPU per job
repeats; ratios from runs minutes apart on this VM do not, so the shapes are
best compared within one session, as above.
(On this loaded VM the ratios themselves are far above the quiet VM's: its
disk took about 3 ms per fsync during these runs, some 330 a second in a
loop of 100-byte appends each fsynced, so both sides were bound by fsyncs
rather than by CPU; the shapes are compared within that state, not against
the quiet VM's figures.)

Prints a table, and the fsyncs a second the disk took just before and after
(:func:`fsyncs_per_second`: on a shared machine they bound both sides and
move tenfold); writes JSON (``bench/results/http_bench.json``) and a plot
(``bench/results/http_bench.png``, ops/s of each work, Forum against Redis;
matplotlib, from ``.venv-bench``: scripts/bench-env; ``--no-plot`` without).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import itertools
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import redis.asyncio as aioredis
import uvloop
from groups import homed_id, owned_keys
from trees import other_tree, pythonpath

from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import ClusterMap, Group
from forum.node.core.space import Pattern
from forum.node.core.write_options import WriteOptions

ROOT = Path(__file__).resolve().parent.parent
BATCH = 1000
LEASE = 30.0  # s: a reservation's lease (it is acked long before)
AOF_REWRITE_DEADLINE = 120.0  # s for Redis to rewrite its AOF between two measurements
QUEUE, PROCESSING = "bench:queue", "bench:processing"


@dataclass
class Result:
    system: str
    work: str
    clients: int
    ops: int
    seconds: float
    #: CPU (user + system) of the server process (``forum serve``,
    #: ``redis-server``) and of this one (the clients) over the run.
    server_cpu_s: float
    client_cpu_s: float

    @property
    def rate(self) -> float:
        return self.ops / self.seconds

    @property
    def server_ms_per_op(self) -> float:
        return 1000 * self.server_cpu_s / self.ops

    @property
    def client_ms_per_op(self) -> float:
        return 1000 * self.client_cpu_s / self.ops


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)


def fsyncs_per_second(where: Path, seconds: float = 0.5) -> float:
    """How many 100-byte appends, each fsynced, the disk under ``where`` takes
    a second now: what bounds both sides with ``--fsync always`` (a shared
    machine's other work moves it tenfold)."""
    path = where / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    done = 0
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            os.write(fd, b"x" * 100)
            os.fsync(fd)
            done += 1
    finally:
        os.close(fd)
        path.unlink()
    return done / (time.perf_counter() - started)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_until(check: Callable[[], Awaitable[bool]], what: str, deadline: float = 20) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    while not await check():
        if loop.time() > until:
            raise TimeoutError(f"{what} did not come up in {deadline} s")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def process(
    *command: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                async with asyncio.timeout(20):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


@contextlib.asynccontextmanager
async def forum_node(
    data: Path,
    fsync: str,
    tree: Path | None = None,
    *,
    port: int | None = None,
    args: Sequence[str] = (),
    node_id: str = "bench",
) -> AsyncIterator[tuple[str, int]]:
    """The node's URL and its process id; with ``tree``, the node runs that
    tree's code (bench/trees.py), from a directory that is no checkout.
    ``port``: its port (default: a free one); ``args``: more for ``forum serve``."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "forum", "serve", "--listen", f"127.0.0.1:{port}",
        "--data-dir", str(data), "--fsync", fsync, "--node-id", node_id, "--log-level", "WARNING",
        *args,
    ]  # fmt: skip
    env = None if tree is None else {**os.environ, "PYTHONPATH": pythonpath(tree)}
    async with (
        process(*command, env=env, cwd=data.parent) as proc,
        ForumClient(url) as probe,
    ):
        await wait_until(probe.ready, "forum serve")
        yield url, proc.pid


@contextlib.asynccontextmanager
async def redis_server(data: Path, fsync: str) -> AsyncIterator[tuple[str, int]]:
    """The server's URL and its process id."""
    port = free_port()
    persistence = (
        ["--appendonly", "yes", "--appendfsync", "always"]
        if fsync == "always"
        else ["--appendonly", "no"]
    )
    command = [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--dir", str(data), *persistence,
    ]  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    async with process(*command) as proc:
        client = aioredis.from_url(url)
        try:

            async def up() -> bool:
                try:
                    return bool(await client.ping())
                except (OSError, aioredis.ConnectionError):
                    return False

            await wait_until(up, "redis-server")
        finally:
            await client.aclose()
        yield url, proc.pid


async def run_for(seconds: float, ops: list[Callable[[], Awaitable[int]]]) -> tuple[int, float]:
    """Run each of ``ops`` in a loop of its own, all at once, for ``seconds``;
    ops done and time taken."""
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + seconds
    done = 0

    async def worker(op: Callable[[], Awaitable[int]]) -> None:
        nonlocal done
        while loop.time() < stop_at:
            # Not `done += await op()`: that reads `done` before the await and
            # loses the other workers' counts.
            n = await op()
            done += n

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for op in ops:
            group.create_task(worker(op))
    return done, time.perf_counter() - started


async def run_until_dry(ops: list[Callable[[], Awaitable[int]]]) -> tuple[int, float]:
    """Run each of ``ops`` in a loop of its own, all at once, until it finds
    nothing (returns 0)."""
    done = 0

    async def worker(op: Callable[[], Awaitable[int]]) -> None:
        nonlocal done
        while n := await op():
            done += n  # (n is awaited first: see run_for)

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for op in ops:
            group.create_task(worker(op))
    return done, time.perf_counter() - started


# -- the two queues ----------------------------------------------------------------


class ForumQueue:
    """One client's work, through a ForumClient against a ``forum serve``,
    on the tuples of ``prefix``; settled by compacting ``nodes``.

    ``--groups``: through a ClusterClient homed on a group, each write keyed
    with the next of ``keys``, keys whose slot that group owns, so a job is
    written and reserved in one group (a job's three requests, as on one
    node); the keys only route (no dedup window: they may repeat)."""

    name = "forum"

    def __init__(
        self,
        client: ForumClient | ClusterClient,
        prefix: bytes,
        nodes: Sequence[ForumClient],
        keys: Sequence[str] = (),
    ) -> None:
        self.c = client
        self.nodes = nodes
        self.pattern = Pattern(prefix)
        self.payload = prefix + b"x" * 60
        self._keys = itertools.cycle(keys) if keys else None

    def _options(self) -> WriteOptions:
        return {} if self._keys is None else {"key": next(self._keys)}

    async def write(self) -> int:
        await self.c.write(self.payload, **self._options())
        return 1

    async def take(self) -> int:
        found = await self.c.reserve(self.pattern, LEASE)
        if found is None:
            return 0
        if not await self.c.ack(found.id):
            raise RuntimeError("a reservation ran out before its ack")
        return 1

    async def job(self) -> int:
        await self.write()
        if await self.take() == 0:
            raise RuntimeError("a job written was not there to reserve")
        return 1

    async def batch_job(self) -> int:
        await self.c.write_many([self.payload] * BATCH)
        reserved = await self.c.reserve_many(self.pattern, LEASE, BATCH)
        if not all(await self.c.ack_many([r.id for r in reserved])):
            raise RuntimeError("a reservation ran out before its ack")
        return len(reserved)

    async def prefill(self, n: int) -> None:
        if self._keys is not None:  # a key names one write: one at a time
            for _ in range(n):
                await self.write()
            return
        for start in range(0, n, BATCH):
            await self.c.write_many([self.payload] * min(BATCH, n - start))

    async def drain(self) -> None:
        while await self.c.take_many(self.pattern, 10_000):
            pass  # (what is left is not reserved: each reservation was acked)

    async def settle(self) -> None:
        # POST /v1/compact waits for a background pass under way (passes run
        # one at a time), then drops whatever is dead.
        for node in self.nodes:
            await node.compact()


class RedisQueue:
    """One client's same work on a Redis list (``queue``): LPUSH, then LMOVE to
    a processing list (``processing``) and LREM from it once done (the
    reliable-queue pattern)."""

    name = "redis"

    def __init__(self, client: aioredis.Redis, queue: str, processing: str) -> None:
        self.r = client
        self.queue, self.processing = queue, processing
        self.payload = b"job-" + b"x" * 60

    async def write(self) -> int:
        await self.r.lpush(self.queue, self.payload)
        return 1

    async def take(self) -> int:
        item = await self.r.lmove(self.queue, self.processing, "RIGHT", "LEFT")
        if item is None:
            return 0
        await self.r.lrem(self.processing, 1, item)
        return 1

    async def job(self) -> int:
        await self.r.lpush(self.queue, self.payload)
        item = await self.r.lmove(self.queue, self.processing, "RIGHT", "LEFT")
        if item is None:
            raise RuntimeError("a job written was not there to take")
        await self.r.lrem(self.processing, 1, item)
        return 1

    async def batch_job(self) -> int:
        await self.r.lpush(self.queue, *([self.payload] * BATCH))
        async with self.r.pipeline(transaction=False) as pipe:
            for _ in range(BATCH):
                pipe.lmove(self.queue, self.processing, "RIGHT", "LEFT")
            items = await pipe.execute()
        async with self.r.pipeline(transaction=False) as pipe:
            for item in items:
                pipe.lrem(self.processing, 1, item)
            await pipe.execute()
        return len(items)

    async def prefill(self, n: int) -> None:
        for start in range(0, n, BATCH):
            await self.r.lpush(self.queue, *([self.payload] * min(BATCH, n - start)))

    async def drain(self) -> None:
        await self.r.delete(self.queue, self.processing)

    async def settle(self) -> None:
        # Redis's compaction is the AOF rewrite (it runs by itself too, once
        # the file doubled): one now, waited for, as Forum's pass.
        if not (await self.r.info("persistence"))["aof_enabled"]:
            return
        await wait_until(self.rewritten, "Redis, a rewrite under way done,", AOF_REWRITE_DEADLINE)
        await self.r.bgrewriteaof()
        await wait_until(self.rewritten, "Redis, its AOF rewritten,", AOF_REWRITE_DEADLINE)

    async def rewritten(self) -> bool:
        info = await self.r.info("persistence")
        return not (info["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"])


Queue = ForumQueue | RedisQueue
WORKS = ("write", "take", "job", "batch job")


@dataclass(frozen=True)
class Shape:
    """How the clients are made: as a user's program makes them (the
    default: each client its own ``ForumClient`` or redis-py client, on its
    own prefix or list), or sharing them, as this bench did before (see the
    module's docstring for what each costs)."""

    #: Every loop on one ``ForumClient`` (one stream) and one redis-py
    #: client (a pool, a connection per loop in flight).
    one_client: bool = False
    #: Every loop on one prefix (``job-``) and one Redis list.
    one_prefix: bool = False
    #: ``--groups``: so many nodes, each a group of one under one map (0: one
    #: node, no map).
    groups: int = 0

    def name(self) -> str:
        shared = [w for w, on in (("client", self.one_client), ("prefix", self.one_prefix)) if on]
        name = "one " + " and one ".join(shared) if shared else "a client and a prefix each"
        if self.groups:
            name += f"; Forum: {self.groups} groups of one node, a ClusterClient each"
        return name


@dataclass(frozen=True)
class Side:
    """One system's clients, a queue per loop (``max(--clients)`` of them),
    and its servers' process ids (whose CPU is measured: ``--groups``' nodes
    summed)."""

    name: str
    queues: list[Queue]
    server_pids: tuple[int, ...]


async def forum_side(
    stack: contextlib.AsyncExitStack, url: str, pid: int, n: int, shape: Shape
) -> Side:
    clients = [await stack.enter_async_context(ForumClient(url))]
    while len(clients) < (1 if shape.one_client else n):
        clients.append(await stack.enter_async_context(ForumClient(url)))
    queues: list[Queue] = []
    for i in range(n):
        client = clients[0 if shape.one_client else i]
        prefix = b"job-" if shape.one_prefix else f"job-{i}/".encode()
        queues.append(ForumQueue(client, prefix, [client]))
    return Side("forum", queues, (pid,))


async def cluster_side(
    stack: contextlib.AsyncExitStack, nodes: list[tuple[str, int]], cluster: ClusterMap, n: int
) -> Side:
    """``--groups``: each loop its own ClusterClient, homed on the groups in
    turn, on its own prefix (see :class:`ForumQueue`)."""
    direct = [await stack.enter_async_context(ForumClient(url)) for url, _ in nodes]
    queues: list[Queue] = []
    for i in range(n):
        home = cluster.groups[i % len(cluster.groups)].id
        client = ClusterClient(cluster, client_id=homed_id(cluster, home, f"client-{i}"))
        await stack.enter_async_context(client)
        keys = owned_keys(cluster, home, 256, prefix=f"job-{i}/")
        queues.append(ForumQueue(client, f"job-{i}/".encode(), direct, keys))
    return Side("forum", queues, tuple(pid for _, pid in nodes))


async def redis_side(
    stack: contextlib.AsyncExitStack, url: str, pid: int, n: int, shape: Shape
) -> Side:
    def client(connections: int) -> aioredis.Redis:
        made = aioredis.from_url(url, max_connections=connections)
        stack.push_async_callback(made.aclose)
        return made

    one = client(n + 4) if shape.one_client else None
    queues: list[Queue] = []
    for i in range(n):
        keys = (QUEUE, PROCESSING) if shape.one_prefix else (f"{QUEUE}:{i}", f"{PROCESSING}:{i}")
        queues.append(RedisQueue(one or client(2), *keys))
    return Side("redis", queues, (pid,))


def servers_cpu(side: Side) -> float:
    return sum(cpu_seconds(pid) for pid in side.server_pids)


async def measure(side: Side, work: str, clients: int, seconds: float, prefill: int) -> Result:
    # Each measurement starts from a settled queue: the log compacted of what
    # the earlier ones left dead, no pass pending or under way (outside the
    # clock). The garbage a measurement makes is its own cost, not the next
    # one's: after the batch job, most of the Strand is dead, and the
    # background pass it sets off (every 10 s, once half is dead) ran during
    # the next measurement, which then read a quarter of its rate alone.
    # Settling rather than a fresh node per measurement: a node that has
    # caught up on compaction is the state a long-running one is in between
    # bursts, and each side stays one process for the whole run.
    queues = side.queues[:clients]
    await queues[0].settle()
    if work == "take":
        # Takes drain a prefilled queue (each client its share): they are
        # timed until it is empty.
        for queue in queues:
            await queue.prefill(prefill // clients)
    server0, client0 = servers_cpu(side), time.process_time()
    if work == "take":
        n, t = await run_until_dry([q.take for q in queues])
    else:
        name = {"write": "write", "job": "job", "batch job": "batch_job"}[work]
        n, t = await run_for(seconds, [getattr(q, name) for q in queues])
    server, client = servers_cpu(side) - server0, time.process_time() - client0
    for queue in queues:
        await queue.drain()
    return Result(side.name, work, clients, n, t, server, client)


async def compare(
    sides: tuple[Side, Side],
    clients: list[int],
    seconds: float,
    repeats: int,
    prefill: int,
    works: Sequence[str] = WORKS,
) -> list[Result]:
    """Each measurement ``repeats`` times, the two sides taking turns (so both
    see the same background load; which goes first alternates), and the
    median of each kept."""
    kept = []
    for n_clients in clients:
        for work in works:
            runs: dict[str, list[Result]] = {side.name: [] for side in sides}
            for repeat in range(repeats):
                for side in sides if repeat % 2 == 0 else sides[::-1]:
                    runs[side.name].append(await measure(side, work, n_clients, seconds, prefill))
            for results in runs.values():
                kept.append(sorted(results, key=lambda r: r.rate)[len(results) // 2])
    return kept


# -- report ------------------------------------------------------------------------


def measured(results: list[Result]) -> list[str]:
    """The works among ``results``, in :data:`WORKS`' order."""
    return [w for w in WORKS if any(r.work == w for r in results)]


def table(results: list[Result], fsync: str, shape: Shape) -> str:
    redis_durability = "appendfsync always" if fsync == "always" else "no persistence"
    rows = [
        f"durability: forum fsync={fsync} vs redis {redis_durability}; clients: {shape.name()}",
        "take: reserve + ack vs LMOVE + LREM; job: write, reserve, ack vs LPUSH, LMOVE, LREM",
        "CPU ms per op: the server's (forum serve, redis-server) and the clients' (this process)",
        f"{'work':<10} {'clients':>7} {'forum /s':>10} {'redis /s':>10} {'ratio':>6} "
        f"{'node ms':>8} {'redis ms':>8} {'fc ms':>6} {'r-py ms':>7}",
    ]
    by_key = {(r.system, r.work, r.clients): r for r in results}
    for work in measured(results):
        for clients in sorted({r.clients for r in results}):
            f, r = by_key[("forum", work, clients)], by_key[("redis", work, clients)]
            rows.append(
                f"{work:<10} {clients:>7} {f.rate:>10,.0f} {r.rate:>10,.0f} "
                f"{f.rate / r.rate:>6.2f} {f.server_ms_per_op:>8.3f} {r.server_ms_per_op:>8.3f} "
                f"{f.client_ms_per_op:>6.3f} {r.client_ms_per_op:>7.3f}"
            )
    return "\n".join(rows)


def plot(results: list[Result], fsync: str, shape: Shape, path: Path) -> None:
    import plots  # noqa: PLC0415 (matplotlib: in .venv-bench only)

    by_key = {(r.system, r.work, r.clients): r.rate for r in results}
    keys = [(w, c) for w in measured(results) for c in sorted({r.clients for r in results})]
    ratios = [by_key[("forum", w, c)] / by_key[("redis", w, c)] for w, c in keys]
    plots.grouped_bars(
        path,
        f"ForumClient -> forum serve (fsync {fsync}) vs redis-py -> Redis "
        f"({'appendfsync always' if fsync == 'always' else 'no persistence'}), "
        f"{shape.name()}, medians; under Forum: Forum / Redis\ntake = reserve + ack vs "
        f"LMOVE + LREM; job = write, reserve, ack vs LPUSH, LMOVE, LREM",
        [f"{w}\n{c} client{'s' if c > 1 else ''}" for w, c in keys],
        {q: [by_key[(q, w, c)] for w, c in keys] for q in ("forum", "redis")},
        "operations/s (batch job: tuples/s), log scale",
        {"forum": [f"{x:.2f}x" for x in ratios]},
        log=True,
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument(
        "--fsync", choices=("never", "always", "both"), default="always",
        help="durability to compare at (default always)",
    )  # fmt: skip
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    parser.add_argument(
        "--works", nargs="+", choices=WORKS,
        help="the works to measure (default all; with --groups all but the batch job)",
    )  # fmt: skip
    parser.add_argument(
        "--groups", type=int, default=0,
        help="Forum as this many nodes, each a group of one under one map, a ClusterClient "
        "per client (see above; e.g. 2: a node per core)",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="median of this many runs")
    parser.add_argument(
        "--prefill",
        type=int,
        default=4000,
        help="tuples to take, per run, shared among the clients",
    )
    parser.add_argument(
        "--one-client", action="store_true",
        help="every loop on one ForumClient / one redis-py client (how this bench ran before)",
    )  # fmt: skip
    parser.add_argument(
        "--one-prefix", action="store_true",
        help="every loop on one prefix / one Redis list (how this bench ran before)",
    )  # fmt: skip
    trees = parser.add_mutually_exclusive_group()
    trees.add_argument("--node-tree", type=Path, help="run the node from this tree (see above)")
    trees.add_argument("--node-ref", help="run the node from this commit, unpacked (see above)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "http_bench.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "bench" / "results" / "http_bench.png")
    parser.add_argument("--no-plot", action="store_true", help="draw no PNG (no matplotlib)")
    args = parser.parse_args()
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("matplotlib is not installed here: run from .venv-bench, or --no-plot")
    if min(args.clients) < 1:
        parser.error("--clients: each count is 1 or more")
    if args.node_tree is not None and not (args.node_tree / "forum" / "__init__.py").is_file():
        parser.error(f"--node-tree {args.node_tree}: not a Forum tree (no forum/__init__.py)")
    if shutil.which("redis-server") is None:
        print("redis-server is not on PATH", file=sys.stderr)
        return 2
    if args.groups < 0 or (args.groups and (args.one_client or args.one_prefix)):
        parser.error("--groups: 1 or more, with a client and a prefix each")
    if args.groups and "batch job" in (args.works or ()):
        parser.error("--groups: no batch job (a key names one write: the batch would be keyless)")
    args.works = args.works or [w for w in WORKS if not (args.groups and w == "batch job")]
    if args.groups and (args.node_tree or args.node_ref):
        parser.error("--groups runs this tree's nodes: no --node-tree or --node-ref")
    shape = Shape(args.one_client, args.one_prefix, args.groups)
    report: dict[str, object] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_average_at_start": os.getloadavg()},
        "seconds_per_measurement": args.seconds,
        "repeats": args.repeats,
        "batch": BATCH,
        "shape": asdict(shape),
        "works": args.works,
        "node_tree": str(args.node_tree or args.node_ref or ROOT),
        "runs": [],
    }  # fmt: skip
    with other_tree(args.node_tree, args.node_ref) as tree:
        for fsync in ("never", "always") if args.fsync == "both" else (args.fsync,):
            disk = [fsyncs_per_second(Path(tempfile.gettempdir()))]
            results = await run(args, fsync, shape, tree)
            disk.append(fsyncs_per_second(Path(tempfile.gettempdir())))
            print(table(results, fsync, shape))
            print(f"the disk took {disk[0]:,.0f} fsyncs/s before, {disk[1]:,.0f} after",
                  end="\n\n", flush=True)  # fmt: skip
            if not args.no_plot:
                # Each durability its own PNG when both run; the default name for "always".
                path = args.plot
                if args.fsync == "both" and fsync != "always":
                    path = path.with_name(f"{path.stem}_{fsync}{path.suffix}")
                plot(results, fsync, shape, path)
                print(f"drew {path}")
            runs = report["runs"]
            assert isinstance(runs, list)
            runs.append(summary(results, fsync, args.clients) | {"disk_fsyncs_per_s": disk})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


async def run(
    args: argparse.Namespace, fsync: str, shape: Shape, tree: Path | None
) -> list[Result]:
    """Both sides at one durability, each server fresh."""
    with tempfile.TemporaryDirectory(prefix="forum-bench-") as tmp:
        (Path(tmp) / "redis").mkdir()
        async with (
            redis_server(Path(tmp) / "redis", fsync) as (redis_url, redis_pid),
            contextlib.AsyncExitStack() as stack,
        ):
            n = max(args.clients)
            if shape.groups:
                nodes, cluster = await grouped_nodes(stack, Path(tmp), fsync, tree, shape.groups)
                forum = await cluster_side(stack, nodes, cluster, n)
            else:
                url, pid = await stack.enter_async_context(
                    forum_node(Path(tmp) / "forum", fsync, tree)
                )
                forum = await forum_side(stack, url, pid, n, shape)
            sides = (forum, await redis_side(stack, redis_url, redis_pid, n, shape))
            return await compare(
                sides, args.clients, args.seconds, args.repeats, args.prefill, args.works
            )


async def grouped_nodes(
    stack: contextlib.AsyncExitStack, root: Path, fsync: str, tree: Path | None, groups: int
) -> tuple[list[tuple[str, int]], ClusterMap]:
    """``groups`` nodes, each a group of one (``g1``..) under one map: their
    URLs and process ids, and the map."""
    ports = [free_port() for _ in range(groups)]
    cluster = ClusterMap(
        1, tuple(Group(f"g{g + 1}", (f"http://127.0.0.1:{p}",)) for g, p in enumerate(ports))
    )
    path = root / "cluster-map.json"
    path.write_text(json.dumps(cluster.to_document()))
    nodes = []
    for g, port in enumerate(ports):
        node = forum_node(root / f"forum-g{g + 1}", fsync, tree, port=port,
                          args=("--cluster-map", str(path)), node_id=f"bench-g{g + 1}")  # fmt: skip
        nodes.append(await stack.enter_async_context(node))
    return nodes, cluster


def summary(results: list[Result], fsync: str, clients: list[int]) -> dict[str, object]:
    """One durability's part of the JSON report."""
    jobs = {(r.system, r.clients): r.rate for r in results if r.work == "job"}
    batch = max((r.rate for r in results if r.system == "forum" and r.work == "batch job"),
                default=None)  # fmt: skip
    return {
        "fsync": fsync,
        "results": [
            asdict(r)
            | {
                "rate": r.rate,
                "server_ms_per_op": r.server_ms_per_op,
                "client_ms_per_op": r.client_ms_per_op,
            }
            for r in results
        ],
        "job_ratio": {
            str(c): jobs[("forum", c)] / jobs[("redis", c)] for c in clients if ("forum", c) in jobs
        },
        "forum_batch_reserved_and_acked_per_second": batch,
    }


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        # uvloop on both sides: the node runs on it, and it is the same loop
        # for the Forum client and for redis-py.
        sys.exit(uvloop.run(main()))
