"""deploy/k8s/keda/: workers an autoscaler sizes on the nodes' per-prefix
gauges (a KEDA ScaledObject, or a plain HPA on an external metric), validated
offline as the other manifests are. The Deployment and the HPA against the
Kubernetes OpenAPI schemas (kubernetes-validate, strict); the ScaledObject, a
custom resource no such schema knows, against the fields of KEDA 2's
``keda.sh/v1alpha1`` ScaledObject and its Prometheus scaler written down
here (strict too: an unknown field is an error). Then wired: each scales the
Deployment here; the workers' argv parses, routes by the map the groups'
manifests mount (so each acks on the node that made its reservation, never
through the load-balanced Service) and reaches Redis through its Service;
and every metric the queries name is one a real ``forum serve`` exposes on
/metrics, with the labels they select on.

Not checked here (no cluster): that KEDA, Prometheus and prometheus-adapter
accept and serve them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import kubernetes_validate
import pytest
import yaml

from forum.node.client.remote import ForumClient
from forum.node.cluster.map import load_map
from tests.deploy.artifacts import K8S, OPERATIONS, Dockerfile, k8s_group_files, load_k8s
from tests.deploy.test_k8s import VERSIONS, container, container_launch, named_ports, objects
from tests.fixtures.nodes import ForumNodes

KEDA = K8S / "keda"
Documents = list[tuple[Path, dict[str, Any]]]

#: KEDA 2's ScaledObject, as far as these manifests go (keda.sh/docs/2.x,
#: "ScaledObject specification"; the Prometheus scaler's metadata keys).
PROMETHEUS_KEYS = [
    "serverAddress",
    "query",
    "threshold",
    "activationThreshold",
    "namespace",
    "customHeaders",
    "ignoreNullValues",
    "queryParameters",
    "unsafeSsl",
    "timeout",
]
COUNTS = [
    "pollingInterval",
    "cooldownPeriod",
    "initialCooldownPeriod",
    "idleReplicaCount",
    "minReplicaCount",
    "maxReplicaCount",
]
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
PROMETHEUS_METADATA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["serverAddress", "query", "threshold"],
    "properties": {name: {"type": "string"} for name in PROMETHEUS_KEYS},
}
SCALED_OBJECT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "labels": _STRING_MAP},
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        k: {"type": "string"}
                        for k in ("apiVersion", "kind", "name", "envSourceContainerName")
                    },
                },
                **{k: {"type": "integer", "minimum": 0} for k in COUNTS},
                "fallback": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "failureThreshold": {"type": "integer"},
                        "replicas": {"type": "integer"},
                    },
                },
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {"name": {"type": "string"}, "behavior": {}},
                        },
                        "scalingModifiers": {"type": "object"},
                    },
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": {"const": "prometheus"},
                            "name": {"type": "string"},
                            "metadata": PROMETHEUS_METADATA,
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            "authenticationRef": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "kind": {"type": "string"},
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


@pytest.fixture(scope="module")
def keda() -> Documents:
    return load_k8s(sorted(p for p in KEDA.glob("*.yaml") if p.name != "kustomization.yaml"))


def only(documents: Documents, kind: str) -> dict[str, Any]:
    (found,) = objects(documents, kind).values()
    return found


def test_the_objects_and_the_kustomization(keda: Documents) -> None:
    kinds = sorted((doc["kind"], doc["metadata"]["name"]) for _, doc in keda)
    assert kinds == [
        ("Deployment", "forum-workers"),
        ("HorizontalPodAutoscaler", "forum-workers"),
        ("ScaledObject", "forum-workers"),
    ]
    with open(KEDA / "kustomization.yaml") as f:
        kustomization = yaml.safe_load(f)
    # The HPA is the alternative: KEDA makes an HPA of its own, and two would fight.
    assert sorted(kustomization["resources"]) == ["scaledobject.yaml", "workers.yaml"]
    with open(K8S / "kustomization.yaml") as f:
        assert "keda" not in " ".join(yaml.safe_load(f)["resources"]), "not in the default apply"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_kubernetes_objects_are_valid(keda: Documents, version: str) -> None:
    for _, document in keda:
        if document["kind"] != "ScaledObject":
            kubernetes_validate.validate(document, version, strict=True)


def test_the_scaled_object_is_a_valid_keda_one(keda: Documents) -> None:
    scaled = only(keda, "ScaledObject")
    jsonschema.validate(scaled, SCALED_OBJECT)
    typo = yaml.safe_load(yaml.safe_dump(scaled))
    typo["spec"]["triggers"][0]["metadata"]["treshold"] = "1"
    with pytest.raises(jsonschema.ValidationError, match="treshold"):
        jsonschema.validate(typo, SCALED_OBJECT)
    for trigger in scaled["spec"]["triggers"]:
        for name in ("threshold", "activationThreshold"):
            assert float(trigger["metadata"][name]) >= 0, name
    spec = scaled["spec"]
    assert 0 <= spec["minReplicaCount"] < spec["maxReplicaCount"]


def test_both_autoscalers_size_the_workers_deployment(keda: Documents) -> None:
    deployment = only(keda, "Deployment")
    for kind in ("ScaledObject", "HorizontalPodAutoscaler"):
        target = only(keda, kind)["spec"]["scaleTargetRef"]
        assert (target["apiVersion"], target["kind"], target["name"]) == (
            "apps/v1", "Deployment", deployment["metadata"]["name"]
        ), kind  # fmt: skip


def test_the_workers_route_by_the_groups_map_and_reach_redis_by_its_service(
    keda: Documents, docker: Dockerfile, compose: Mapping[str, Any], tmp_path: Path
) -> None:
    """Off the nodes' pods, a worker acks each job on the node that reserved
    it only when it routes by the map (docs/scaling.md): through forum-api
    alone its acks would land on any node."""
    groups = load_k8s(k8s_group_files())
    shared = load_k8s([K8S / "redis.yaml"])
    template = only(keda, "Deployment")["spec"]["template"]
    worker = container(template, "worker")
    args = container_launch("forum-workers", worker, "forum-workers-x", docker, compose).parse()
    assert args.command == "worker"
    (config_map,) = objects(groups, "ConfigMap").values()
    ((key, text),) = config_map["data"].items()
    (volume,) = [v for v in template["spec"]["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    (mount,) = [m for m in worker["volumeMounts"] if m["name"] == volume["name"]]
    assert "subPath" not in mount, "a subPath mount never sees the ConfigMap's edits"
    assert args.cluster_map == f"{mount['mountPath']}/{key}"
    (tmp_path / key).write_text(text)
    assert len(load_map(tmp_path / key).groups) >= 2
    host = re.fullmatch(r"http://([^:/]+):7070", args.node)
    assert host is not None and host[1] in objects(groups, "Service")
    redis = re.fullmatch(r"redis://([^:/]+):6379/0", args.redis_url)
    assert redis is not None and redis[1] in objects(shared, "Service")
    assert args.token == "secret-forum-secrets-token"
    assert args.metrics_host == "0.0.0.0"
    probe = worker["livenessProbe"]["httpGet"]
    assert (probe["path"], named_ports(worker)[probe["port"]]) == ("/metrics", args.metrics_port)
    assert template["spec"]["terminationGracePeriodSeconds"] > args.drain_timeout
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    context = worker["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["capabilities"]["drop"] == ["ALL"]


def queried(keda: Documents) -> list[str]:
    """Every PromQL query of the ScaledObject."""
    return [t["metadata"]["query"] for t in only(keda, "ScaledObject")["spec"]["triggers"]]


@pytest.mark.slow
async def test_the_metrics_the_autoscalers_read_are_the_nodes(
    keda: Documents, forum_nodes: ForumNodes
) -> None:
    """A real node with a job under job/: every ``forum_`` metric the
    queries and the HPA name is on its /metrics, with ``prefix="job/"``;
    the ``group`` label they sum by is the one the docs' scrape config adds,
    and the HPA's ``queue`` label the one its relabelling adds."""
    node = await forum_nodes.start("metrics")
    async with ForumClient(node.url) as client:
        await client.write(b"job/1")
    async with aiohttp.ClientSession() as http, http.get(f"{node.url}/metrics") as answer:
        exposed = await answer.text()
    series = set(re.findall(r'^(forum_\w+)\{prefix="job/"\}', exposed, re.MULTILINE))
    hpa = only(keda, "HorizontalPodAutoscaler")["spec"]["metrics"]
    names = {m["external"]["metric"]["name"] for m in hpa}
    for query in queried(keda):
        names |= set(re.findall(r"\bforum_\w+", query))
        assert set(re.findall(r'prefix="([^"]*)"', query)) == {"job/"}
        for grouped in re.findall(r"by \(([^)]*)\)", query):
            assert grouped.strip() == "group"
    assert {"forum_prefix_live", "forum_prefix_oldest_age_seconds"} <= names
    assert names <= series, f"not on /metrics: {names - series}"
    docs = OPERATIONS.read_text()
    assert "__meta_kubernetes_pod_label_forum_group" in docs and "target_label: group" in docs
    for metric in hpa:
        assert metric["external"]["metric"]["selector"]["matchLabels"] == {"queue": "job"}
    assert "target_label: queue" in docs
