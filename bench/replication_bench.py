"""Replication between three ``forum serve`` nodes on this machine.

Usage: ``python bench/replication_bench.py [--seconds 10] [--partition 30] [--fsync always]
[--out PATH]``

Three nodes (A, B, C), default replication settings (``FORUM_REPL_*`` given
to the bench are passed on), ``fsync always``. The lag phases run on nodes
peered directly; the bytes and heal phases on a second trio whose links go
through Toxiproxy (one proxy per directed link, so they can be cut, or led
through a byte-counting relay). Measured:

lag             from a write acknowledged by A (the client has the answer) to
                the tuple held on B *and* C. Probes: one write in ten (one in
                fifty at max rate) writes a tuple for B and one for C, awaited by
                blocking takes already waiting there; a take answers when its
                tuple is live, which the node delays on purpose (forum.node.space.surfacing's
                ``REMOTE_DELAY`` stagger: 10 ms times the node's rank among the
                live members, 1 or 2 here, ``forum.replication.ranking``): "visible"
                is that, "replicated" takes the known stagger out. Both also hold one HTTP
                answer, so they err high. At 1,000 writes/s (paced, open loop)
                and at the writer's maximum (16 writers, closed loop).
bytes           bytes sent between nodes per replicated entry (per entry per
                receiving node), over 5 s at 1,000 writes/s: message bodies from
                the nodes' metrics, and bytes on the wire (HTTP included) counted
                by a relay the links pass through for that phase; against the
                entry's own msgpack size (``forum.node.core.codec``).
heal            A cut off from B and C for ``--partition`` seconds while 10,000
                writes are made on B; then the time from heal until every node
                holds the same entries and the same live set.

Targets (issue 4): p99 lag <= 10 ms at 1,000 writes/s; heal <= 2 s; bytes
<= 2x the entry's msgpack size. Prints a table; writes JSON to
``bench/results/replication_bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import uvloop

from forum.deploy.processes import NodeService, ToxiproxyService, free_port
from forum.deploy.toxiproxy import Proxy, Toxiproxy
from forum.node.client.remote import ForumClient
from forum.node.core.codec import encode_entry
from forum.node.core.entries import EntryId, Write
from forum.node.core.space import Pattern
from forum.node.space.surfacing import REMOTE_DELAY
from forum.replication.ranking import rank_among

ROOT = Path(__file__).resolve().parent.parent

PAYLOAD_BYTES = 100
PARTITION_WRITES = 10_000
MAX_RATE_WRITERS = 16


@dataclass
class Lag:
    """Milliseconds from a write acknowledged on A to held on B and C."""

    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Lag:
        ms = [max(0.0, x) * 1000 for x in seconds]
        return cls(quantile(ms, 0.5), quantile(ms, 0.99), max(ms))


@dataclass
class LagRun:
    rate: float  # writes/s achieved
    probes: int
    #: Held (durable) on B and C: what replication itself takes.
    replicated: Lag
    #: Live (readable) on B and C: adds the node's deliberate stagger.
    visible: Lag


class Probes:
    """Lag samples: replicated (stagger taken out) and visible, per probe."""

    def __init__(self) -> None:
        self.replicated: list[float] = []
        self.visible: list[float] = []

    def run(self, rate: float) -> LagRun:
        return LagRun(rate, len(self.visible), Lag.of(self.replicated), Lag.of(self.visible))


def payload(tag: str, i: int) -> bytes:
    head = f"{tag}-{i:08d}-".encode()
    return head + b"x" * (PAYLOAD_BYTES - len(head))


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Cluster:
    """A, B, C as ``forum serve`` processes; with ``toxiproxy``, linked through it."""

    def __init__(self, root: Path, toxiproxy: Toxiproxy | None, fsync: str) -> None:
        self.toxiproxy = toxiproxy
        # FORUM_REPL_* tuning given to the bench goes to the nodes.
        tuning = {k: v for k, v in os.environ.items() if k.startswith("FORUM_REPL_")}
        args = ["--fsync", fsync]
        self.nodes = [NodeService(name, root, args, env=tuning) for name in "abc"]
        self.links: dict[tuple[str, str], Proxy] = {}
        self.clients: list[ForumClient] = []
        self.origins: list[str] = []

    async def start(self) -> None:
        if self.toxiproxy is not None:
            upstreams = {n.name: self.upstream(n) for n in self.nodes}
            self.links = await self.toxiproxy.links(upstreams)
        for node in self.nodes:
            for peer in self.nodes:
                if peer is not node:
                    link = self.links.get((node.name, peer.name))
                    node.args += ["--peer", link.url if link else peer.url]
        async with asyncio.TaskGroup() as group:
            for node in self.nodes:
                group.create_task(node.start())
        self.clients = [ForumClient(n.url, timeout=60, pool_size=200) for n in self.nodes]
        self.origins = [(await client.status()).origin for client in self.clients]

    @staticmethod
    def upstream(node: NodeService) -> str:
        return f"127.0.0.1:{node.port}"

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()
        async with asyncio.TaskGroup() as group:
            for node in self.nodes:
                group.create_task(node.stop())

    async def settled(self, deadline: float = 60.0) -> float:
        """Wait until all nodes hold the same entries and live tuples; seconds waited."""
        started = time.perf_counter()
        while True:
            statuses = [await c.status() for c in self.clients]
            if len({(s.entries, s.live) for s in statuses}) == 1:
                return time.perf_counter() - started
            if time.perf_counter() - started > deadline:
                raise TimeoutError(f"not converged in {deadline} s: {statuses}")
            await asyncio.sleep(0.005)

    async def metric_sum(self, name: str) -> float:
        total = 0.0
        pattern = re.compile(rf"^{name}(?:\{{[^}}]*\}})? ([0-9.e+-]+)$", re.MULTILINE)
        async with aiohttp.ClientSession() as session:
            for node in self.nodes:
                async with session.get(node.url + "/metrics") as response:
                    text = await response.text()
                total += sum(float(v) for v in pattern.findall(text))
        return total


async def probe(cluster: Cluster, data: bytes, probes: Probes) -> None:
    """Write on A one tuple for B and one for C, each awaited there by a blocking
    take; record when B and C held them and when they were live there."""
    a, b, c = cluster.clients
    mine = [data + b"-b", data + b"-c"]

    async def seen(client: ForumClient, payload: bytes) -> float:
        found = await client.take_entry(Pattern(payload), timeout=30)
        if found is None:
            raise RuntimeError(f"{payload!r} never became live on {client.url}")
        return time.perf_counter()

    watchers = [
        asyncio.create_task(seen(client, p)) for client, p in zip((b, c), mine, strict=True)
    ]
    await asyncio.sleep(0.003)  # the takes are waiting before the write
    ids = await a.write_many(mine)
    acknowledged = time.perf_counter()
    visible = await asyncio.gather(*watchers)
    probes.visible.append(max(visible) - acknowledged)
    held = [
        at - REMOTE_DELAY * rank_among(entry_id, origin, set(cluster.origins))
        for at, entry_id, origin in zip(visible, ids, cluster.origins[1:], strict=True)
    ]
    probes.replicated.append(max(held) - acknowledged)


async def lag_paced(cluster: Cluster, rate: float, seconds: float, tag: str) -> LagRun:
    """Open loop: a write every 1/rate s; every tenth is a probe."""
    a = cluster.clients[0]
    probes = Probes()
    total = int(rate * seconds)
    start = time.perf_counter() + 0.05

    async def one(i: int) -> None:
        data = payload(tag, i)
        if i % 10 == 0:
            await probe(cluster, data, probes)
        else:
            await a.write(data)

    async with asyncio.TaskGroup() as group:
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            group.create_task(one(i))
    return probes.run(total / (time.perf_counter() - start))


async def lag_max(cluster: Cluster, seconds: float, tag: str) -> LagRun:
    """Closed loop: ``MAX_RATE_WRITERS`` writers as fast as A answers; one in fifty probed."""
    a = cluster.clients[0]
    probes = Probes()
    counter = 0
    stop = time.perf_counter() + seconds

    async def writer() -> None:
        nonlocal counter
        while time.perf_counter() < stop:
            counter += 1
            data = payload(tag, counter)
            if counter % 50 == 0:
                await probe(cluster, data, probes)
            else:
                await a.write(data)

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(MAX_RATE_WRITERS):
            group.create_task(writer())
    return probes.run(counter / (time.perf_counter() - started))


class Relay:
    """TCP relays counting every byte both ways, on a thread of their own."""

    def __init__(self) -> None:
        self.bytes = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        async def close() -> None:
            for server in self._servers:
                server.close()
            # Cut the sockets: each pipe sees its end and its handler returns.
            for stream in self._writers:
                stream.transport.abort()
            await asyncio.gather(*self._connections, return_exceptions=True)
            for server in self._servers:
                await server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def add(self, upstream_port: int) -> int:
        """A relay to ``127.0.0.1:upstream_port``; returns the port it listens on."""
        port = free_port()

        async def serve() -> asyncio.Server:
            return await asyncio.start_server(
                lambda r, w: self._pipe_both(r, w, upstream_port), "127.0.0.1", port
            )

        self._servers.append(asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10))
        return port

    async def _pipe_both(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream_port: int
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
            self._writers.add(up_writer)
            async with asyncio.TaskGroup() as group:
                group.create_task(self._pipe(reader, up_writer))
                group.create_task(self._pipe(up_reader, writer))
        except OSError:
            pass  # the upstream refused or a side reset: the relay just closes
        finally:
            self._connections.discard(task)
            self._writers.discard(writer)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                with self._lock:
                    self.bytes += len(data)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass  # one side went away: so does the other
        finally:
            self._writers.discard(writer)
            writer.close()


async def bytes_per_entry(cluster: Cluster, seconds: float) -> dict[str, float]:
    """Body and wire bytes between nodes per replicated entry, at 1,000 writes/s."""
    entry_size = len(encode_entry(Write(EntryId("a-0123abcd", 123456), payload("bytes", 0))))
    assert cluster.toxiproxy is not None
    toxiproxy = cluster.toxiproxy
    with Relay() as relay:
        relays = {n.name: relay.add(n.port) for n in cluster.nodes}
        for (_, target), proxy in cluster.links.items():
            await toxiproxy.set_upstream(proxy.name, f"127.0.0.1:{relays[target]}")
        await cluster.settled()
        body_before = await cluster.metric_sum("forum_replication_bytes_sent_total")
        wire_before = relay.bytes
        entries_before = (await cluster.clients[0].status()).entries
        await lag_paced(cluster, 1000, seconds, "bytes")
        await cluster.settled()
        body = await cluster.metric_sum("forum_replication_bytes_sent_total") - body_before
        wire = relay.bytes - wire_before
        # Writes and the probes' takes: every entry goes to the two other nodes.
        entries = (await cluster.clients[0].status()).entries - entries_before
        for (_, target), proxy in cluster.links.items():
            node = cluster.nodes["abc".index(target)]
            await toxiproxy.set_upstream(proxy.name, cluster.upstream(node))
    replicas = entries * (len(cluster.nodes) - 1)
    return {
        "entry_msgpack_bytes": entry_size,
        "body_bytes_per_entry": body / replicas,
        "wire_bytes_per_entry": wire / replicas,
        "body_ratio": body / replicas / entry_size,
        "wire_ratio": wire / replicas / entry_size,
    }


async def heal_time(cluster: Cluster, partition_seconds: float) -> dict[str, float]:
    """A cut off while B takes 10,000 writes; seconds from heal to one state."""
    b = cluster.clients[1]
    await cluster.settled()
    assert cluster.toxiproxy is not None
    async with cluster.toxiproxy.partition(cluster.links, {"a"}, {"b", "c"}):
        start = time.perf_counter()
        batch = 100
        for i in range(0, PARTITION_WRITES, batch):
            await b.write_many([payload("split", i + j) for j in range(batch)])
            pace = start + (i + batch) / PARTITION_WRITES * partition_seconds - time.perf_counter()
            if pace > 0:
                await asyncio.sleep(pace)
        remaining = start + partition_seconds - time.perf_counter()
        if remaining > 0:
            await asyncio.sleep(remaining)
        behind = (await cluster.clients[0].status()).live, (await b.status()).live
    healed = await cluster.settled()
    return {
        "partition_seconds": partition_seconds,
        "writes_during_partition": PARTITION_WRITES,
        "live_a_b_before_heal": list(behind),  # type: ignore[dict-item]
        "heal_seconds": healed,
    }


@contextlib.asynccontextmanager
async def running(root: Path, fsync: str) -> AsyncIterator[Cluster]:
    """Three nodes peered directly, as they would be in production."""
    cluster = Cluster(root, None, fsync)
    try:
        await cluster.start()
        yield cluster
    finally:
        await cluster.aclose()


@contextlib.asynccontextmanager
async def running_proxied(root: Path, fsync: str) -> AsyncIterator[Cluster]:
    """Three nodes peered through Toxiproxy links (to cut them, or to count bytes)."""
    server = ToxiproxyService("toxiproxy", root)
    await server.start()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            cluster = Cluster(root, Toxiproxy(server.url, session), fsync)
            try:
                await cluster.start()
                yield cluster
            finally:
                await cluster.aclose()
    finally:
        await server.stop()


async def main(args: argparse.Namespace) -> dict[str, object]:
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="repl-bench-") as tmp:
        async with running(Path(tmp) / "direct", args.fsync) as cluster:
            await lag_paced(cluster, 500, 1, "warmup")
            await cluster.settled()
            paced = await lag_paced(cluster, 1000, args.seconds, "paced")
            await cluster.settled()
            fastest = await lag_max(cluster, args.seconds, "max")
        async with running_proxied(Path(tmp) / "proxied", args.fsync) as cluster:
            await lag_paced(cluster, 500, 1, "warmup")
            await cluster.settled()
            sizes = await bytes_per_entry(cluster, 5)
            heal = await heal_time(cluster, args.partition)
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": load,
        },
        "fsync": args.fsync,
        "remote_delay_s": REMOTE_DELAY,
        "lag_at_1000_per_s": asdict(paced),
        "lag_at_max_rate": asdict(fastest),
        "bytes": sizes,
        "heal": heal,
    }


def report(results: dict[str, object]) -> None:
    print(
        f"{'phase':<18}{'writes/s':>9}{'probes':>7}   {'replicated p50/p99/max ms':<27}"
        f"{'visible p50/p99/max ms'}"
    )
    for name in ("lag_at_1000_per_s", "lag_at_max_rate"):
        run = results[name]
        assert isinstance(run, dict)
        cells = [
            "/".join(f"{run[kind][q]:.1f}" for q in ("p50_ms", "p99_ms", "max_ms"))
            for kind in ("replicated", "visible")
        ]
        print(f"{name:<18}{run['rate']:>9.0f}{run['probes']:>7}   {cells[0]:<27}{cells[1]}")
    sizes = results["bytes"]
    heal = results["heal"]
    assert isinstance(sizes, dict) and isinstance(heal, dict)
    print(
        f"bytes per replicated entry: entry {sizes['entry_msgpack_bytes']} B; bodies "
        f"{sizes['body_bytes_per_entry']:.1f} B ({sizes['body_ratio']:.2f}x); on the wire "
        f"{sizes['wire_bytes_per_entry']:.1f} B ({sizes['wire_ratio']:.2f}x)"
    )
    print(
        f"heal: {heal['writes_during_partition']} writes during a "
        f"{heal['partition_seconds']:.0f} s partition; "
        f"converged {heal['heal_seconds']:.2f} s after heal"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per lag phase")
    parser.add_argument("--partition", type=float, default=30.0, help="partition seconds")
    parser.add_argument(
        "--fsync", choices=("always", "interval", "never"), default="always", help="the nodes'"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "replication_bench.json"
    )
    arguments = parser.parse_args()
    started = time.monotonic()
    outcome = uvloop.run(main(arguments))
    outcome["bench_seconds"] = round(time.monotonic() - started, 1)
    report(outcome)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(outcome, indent=2) + "\n")
    print(f"wrote {arguments.out}")
