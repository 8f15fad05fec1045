"""deploy/k8s/ (and deploy/k8s/groups/): every object valid against the Kubernetes OpenAPI schemas
(kubernetes-validate, offline, strict: an unknown field is an error), and the
objects wired to each other and to the real ``forum`` CLI: the StatefulSet's
pod names are the node ids and the peers' DNS names under a headless Service,
probes hit /readyz and /healthz on the listen port, Services select pods and
target ports that exist, each worker dials the node in its own pod (its
reservations live there) and Redis through a Service, and nothing asks
Prometheus to scrape the node's /metrics without the token.

Not checked here (no cluster on this machine): that the objects are accepted
by an API server (admission, defaulting, quotas), that volumes bind on a real
storage class, that DNS resolves, and that the pods start and become ready.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from forum.node.config.node import NodeConfig
from tests.deploy.artifacts import (
    K8S,
    KUSTOMIZATION,
    OPERATIONS,
    Dockerfile,
    Launch,
    container_environment,
    k8s_expand,
    k8s_files,
    k8s_group_files,
    launch,
    named_ports,
    url_host_port,
)

#: The oldest Kubernetes still supported upstream when this was written, and the
#: newest the installed kubernetes-validate knows.
VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())
SECRET = "forum-secrets"

Documents = list[tuple[Path, dict[str, Any]]]


def objects(k8s: Documents, kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in k8s if doc["kind"] == kind}


def only(k8s: Documents, kind: str) -> dict[str, Any]:
    (found,) = objects(k8s, kind).values()
    return found


def pod_templates(k8s: Documents) -> Iterator[tuple[str, dict[str, Any]]]:
    for _, doc in k8s:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            yield f"{doc['kind']} {doc['metadata']['name']}", doc["spec"]["template"]


def image_targets(compose: Mapping[str, Any]) -> dict[str, str]:
    """Image name (without tag) -> Dockerfile target, as the compose file builds them."""
    return {
        service["image"].partition(":")[0]: service["build"].get("target", "forum")
        for service in compose["services"].values()
        if "build" in service
    }


def container_launch(
    where: str,
    container: Mapping[str, Any],
    pod_name: str,
    docker: Dockerfile,
    compose: Mapping[str, Any],
) -> Launch:
    target = image_targets(compose)[container["image"].partition(":")[0]]
    env = container_environment(container, pod_name)
    command = container.get("command")
    args = container.get("args")
    return launch(
        where,
        docker.image(target),
        None if command is None else [k8s_expand(a, env) for a in command],
        None if args is None else [k8s_expand(a, env) for a in args],
        env,
    )


def selects(service: Mapping[str, Any], template: Mapping[str, Any]) -> bool:
    labels = template["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


def service_port(k8s: Documents, host: str, port: int) -> tuple[dict[str, Any], int]:
    """The pod template and container port that ``host:port`` reaches through a Service."""
    service = objects(k8s, "Service").get(host)
    assert service is not None, f"no Service named {host}"
    (target,) = [p["targetPort"] for p in service["spec"]["ports"] if p["port"] == port]
    matched = [t for _, t in pod_templates(k8s) if selects(service, t)]
    assert len(matched) == 1, f"Service {host} selects {len(matched)} pod templates"
    (port,) = [
        named_ports(c)[target] for c in matched[0]["spec"]["containers"] if target in named_ports(c)
    ]
    return matched[0], port


def container(template: Mapping[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in template["spec"]["containers"] if c["name"] == name]
    return found


def node_container(k8s: Documents) -> dict[str, Any]:
    return container(only(k8s, "StatefulSet")["spec"]["template"], "forum")


def worker_container(k8s: Documents) -> dict[str, Any]:
    return container(only(k8s, "StatefulSet")["spec"]["template"], "worker")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "path", [*k8s_files(), *k8s_group_files()], ids=lambda p: str(p.relative_to(K8S))
)
def test_valid_against_the_kubernetes_schemas(path: Path, version: str) -> None:
    with open(path) as f:
        documents = [d for d in yaml.safe_load_all(f) if d is not None]
    assert documents
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)


def test_strict_validation_catches_a_typo(k8s: Documents) -> None:
    statefulset = yaml.safe_load(yaml.safe_dump(only(k8s, "StatefulSet")))
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    container["readinessProb"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinessProb"):
        kubernetes_validate.validate(statefulset, VERSIONS[-1], strict=True)


def test_kustomization_lists_every_manifest_and_image(
    k8s: Documents, compose: Mapping[str, Any]
) -> None:
    with open(KUSTOMIZATION) as f:
        kustomization = yaml.safe_load(f)
    assert sorted(kustomization["resources"]) == [p.name for p in k8s_files()]
    ours = {
        c["image"].partition(":")[0]
        for _, t in pod_templates(k8s)
        for c in t["spec"]["containers"]
        if c["image"].partition(":")[0] in image_targets(compose)
    }
    assert {i["name"] for i in kustomization["images"]} == ours


def test_the_objects_the_issue_asks_for(k8s: Documents) -> None:
    kinds = sorted((doc["kind"], doc["metadata"]["name"]) for _, doc in k8s)
    assert kinds == [
        ("Deployment", "forum-redis"),
        ("PersistentVolumeClaim", "forum-redis"),
        ("PodDisruptionBudget", "forum"),
        ("Service", "forum"),
        ("Service", "forum-api"),
        ("Service", "forum-redis"),
        ("StatefulSet", "forum"),
    ]


def test_nodes_are_a_statefulset_under_a_headless_service(k8s: Documents) -> None:
    statefulset = only(k8s, "StatefulSet")
    service = objects(k8s, "Service")[statefulset["spec"]["serviceName"]]
    assert service["spec"]["clusterIP"] == "None"
    assert selects(service, statefulset["spec"]["template"])
    assert statefulset["spec"]["replicas"] == 3
    selector = statefulset["spec"]["selector"]["matchLabels"]
    assert all(statefulset["spec"]["template"]["metadata"]["labels"][k] == v
               for k, v in selector.items())  # fmt: skip
    budget = only(k8s, "PodDisruptionBudget")
    assert budget["spec"]["selector"]["matchLabels"] == selector
    assert budget["spec"]["maxUnavailable"] == 1
    assert statefulset["spec"]["updateStrategy"]["type"] == "RollingUpdate"


def node_launches(k8s: Documents, docker: Dockerfile, compose: Mapping[str, Any]) -> list[Launch]:
    statefulset = only(k8s, "StatefulSet")
    name = statefulset["metadata"]["name"]
    node = node_container(k8s)
    return [
        container_launch(f"pod {name}-{i}", node, f"{name}-{i}", docker, compose)
        for i in range(statefulset["spec"]["replicas"])
    ]


def test_pod_names_are_node_ids_and_peers_are_every_pod(
    k8s: Documents, docker: Dockerfile, compose: Mapping[str, Any]
) -> None:
    statefulset = only(k8s, "StatefulSet")
    name, service = statefulset["metadata"]["name"], statefulset["spec"]["serviceName"]
    configs = [node.node_config() for node in node_launches(k8s, docker, compose)]
    dns = {f"{name}-{i}.{service}" for i in range(len(configs))}
    for i, config in enumerate(configs):
        assert config.node_id == f"{name}-{i}"
        assert config.advertise == f"http://{name}-{i}.{service}:{config.port}"
        peers = {url_host_port(peer) for peer in config.peers}
        assert peers == {(host, config.port) for host in dns}
        assert config.cluster_secret == f"secret-{SECRET}-cluster-secret"
        assert config.token == f"secret-{SECRET}-token"
        assert config.fsync == "always"


def test_each_node_has_its_own_volume_at_the_data_dir(
    k8s: Documents, docker: Dockerfile, compose: Mapping[str, Any]
) -> None:
    statefulset = only(k8s, "StatefulSet")
    claims = {t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in node_container(k8s)["volumeMounts"]}
    for node in node_launches(k8s, docker, compose):
        assert mounts[str(node.node_config().data_dir)] in claims
    policy = statefulset["spec"]["persistentVolumeClaimRetentionPolicy"]
    assert policy == {"whenDeleted": "Retain", "whenScaled": "Retain"}


def test_node_probes_hit_readyz_and_healthz_on_the_listen_port(
    k8s: Documents, docker: Dockerfile, compose: Mapping[str, Any]
) -> None:
    statefulset = only(k8s, "StatefulSet")
    node = node_container(k8s)
    port = node_launches(k8s, docker, compose)[0].node_config().port
    ports = named_ports(node)
    expected = {
        "readinessProbe": "/readyz",
        "livenessProbe": "/healthz",
        "startupProbe": "/healthz",
    }
    for probe, path in expected.items():
        get = node[probe]["httpGet"]
        assert get["path"] == path, probe
        assert ports[get["port"]] == port, probe
    grace = statefulset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > node_launches(k8s, docker, compose)[0].node_config().shutdown_timeout


def test_node_environment_names_only_real_settings(
    k8s: Documents, docker: Dockerfile, compose: Mapping[str, Any]
) -> None:
    keys = {f"FORUM_{name.upper()}" for name in NodeConfig.__dataclass_fields__}
    for node in node_launches(k8s, docker, compose):
        unknown = {k for k in node.env if k.startswith("FORUM_")} - keys
        unknown = {k for k in unknown if not k.startswith("FORUM_REPL_")}
        assert not unknown, f"{node.where}: {unknown} are not node settings"


def test_services_target_ports_that_exist(k8s: Documents) -> None:
    for name, service in objects(k8s, "Service").items():
        for port in service["spec"]["ports"]:
            _, container_port = service_port(k8s, name, port["port"])
            assert container_port, f"Service {name} port {port['port']}"


def test_client_service_reaches_the_nodes_api(
    k8s: Documents, docker: Dockerfile, compose: Mapping[str, Any]
) -> None:
    port = node_launches(k8s, docker, compose)[0].node_config().port
    template, container_port = service_port(k8s, "forum-api", port)
    assert template is only(k8s, "StatefulSet")["spec"]["template"]
    assert container_port == port


def test_redis_runs_with_aof_fsync_always_and_noeviction_on_a_volume(k8s: Documents) -> None:
    redis = objects(k8s, "Deployment")["forum-redis"]
    assert redis["spec"]["replicas"] == 1
    assert redis["spec"]["strategy"]["type"] == "Recreate"
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[0] == "redis-server"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--appendfsync"] == "always"
    assert options["--maxmemory-policy"] == "noeviction"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in redis["spec"]["template"]["spec"]["volumes"]}
    (data,) = [name for name, path in mounts.items() if path == options["--dir"]]
    claim = volumes[data]["persistentVolumeClaim"]["claimName"]
    assert claim in objects(k8s, "PersistentVolumeClaim")
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"] == ["redis-cli", "ping"]


def worker_launch(k8s: Documents, docker: Dockerfile, compose: Mapping[str, Any]) -> Launch:
    return container_launch("pod forum-0 worker", worker_container(k8s), "forum-0", docker, compose)


def test_nothing_scrapes_the_nodes_metrics_without_the_token(k8s: Documents) -> None:
    """The node's /metrics answers 401 without the token, and the
    prometheus.io/* annotations have no way to send one."""
    for where, template in pod_templates(k8s):
        annotations = template["metadata"].get("annotations", {})
        assert not any(key.startswith("prometheus.io/") for key in annotations), where
    assert "credentials_file" in OPERATIONS.read_text()
    assert "bearerTokenSecret" in OPERATIONS.read_text()


def test_each_worker_dials_the_node_in_its_own_pod_and_redis_through_a_service(
    k8s: Documents, docker: Dockerfile, compose: Mapping[str, Any]
) -> None:
    """A worker's acks and releases must reach the node that made its
    reservations: through the load-balanced forum-api they could land on
    another node (a release there is false; the job waits out its lease)."""
    args = worker_launch(k8s, docker, compose).parse()
    assert args.command == "worker"
    host, port = url_host_port(args.node)
    assert host in ("127.0.0.1", "localhost", "::1")
    assert port == node_launches(k8s, docker, compose)[0].node_config().port
    template, port = service_port(k8s, *url_host_port(args.redis_url))
    assert template is objects(k8s, "Deployment")["forum-redis"]["spec"]["template"]
    assert port == 6379
    assert args.token == f"secret-{SECRET}-token", "workers need the nodes' token"


def test_workers_can_write_tmp_on_a_read_only_root(k8s: Documents) -> None:
    worker = worker_container(k8s)
    assert worker["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}
    volumes = {
        v["name"]: v for v in only(k8s, "StatefulSet")["spec"]["template"]["spec"]["volumes"]
    }
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_worker_probes_hit_its_metrics_port_on_a_reachable_address(
    k8s: Documents, docker: Dockerfile, compose: Mapping[str, Any]
) -> None:
    """The kubelet probes the pod's IP: metrics on 127.0.0.1 would fail every probe."""
    args = worker_launch(k8s, docker, compose).parse()
    worker = worker_container(k8s)
    assert args.metrics_port is not None
    assert args.metrics_host in ("0.0.0.0", "::", ""), args.metrics_host
    get = worker["livenessProbe"]["httpGet"]
    assert get["path"] == "/metrics"
    assert named_ports(worker)[get["port"]] == args.metrics_port
    # Pod readiness is every container's: a worker restarting must not take
    # its node out of the forum-api Service.
    assert "readinessProbe" not in worker
    grace = only(k8s, "StatefulSet")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > args.drain_timeout


def test_every_container_is_locked_down(k8s: Documents) -> None:
    for where, template in pod_templates(k8s):
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert "memory" in container["resources"]["limits"], where


def test_secrets_come_from_one_secret_whose_creation_is_documented(k8s: Documents) -> None:
    keys = set()
    for _, template in pod_templates(k8s):
        for container in template["spec"]["containers"]:
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert ref["name"] == SECRET
                    keys.add(ref["key"])
    assert keys == {"cluster-secret", "token"}
    docs = OPERATIONS.read_text()
    assert f"kubectl create secret generic {SECRET}" in docs
    for key in keys:
        assert f"--from-literal={key}=" in docs
