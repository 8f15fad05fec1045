"""The packages depend one way: ``forum`` on all, ``deploy`` on the three
below it, ``tasks`` on ``coordinator`` and ``node``, ``dashboard`` on
``node``, ``replication``, ``coordinator`` and ``tasks``, ``coordinator`` and
``replication`` on ``node`` only, ``node`` on none of them (the table in
``forum/__init__.py``).

Every module is parsed, and every import counts wherever it is (inside a
function, under ``TYPE_CHECKING``), and so does ``importlib.import_module``
of a literal name: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: What each package may import of the others.
ALLOWED = {
    "node": set(),
    "replication": {"node"},
    "coordinator": {"node"},
    "tasks": {"node", "coordinator"},
    "deploy": {"node", "replication", "coordinator"},
    # A face of the node (its web pages), like forum's CLI: it reads the node,
    # may read replication's view of the peers, and the Lens's jobs and
    # workers through tasks and coordinator (with ``--lens-url``); nothing
    # imports it but forum, which mounts it in ``forum serve``.
    "dashboard": {"node", "replication", "coordinator", "tasks"},
    "forum": {"node", "replication", "coordinator", "deploy", "tasks", "dashboard"},
}


def imported(module: Path) -> set[str]:
    """The absolute names ``module`` imports, at any depth."""
    names = set()
    for node in ast.walk(ast.parse(module.read_text(), str(module))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in {"import_module", "__import__"}
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def uses(package: str) -> dict[str, set[str]]:
    """Each other package of :data:`ALLOWED` that ``package`` imports, and the
    modules of ``package`` that import it."""
    found: dict[str, set[str]] = {}
    for module in sorted((REPO / package).rglob("*.py")):
        for name in imported(module):
            top = name.partition(".")[0]
            if top in ALLOWED and top != package:
                found.setdefault(top, set()).add(str(module.relative_to(REPO)))
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_the_packages_it_may(package: str) -> None:
    forbidden = {
        other: modules for other, modules in uses(package).items() if other not in ALLOWED[package]
    }
    assert forbidden == {}


def test_the_check_sees_imports_inside_functions_and_lazy_ones(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import importlib\n"
        "def f():\n"
        "    from coordinator.cli import x\n"
        "    import deploy.cluster\n"
        "    return importlib.import_module('forum.cli')\n"
    )
    assert imported(module) == {"importlib", "coordinator.cli", "deploy.cluster", "forum.cli"}
