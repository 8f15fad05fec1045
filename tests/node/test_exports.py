"""The node's packages export nothing: the public names are ``forum``'s
(tests/test_exports.py), and each package of ``forum.node`` is a folder of
modules whose ``__init__`` imports nothing, so importing one module (the
client, say) loads only what that module needs."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from forum import node

PACKAGES = sorted(
    f"forum.node.{init.parent.name}" for init in Path(node.__file__).parent.glob("*/__init__.py")
)


def test_the_concepts_are_these_packages() -> None:
    assert PACKAGES == [
        "forum.node.api",
        "forum.node.client",
        "forum.node.cluster",
        "forum.node.config",
        "forum.node.core",
        "forum.node.http",
        "forum.node.space",
        "forum.node.storage",
    ]


@pytest.mark.parametrize("name", ["forum.node", *PACKAGES])
def test_a_package_init_is_a_docstring_only(name: str) -> None:
    init = Path(importlib.import_module(name).__file__ or "")
    body = ast.parse(init.read_text()).body
    assert len(body) == 1, f"{init}: more than a docstring"
    assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
