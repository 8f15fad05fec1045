"""The deploy tests' fixtures: the artifacts parsed once, and real ``forum serve``
processes for the tests that run what the manifests run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.artifacts import Dockerfile, load_compose, load_k8s
from tests.fixtures.nodes import forum_nodes

__all__ = ["compose", "docker", "forum_nodes", "k8s"]


@pytest.fixture(scope="session")
def docker() -> Dockerfile:
    return Dockerfile()


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="session")
def k8s() -> list[tuple[Any, dict[str, Any]]]:
    return load_k8s()
