"""The parts of ``forum`` depend one way: the face (``forum`` itself) on all,
``forum.deploy`` on the three below it, ``forum.tasks`` on
``forum.coordinator`` and ``forum.node``, ``forum.dashboard`` on ``node``,
``replication``, ``coordinator`` and ``tasks``, ``forum.coordinator`` and
``forum.replication`` on ``forum.node`` only, ``forum.node`` on none of them
(the table in ``forum/__init__.py``). Inside ``forum.node`` its concepts
depend one way too (the table in ``forum/node/__init__.py``), and the client
loads no server.

Every module is parsed, and every import counts wherever it is (inside a
function, under ``TYPE_CHECKING``), and so does ``importlib.import_module``
of a literal name: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: What each part may import of the others.
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
    "": {"node", "replication", "coordinator", "deploy", "tasks", "dashboard"},
}

#: What each concept of ``forum.node`` may import of the others (``serve`` is
#: the one module at the top: ``forum serve``'s process).
NODE_ALLOWED = {
    "core": set(),
    "storage": {"core"},
    "space": {"core", "storage"},
    "api": {"core"},
    "cluster": {"core"},
    "config": {"core", "storage", "space", "api", "cluster"},
    "client": {"core", "api", "cluster"},
    "http": {"core", "storage", "space", "config", "api", "cluster"},
    "serve": {"core", "storage", "space", "config", "api", "http", "cluster"},
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


def folder(part: str) -> Path:
    """Where a part's modules are: ``<part>/forum/<part>/`` (``forum/`` for the face)."""
    return REPO / "forum" if part == "" else REPO / part / "forum" / part


def uses(part: str) -> dict[str, set[str]]:
    """Each other part of :data:`ALLOWED` that ``part`` imports, and the modules
    of ``part`` that import it."""
    found: dict[str, set[str]] = {}
    for module in sorted(folder(part).rglob("*.py")):
        for name in imported(module):
            top, _, rest = name.partition(".")
            other = rest.partition(".")[0] if top == "forum" else ""
            if top == "forum" and other in ALLOWED and other != part:
                found.setdefault(other, set()).add(str(module.relative_to(REPO)))
    return found


def concept(module: Path) -> str:
    """The concept of ``forum.node`` that ``module`` belongs to."""
    rel = module.relative_to(folder("node"))
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


@pytest.mark.parametrize("part", sorted(ALLOWED), ids=lambda p: f"forum.{p}".rstrip("."))
def test_each_part_imports_only_the_parts_it_may(part: str) -> None:
    forbidden = {
        other: modules for other, modules in uses(part).items() if other not in ALLOWED[part]
    }
    assert forbidden == {}


def test_every_part_is_a_folder_of_its_own_and_nothing_else_is_importable() -> None:
    """The top-level folders hold the parts; none is a package of its own."""
    for part in ALLOWED:
        assert (folder(part) / "__init__.py").is_file(), part
        if part:
            assert not (REPO / part / "__init__.py").exists(), part
            assert not (REPO / part / "forum" / "__init__.py").exists(), part


def test_each_concept_of_the_node_imports_only_the_concepts_it_may() -> None:
    modules = sorted(p for p in folder("node").rglob("*.py") if p.name != "__init__.py")
    assert {concept(m) for m in modules} == set(NODE_ALLOWED)
    forbidden = set()
    for module in modules:
        own = concept(module)
        for name in imported(module):
            if name.startswith("forum.node."):
                other = name.split(".")[2]
                if other != own and other not in NODE_ALLOWED[own]:
                    forbidden.add(f"{module.relative_to(REPO)} imports {name}")
            elif name.startswith("forum.") and name.split(".")[1] in ALLOWED:
                forbidden.add(f"{module.relative_to(REPO)} imports {name}")
    assert forbidden == set()


def test_the_client_loads_no_server_module_and_not_aiohttp_web() -> None:
    """In a fresh interpreter: what importing the client (both of them) loads."""
    probe = (
        "import sys\n"
        "import forum.node.client.remote, forum.node.client.sync\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    allowed = ("forum.node.core", "forum.node.api", "forum.node.client", "forum.node.cluster")
    ours = [m for m in loaded if m.startswith("forum.") and m != "forum.node"]
    assert [m for m in ours if m not in allowed and not m.startswith(allowed)] == []
    assert not [m for m in loaded if m == "aiohttp.web" or m.startswith("aiohttp.web_")]
    assert "forum.node.client.remote" in loaded  # the probe did import it


def test_the_check_sees_imports_inside_functions_and_lazy_ones(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import importlib\n"
        "def f():\n"
        "    from forum.coordinator.cli import x\n"
        "    import forum.deploy.cluster\n"
        "    return importlib.import_module('forum.cli')\n"
    )
    assert imported(module) == {
        "importlib",
        "forum.coordinator.cli",
        "forum.deploy.cluster",
        "forum.cli",
    }
