"""The replica-group manifests: deploy/docker-compose.groups.yml and
deploy/k8s/groups/, validated offline as the single-group ones are (the
Compose Specification's schema here; kubernetes-validate strict in
tests/deploy/test_k8s.py), and wired to the
real CLI and the real placement: every node's argv parses, its
``--cluster-map`` is where the map is mounted, and the map places it in its
own group (forum.node.config.placement) with that group's other members as
its only peers."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from forum.node.cluster.map import load_map
from forum.node.config.node import NodeConfig
from forum.node.config.placement import placed, placement
from tests.deploy.artifacts import (
    DEPLOY,
    K8S_GROUPS,
    Dockerfile,
    compose_launches,
    k8s_group_files,
    load_compose,
    load_k8s,
)
from tests.deploy.test_compose import compose_schema
from tests.deploy.test_k8s import container, container_launch, objects

COMPOSE_GROUPS = DEPLOY / "docker-compose.groups.yml"


def _placed(config: NodeConfig, map_path: Path) -> tuple[str, set[str]]:
    """The node's group and peers when its map file is ``map_path``."""
    config = dataclasses.replace(config, cluster_map=str(map_path))
    where = placement(config)
    assert where is not None
    return where.group.id, set(placed(config, where).peers)


# -- compose ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def groups_compose() -> dict[str, Any]:
    return load_compose(COMPOSE_GROUPS)


def test_compose_groups_valid_against_the_compose_spec_schema(
    groups_compose: Mapping[str, Any],
) -> None:
    jsonschema.validate(groups_compose, compose_schema())


def test_compose_nodes_find_their_group_in_the_mounted_map(
    groups_compose: Mapping[str, Any], docker: Dockerfile
) -> None:
    (source,) = groups_compose["configs"].values()
    map_path = (COMPOSE_GROUPS.parent / source["file"]).resolve()
    cluster = load_map(map_path)
    launches = {
        launch.where.removeprefix("compose service "): launch
        for launch in compose_launches(groups_compose, docker)
    }
    nodes = {name: launch for name, launch in launches.items() if launch.command == "serve"}
    assert sorted(nodes) == [f"g{g}-{c}" for g in (1, 2) for c in "abc"]
    for name, launch in nodes.items():
        config = launch.node_config()
        (mount,) = groups_compose["services"][name]["configs"]
        assert mount["target"] == str(config.cluster_map), name
        assert not config.peers, f"{name}: peers come from the map"
        group, peers = _placed(config, map_path)
        assert group == name.partition("-")[0]
        assert peers == {u for u in cluster.group(group).members if u != config.advertise_url()}
    workers = {name: launch.parse() for name, launch in launches.items() if name not in nodes}
    dialed = [cluster.group_of(args.node) for args in workers.values()]
    assert sorted(g.id for g in dialed if g) == ["g1", "g2"], "a worker per group"


# -- Kubernetes ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def groups_k8s() -> list[tuple[Path, dict[str, Any]]]:
    return load_k8s(k8s_group_files())


def test_k8s_groups_kustomization_lists_every_manifest() -> None:
    with open(K8S_GROUPS / "kustomization.yaml") as f:
        kustomization = yaml.safe_load(f)
    assert sorted(kustomization["resources"]) == [p.name for p in k8s_group_files()]


def test_k8s_a_statefulset_per_group_whose_pods_the_map_places_in_it(
    groups_k8s: list[tuple[Path, dict[str, Any]]],
    docker: Dockerfile,
    compose: Mapping[str, Any],
    tmp_path: Path,
) -> None:
    (config_map,) = objects(groups_k8s, "ConfigMap").values()
    ((key, text),) = config_map["data"].items()
    map_path = tmp_path / key
    map_path.write_text(text)
    cluster = load_map(map_path)
    statefulsets = objects(groups_k8s, "StatefulSet")
    budgets = objects(groups_k8s, "PodDisruptionBudget")
    assert sorted(statefulsets) == [f"forum-{g.id}" for g in cluster.groups]
    for name, statefulset in statefulsets.items():
        spec = statefulset["spec"]
        gid = spec["template"]["metadata"]["labels"]["forum/group"]
        assert name == f"forum-{gid}"
        assert spec["selector"]["matchLabels"]["forum/group"] == gid
        assert budgets[name]["spec"]["selector"] == spec["selector"]
        assert budgets[name]["spec"]["maxUnavailable"] == 1
        assert spec["replicas"] == len(cluster.group(gid).members)
        node = container(spec["template"], "forum")
        (volume,) = [v for v in spec["template"]["spec"]["volumes"] if "configMap" in v]
        assert volume["configMap"]["name"] == config_map["metadata"]["name"]
        (mount,) = [m for m in node["volumeMounts"] if m["name"] == volume["name"]]
        assert "subPath" not in mount, "a subPath mount never sees the ConfigMap's edits"
        for i in range(spec["replicas"]):
            pod = f"{name}-{i}"
            config = container_launch(f"pod {pod}", node, pod, docker, compose).node_config()
            assert str(config.cluster_map) == f"{mount['mountPath']}/{key}"
            assert not config.peers, f"{pod}: peers come from the map"
            group, peers = _placed(config, map_path)
            assert group == gid
            assert peers == {u for u in cluster.group(gid).members if u != config.advertise_url()}
