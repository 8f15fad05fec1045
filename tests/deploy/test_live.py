"""What the manifests run, run for real on loopback: no Docker engine or cluster
here, so the containers' processes are started as plain processes instead.

* A node started from an example config answers every probe path the
  manifests use, and the image's and compose's health-check commands pass.
* redis-server accepts the manifests' options and reports AOF, fsync always
  and noeviction back.
* The compose topology on loopback (slow): Redis, toxiproxy-server with the
  compose file's proxies, three nodes and two workers with the compose file's
  own argv and environment, each compose ``host:port`` mapped to a free
  loopback port. Jobs written on node-a, which no worker uses, are done by the
  workers on node-b and node-c: replication through Toxiproxy, the cluster
  secret, the worker flags and the handler module all work as written.

Not the same as the containers: the image's Python and Redis versions may
differ from this machine's (Redis 7.0 here, 7.4 in the manifests), and the
network is loopback, not a bridge with DNS.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from forum.deploy.processes import (
    NodeService,
    RedisService,
    Service,
    ToxiproxyService,
    WorkerService,
    find_binary,
)
from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.deploy.artifacts import (
    CONFIGS,
    REPO,
    Dockerfile,
    Launch,
    compose_launches,
    load_k8s,
    named_ports,
)
from tests.fixtures.nodes import NodeProcess, eventually
from tests.fixtures.ports import free_port

#: How long the compose topology may take to do its jobs once it is up.
JOBS_DEADLINE = 60.0
JOBS = 20


def probe_paths(compose: Mapping[str, Any]) -> set[str]:
    """Every HTTP path a health check or probe of a node asks for."""
    paths = set()
    for name, service in compose["services"].items():
        if name.startswith("node-"):
            paths |= set(
                re.findall(r"127\.0\.0\.1:\d+(/\w+)", " ".join(service["healthcheck"]["test"]))
            )
    for _, doc in load_k8s():
        if doc["kind"] != "StatefulSet":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if container["name"] != "forum":
                continue  # the worker next to the node is probed on its own port
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                if probe in container:
                    paths.add(container[probe]["httpGet"]["path"])
    return paths


async def run(argv: Sequence[str]) -> int:
    process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL)
    async with asyncio.timeout(30):
        return await process.wait()


def healthcheck_on(test: Sequence[str], port: int) -> list[str]:
    """A ``CMD python -c ...`` check with its port moved, run by this Python."""
    kind, program, *rest = test
    assert (kind, program) == ("CMD", "python")
    return [sys.executable, *(re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", a) for a in rest)]


async def test_a_node_from_the_example_config_answers_every_probe(
    forum_nodes: Any, docker: Dockerfile, compose: Mapping[str, Any]
) -> None:
    # The file's peers (7072, 7073) may be a real cluster someone runs here: a
    # flag replaces them with a port that nothing listens on.
    nowhere = f"http://127.0.0.1:{free_port()}"
    node: NodeProcess = await forum_nodes.start(
        "a", "--config", str(CONFIGS / "local-a.toml"), "--peer", nowhere
    )
    paths = probe_paths(compose)
    assert paths == {"/readyz", "/healthz"}
    async with aiohttp.ClientSession() as session:
        for path in [*paths, "/metrics"]:
            async with session.get(node.url + path) as response:
                assert response.status == 200, path
    image = docker.image()
    assert image.healthcheck is not None
    assert await run(healthcheck_on(image.healthcheck, node.port)) == 0
    node_check = compose["services"]["node-a"]["healthcheck"]["test"]
    assert await run(healthcheck_on(node_check, node.port)) == 0
    await node.stop()
    assert await run(healthcheck_on(image.healthcheck, node.port)) != 0, "a check that never fails"


_OURS = frozenset({"--port", "--bind", "--dir", "--protected-mode"})


class ManifestRedis(RedisService):
    """redis-server with a manifest's options, moved to a loopback port and a temp dir."""

    def __init__(self, name: str, root: Path, options: Sequence[str], port: int | None = None):
        super().__init__(name, root, port)
        # Redis acts on --dir at once (chdir), so a later one cannot undo the manifest's.
        pairs = zip(options[::2], options[1::2], strict=True)
        self.options = [word for pair in pairs if pair[0] not in _OURS for word in pair]

    def command(self) -> list[str]:
        return [
            find_binary("redis-server"),
            *self.options,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.root),
            "--protected-mode", "no",
        ]  # fmt: skip


def redis_options(compose: Mapping[str, Any]) -> dict[str, list[str]]:
    found = {"compose": compose["services"]["redis"]["command"]}
    for _, doc in load_k8s():
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "forum-redis":
            found["k8s"] = doc["spec"]["template"]["spec"]["containers"][0]["command"]
    assert all(command[0] == "redis-server" for command in found.values())
    return {where: command[1:] for where, command in found.items()}


@pytest.mark.parametrize("where", ["compose", "k8s"])
async def test_redis_takes_the_manifest_options(
    where: str, compose: Mapping[str, Any], tmp_path: Path
) -> None:
    redis = ManifestRedis("redis", tmp_path, redis_options(compose)[where])
    await redis.start()
    try:
        async with Redis.from_url(redis.url) as client:
            settings = await client.config_get("*")
        assert settings["appendonly"] == "yes"
        assert settings["appendfsync"] == "always"
        assert settings["maxmemory-policy"] == "noeviction"
    finally:
        await redis.stop()


# -- the compose topology on loopback ------------------------------------------------


class Loopback:
    """Gives each compose-network ``host:port`` a free port on 127.0.0.1."""

    def __init__(self) -> None:
        self.ports: dict[tuple[str, int], int] = {}

    def port(self, host: str, port: int) -> int:
        return self.ports.setdefault((host, port), free_port())

    def address(self, text: str) -> str:
        """Every ``host:port`` in ``text`` (a URL, a listen address) moved to loopback."""

        def move(match: re.Match[str]) -> str:
            return f"127.0.0.1:{self.port(match[1], int(match[2]))}"

        return re.sub(r"([a-z][a-z0-9-]*):(\d+)", move, text)


def rewritten(launch: Launch, service: str, net: Loopback, drop: set[str]) -> list[str]:
    """A compose argv (without the subcommand) with addresses moved and ``drop`` left out."""
    args = []
    for arg in launch.argv[1:]:
        option, sep, value = arg.partition("=")
        assert sep, f"{launch.where}: write {arg} as --option=value"
        if option in drop:
            continue
        if option == "--listen":
            _, _, port = value.rpartition(":")
            value = f"127.0.0.1:{net.port(service, int(port))}"
        elif option in ("--peer", "--advertise", "--node", "--redis-url"):
            value = net.address(value)
        args.append(f"{option}={value}")
    return args


class ManifestToxiproxy(ToxiproxyService):
    """toxiproxy-server with the compose file's command and proxies, moved to loopback."""

    def __init__(self, root: Path, command: Sequence[str], proxies: str, net: Loopback) -> None:
        super().__init__("toxiproxy", root)
        self.flags = [a for a in command if not a.startswith(("-host=", "-config="))]
        moved = [
            {**p, "listen": net.address(f"toxiproxy:{p['listen'].rpartition(':')[2]}"),
             "upstream": net.address(p["upstream"])}
            for p in json.loads(proxies)
        ]  # fmt: skip
        self.config = self.root / "proxies.json"
        self.root.mkdir(parents=True, exist_ok=True)
        self.config.write_text(json.dumps(moved))

    def command(self) -> list[str]:
        return [
            find_binary("toxiproxy-server"), *self.flags,
            "-host=127.0.0.1", f"-port={self.port}", f"-config={self.config}",
        ]  # fmt: skip


def service_env(launch: Launch, net: Loopback) -> dict[str, str]:
    """The container's environment as this machine needs it: examples/ on the path as in
    the image (which has it at /opt/forum), addresses moved to loopback."""
    env = {k: net.address(v) if "://" in v else v for k, v in launch.env.items()}
    env.pop("FORUM_LISTEN", None)
    env.pop("FORUM_DATA_DIR", None)
    if "PYTHONPATH" in env:
        env["PYTHONPATH"] = str(REPO)
    return env


async def scrape(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as response:
        response.raise_for_status()
        return await response.text()


def done_jobs(metrics: str) -> float:
    match = re.search(r'^forum_worker_jobs_total\{outcome="done"\} (\S+)$', metrics, re.MULTILINE)
    return float(match[1]) if match else 0.0


@pytest.fixture
async def services() -> AsyncIterator[list[Service]]:
    """Services a test started; all stopped at teardown, whatever happened."""
    started: list[Service] = []
    try:
        yield started
    finally:
        async with asyncio.TaskGroup() as group:
            for service in reversed(started):
                group.create_task(service.stop())


@pytest.mark.slow
async def test_the_compose_topology_does_its_jobs_on_loopback(
    compose: Mapping[str, Any], docker: Dockerfile, tmp_path: Path, services: list[Service]
) -> None:
    net = Loopback()
    launches = {
        launch.where.removeprefix("compose service "): launch
        for launch in compose_launches(compose, docker)
    }
    redis_command = compose["services"]["redis"]["command"]
    redis = ManifestRedis("redis", tmp_path, redis_command[1:], port=net.port("redis", 6379))
    toxiproxy = ManifestToxiproxy(
        tmp_path,
        compose["services"]["toxiproxy"]["command"],
        compose["configs"]["toxiproxy-proxies"]["content"],
        net,
    )
    nodes = {
        name: NodeService(
            name,
            tmp_path,
            rewritten(launch, name, net, drop={"--data-dir"}),
            env=service_env(launch, net),
            port=net.port(name, 7070),
        )
        for name, launch in launches.items()
        if launch.command == "serve"
    }
    for service in (redis, toxiproxy):
        services.append(service)
        await service.start()
    services.extend(nodes.values())
    async with asyncio.TaskGroup() as group:
        for node in nodes.values():
            group.create_task(node.start())
    async with aiohttp.ClientSession() as session:
        async with session.get(toxiproxy.url + "/proxies") as response:
            assert set(await response.json()) == {"node-a", "node-b", "node-c", "redis"}
        workers = []
        for name, launch in launches.items():
            if launch.command != "worker":
                continue
            worker = WorkerService(
                name, tmp_path, rewritten(launch, name, net, {"--metrics-port", "--metrics-host"})
            )
            worker.env.update(service_env(launch, net))
            workers.append(worker)
            services.append(worker)
        async with asyncio.TaskGroup() as group:
            for worker in workers:
                group.create_task(worker.start())
        assert {w.name for w in workers} == {"worker-1", "worker-2"}
        # Written where no worker takes: only replication brings the jobs to them.
        async with ForumClient(nodes["node-a"].url) as client:
            for i in range(JOBS):
                await client.write(f"job/{i}".encode())

        async def all_done() -> bool:
            pages = [await scrape(session, f"http://127.0.0.1:{w.port}/metrics") for w in workers]
            return sum(done_jobs(page) for page in pages) >= JOBS

        await eventually(all_done, JOBS_DEADLINE, f"{JOBS} jobs done by the workers")
    # A job counts as done at its completion; its ack (the Take) follows, and
    # reaches the other nodes' copies by replication a moment later.
    for node in nodes.values():
        async with ForumClient(node.url) as client:
            await eventually(
                lambda c=client: _none_live(c), 30.0, f"no job left live on {node.name}"
            )
    for worker in workers:
        assert await worker.stop() == 0, worker.log_text()
    for node in nodes.values():
        assert await node.stop() == 0, node.log_text()


def test_loopback_moves_every_address() -> None:
    net = Loopback()
    moved = net.address("http://toxiproxy:17071")
    assert moved == f"http://127.0.0.1:{net.ports['toxiproxy', 17071]}"
    assert net.address("redis://toxiproxy:16379/0").startswith("redis://127.0.0.1:")
    assert net.port("toxiproxy", 17071) == net.ports["toxiproxy", 17071]


def test_named_ports_resolve_names_and_numbers() -> None:
    ports = named_ports({"ports": [{"name": "http", "containerPort": 7070}]})
    assert ports == {"http": 7070, 7070: 7070}


async def _none_live(client: ForumClient) -> bool:
    return await client.count(Pattern(b"job/")) == 0
