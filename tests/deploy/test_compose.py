"""deploy/docker-compose.yml: valid against the Compose Specification's JSON
schema, and wired the way the issue asks: three nodes behind Toxiproxy, Redis
with AOF, two workers, health checks. Every ``forum`` command in it goes
through the real ``forum`` parser and NodeConfig.

The schema is the copy that the check-jsonschema package ships (no download at
test time). Not checked here: ``docker compose config`` itself (this machine
has the docker client but no compose plugin and no engine), that the images
pull or build, and that the containers start and talk to each other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

import jsonschema
import pytest

from forum.node.config.node import NodeConfig
from forum.replication.config import ReplicationConfig
from tests.deploy.artifacts import (
    COMPOSE_TEST_ENV,
    REPO,
    Dockerfile,
    Launch,
    compose_launches,
    interpolate,
    url_host_port,
)

NODES = ("node-a", "node-b", "node-c")
WORKERS = ("worker-1", "worker-2")


def compose_schema() -> dict[str, Any]:
    vendored = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema: dict[str, Any] = json.loads(vendored.read_text())
    return schema


def launches(compose: Mapping[str, Any], docker: Dockerfile) -> dict[str, Launch]:
    return {
        launch.where.removeprefix("compose service "): launch
        for launch in compose_launches(compose, docker)
    }


def proxies(compose: Mapping[str, Any]) -> dict[tuple[str, int], tuple[str, int]]:
    """Toxiproxy's proxies: (toxiproxy, listen port) -> (upstream host, port)."""
    content = compose["configs"]["toxiproxy-proxies"]["content"]
    table = {}
    for proxy in json.loads(content):
        _, _, port = proxy["listen"].rpartition(":")
        host, _, upstream_port = proxy["upstream"].rpartition(":")
        assert proxy["enabled"], proxy
        assert ("toxiproxy", int(port)) not in table, f"two proxies on port {port}"
        table["toxiproxy", int(port)] = (host, int(upstream_port))
    return table


def through_proxy(compose: Mapping[str, Any], url: str) -> tuple[str, int]:
    """Where a URL really leads: through Toxiproxy if it names a proxy."""
    address = url_host_port(url)
    return proxies(compose).get(address, address)


def test_valid_against_the_compose_spec_schema(compose: Mapping[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(compose_schema())
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_the_schema_is_strict_enough_to_catch_a_typo(compose: Mapping[str, Any]) -> None:
    broken = json.loads(json.dumps(compose))
    broken["services"]["node-a"]["healthchek"] = broken["services"]["node-a"].pop("healthcheck")
    validator = jsonschema.Draft202012Validator(compose_schema())
    assert any("healthchek" in e.message for e in validator.iter_errors(broken))


def test_the_services_are_the_ones_the_issue_asks_for(compose: Mapping[str, Any]) -> None:
    assert set(compose["services"]) == {*NODES, *WORKERS, "redis", "toxiproxy"}
    for name, service in compose["services"].items():
        assert "healthcheck" in service, f"{name} has no health check"
        assert service.get("restart") == "unless-stopped", name


def test_every_forum_command_parses_with_the_real_cli(
    compose: Mapping[str, Any], docker: Dockerfile
) -> None:
    found = launches(compose, docker)
    assert set(found) == {*NODES, *WORKERS}
    for name, launch in found.items():
        args = launch.parse()
        assert args.command == ("serve" if name in NODES else "worker"), name


def test_the_required_secret_must_be_given() -> None:
    line = "${FORUM_CLUSTER_SECRET:?set FORUM_CLUSTER_SECRET first (see deploy/README.md)}"
    with pytest.raises(KeyError, match="set FORUM_CLUSTER_SECRET"):
        interpolate(line, {})
    assert interpolate(line, COMPOSE_TEST_ENV) == COMPOSE_TEST_ENV["FORUM_CLUSTER_SECRET"]


def test_nodes_have_stable_distinct_ids_and_their_own_volumes(
    compose: Mapping[str, Any], docker: Dockerfile
) -> None:
    found = launches(compose, docker)
    ids, volumes = set(), set()
    for name in NODES:
        config = found[name].node_config()
        assert config.node_id == name
        mounts = dict(v.split(":", 1) for v in compose["services"][name]["volumes"])
        volume = {target: source for source, target in mounts.items()}[str(config.data_dir)]
        assert volume in compose["volumes"], f"{name}: volume {volume} is not declared"
        ids.add(config.node_id)
        volumes.add(volume)
        assert config.cluster_secret == COMPOSE_TEST_ENV["FORUM_CLUSTER_SECRET"]
        assert config.fsync == "always"
    assert len(ids) == len(volumes) == len(NODES)


def test_node_environment_names_only_real_settings(
    compose: Mapping[str, Any], docker: Dockerfile
) -> None:
    """``NodeConfig`` lets the other commands' FORUM_ variables through
    (``FORUM_NODE``, ...), which a node's manifest has no use for: catch them here."""
    keys = {f"FORUM_{name.upper()}" for name in NodeConfig.__dataclass_fields__} | {"FORUM_CONFIG"}
    for name, launch in launches(compose, docker).items():
        if name not in NODES:
            continue
        replication = {k: v for k, v in launch.env.items() if k.startswith("FORUM_REPL_")}
        ReplicationConfig.from_env(replication)  # raises on an unknown or bad one
        unknown = {k for k in launch.env if k.startswith("FORUM_")} - keys - set(replication)
        assert not unknown, f"{name}: {unknown} are not node settings"


def test_nodes_advertise_their_proxy_and_peer_through_the_others(
    compose: Mapping[str, Any], docker: Dockerfile
) -> None:
    found = launches(compose, docker)
    listen = {name: found[name].node_config().port for name in NODES}
    for name in NODES:
        config = found[name].node_config()
        assert config.advertise is not None
        assert url_host_port(config.advertise)[0] == "toxiproxy", "peers must dial the proxy"
        assert through_proxy(compose, config.advertise) == (name, listen[name])
        reached = set()
        for peer in config.peers:
            assert url_host_port(peer)[0] == "toxiproxy", f"{name}: {peer} bypasses Toxiproxy"
            host, port = through_proxy(compose, peer)
            assert host in listen, f"{name}: peer {peer} leads to {host}, not a node"
            assert port == listen[host], f"{name}: peer {peer} leads to {host}:{port}"
            reached.add(host)
        assert reached == set(NODES) - {name}


def test_toxiproxy_fronts_every_node_and_redis(compose: Mapping[str, Any]) -> None:
    upstreams = {host for host, _port in proxies(compose).values()}
    assert upstreams == {*NODES, "redis"}
    service = compose["services"]["toxiproxy"]
    assert any(c["source"] == "toxiproxy-proxies" for c in service["configs"])
    target = next(c["target"] for c in service["configs"] if c["source"] == "toxiproxy-proxies")
    assert f"-config={target}" in service["command"]
    assert "-host=0.0.0.0" in service["command"]


def test_node_health_checks_and_published_ports_use_the_listen_port(
    compose: Mapping[str, Any], docker: Dockerfile
) -> None:
    found = launches(compose, docker)
    for name in NODES:
        config = found[name].node_config()
        test = compose["services"][name]["healthcheck"]["test"]
        assert test[0] == "CMD"
        code = " ".join(test[1:])
        assert f"http://127.0.0.1:{config.port}/readyz" in code or (
            f"http://127.0.0.1:{config.port}/healthz" in code
        ), code
        for published in compose["services"][name]["ports"]:
            host_ip, _, container_port = published.split(":")
            assert host_ip == "127.0.0.1", "the API is published on loopback only"
            assert int(container_port) == config.port
        grace = compose["services"][name]["stop_grace_period"]
        assert grace.endswith("s") and float(grace[:-1]) > config.shutdown_timeout


def test_redis_runs_with_aof_fsync_always_and_noeviction(compose: Mapping[str, Any]) -> None:
    redis = compose["services"]["redis"]
    command = redis["command"]
    assert command[0] == "redis-server"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--appendfsync"] == "always"
    assert options["--maxmemory-policy"] == "noeviction"
    assert any(v.endswith(":/data") for v in redis["volumes"]), "the AOF must be on a volume"
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_workers_reach_a_node_and_redis_through_toxiproxy(
    compose: Mapping[str, Any], docker: Dockerfile
) -> None:
    found = launches(compose, docker)
    listen = {name: found[name].node_config().port for name in NODES}
    nodes_used = set()
    for name in WORKERS:
        args = found[name].parse()
        assert url_host_port(args.node)[0] == "toxiproxy"
        host, port = through_proxy(compose, args.node)
        assert host in listen and port == listen[host], f"{name}: --node {args.node}"
        nodes_used.add(host)
        assert url_host_port(args.redis_url)[0] == "toxiproxy"
        assert through_proxy(compose, args.redis_url) == ("redis", 6379)
        depends = compose["services"][name]["depends_on"]
        assert {*NODES, "redis", "toxiproxy"} <= set(depends)
        assert all(d["condition"] == "service_healthy" for d in depends.values())
    assert len(nodes_used) == len(WORKERS), "workers on different nodes see double takes"


def test_worker_health_check_asks_its_metrics_port(
    compose: Mapping[str, Any], docker: Dockerfile
) -> None:
    """The image's HEALTHCHECK asks a node's /healthz; a worker must override it."""
    for name, launch in launches(compose, docker).items():
        if name not in WORKERS:
            continue
        args = launch.parse()
        assert args.metrics_port is not None
        code = " ".join(compose["services"][name]["healthcheck"]["test"])
        assert f"http://127.0.0.1:{args.metrics_port}/metrics" in code
        assert compose["services"][name]["build"]["target"] == "examples"
        grace = compose["services"][name]["stop_grace_period"]
        assert float(grace.removesuffix("s")) > args.drain_timeout


def test_worker_handler_module_is_in_the_image(
    compose: Mapping[str, Any], docker: Dockerfile
) -> None:
    for name, launch in launches(compose, docker).items():
        if name not in WORKERS:
            continue
        module, _, _ = launch.parse().handler.partition(":")
        source = REPO.joinpath(*module.split(".")).with_suffix(".py")
        assert source.exists(), f"{name}: {module} is not in the repo"
        top = module.split(".")[0]
        image = docker.image(compose["services"][name]["build"]["target"])
        pythonpath = image.env.get("PYTHONPATH", "")
        copies = [c.value for s in docker.chain(image.target) for c in s.all("COPY")]
        assert (top, f"{pythonpath}/{top}") in copies, f"{name}: {top} is not on the image's path"


def test_depends_on_names_services_with_health_checks(compose: Mapping[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, rule in (service.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            if rule.get("condition") == "service_healthy":
                assert "healthcheck" in services[dependency], dependency
