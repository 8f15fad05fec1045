"""Another checkout of Forum for a benchmark's child to run on: a baseline
commit unpacked (:func:`export`; :func:`other_tree` picks a given tree or a
commit for a benchmark's options), the ``PYTHONPATH`` that imports Forum
from a tree (:func:`pythonpath`) rather than from the installed one, and,
in the child, the imports that make every ``forum.*`` name that tree's
(:func:`import_from_tree`), of either layout.

Two layouts of a tree are run: the parts as folders holding
``<part>/forum/<part>/`` (``forum.node.space.forum``, docs/layout.md), and
the older one, each part a top-level package (``node.forum``, ``tasks``).
A benchmark names modules as the first does; in a child on a tree of the
older layout those names stand for that tree's modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: The folders that each hold one part of the ``forum`` namespace
#: (docs/layout.md); a tree of the older layout has each as a package.
PARTS = ("node", "replication", "coordinator", "tasks", "dashboard", "deploy")

#: The packages of ``forum.node``, one per concept; the older layout's node
#: is one flat package.
NODE_PACKAGES = ("core", "storage", "space", "api", "http", "client", "config")

#: A module of ``forum.node`` (``package.module``) by its name in the older
#: layout's flat ``node``, where that is not the module's own name (in
#: ``api`` and ``http``: ``web_`` and its name).
OLDER_NODE_NAMES = {
    "client.remote": "client",
    "client.stream": "client_stream",
    "client.sync": "sync_client",
    "client.watch": "client_watch",
    "config.node": "config",
    "config.origin": "web_origin",
}
#: The packages of ``forum.node`` whose modules were ``web_*`` ones.
OLDER_WEB = ("api", "http")


def pythonpath(tree: Path) -> str:
    """The ``PYTHONPATH`` under which a child imports Forum from ``tree``: the
    tree, and each of its part folders (``forum/__init__.py`` extends the
    package over every ``forum/`` folder on the path, so ``forum.node``
    comes from ``tree/node/forum/node``, not from the editable install).
    A tree of the older layout (top-level ``node``, ``tasks``, ...) needs
    only itself."""
    parts = [tree / part for part in PARTS if (tree / part / "forum").is_dir()]
    return os.pathsep.join(str(path) for path in [tree, *parts])


def export(ref: str, into: Path) -> Path:
    """``git archive`` of ``ref``, unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref], check=True, capture_output=True
    ).stdout
    target = into / "baseline"
    target.mkdir()
    tar = into / "baseline.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as unpacked:
        unpacked.extractall(target, filter="data")
    return target


@contextlib.contextmanager
def other_tree(tree: Path | None, ref: str | None) -> Iterator[Path | None]:
    """The other tree a benchmark runs, for the block's length: ``tree`` as
    given, or ``ref`` unpacked (:func:`export`) and removed after; ``None``
    without either."""
    if ref is None:
        yield tree
        return
    with tempfile.TemporaryDirectory(prefix="forum-tree-") as tmp:
        yield export(ref, Path(tmp))


def older_name(name: str) -> str | None:
    """The module that ``name`` (a ``forum.<part>`` module) is in a tree of
    the older layout; ``""`` for a package of ``forum.node`` that tree has
    no module for (its modules are all in ``node``); ``None`` for a name
    that is the same in both (the ``forum`` package and its own modules)."""
    forum, _, rest = name.partition(".")
    part = rest.partition(".")[0]
    if forum != "forum" or part not in PARTS:
        return None
    if part != "node":
        return rest
    path = rest.split(".")[1:]
    if not path or (len(path) == 1 and path[0] in NODE_PACKAGES):
        return ""
    web = "web_" if path[0] in OLDER_WEB else ""
    return "node." + OLDER_NODE_NAMES.get(".".join(path), web + path[-1])


def older_layout(tree: Path) -> bool:
    """Whether ``tree`` is of the older layout (each part a top-level package)."""
    return (tree / "node" / "__init__.py").is_file()


def named_in(tree: Path, name: str) -> str:
    """``name``, a module of the ``forum`` namespace or ``module:attribute``
    (a worker's ``--handler``), as a process on ``tree`` must name it."""
    module, colon, attribute = name.partition(":")
    if older_layout(tree):
        module = older_name(module) or module
    return module + colon + attribute


class _OlderLayout(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds each ``forum.<part>`` module as the older layout's module of
    that name (:func:`older_name`): the same module object, under both."""

    def __init__(self) -> None:
        #: Each module's own spec, which the import system replaces with
        #: the one for its name here.
        self.specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        older = older_name(fullname)
        if older is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=not older)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        older = older_name(spec.name)
        if not older:
            return types.ModuleType(spec.name)
        module = importlib.import_module(older)
        self.specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing runs (the module did when :meth:`create_module` imported
        it); its own spec goes back in place."""
        if module.__spec__ is not None and module.__spec__.name in self.specs:
            module.__spec__ = self.specs[module.__spec__.name]


def tree_of_forum() -> Path:
    """The tree this process's ``forum`` package comes from."""
    import forum  # noqa: PLC0415  (which one is the question asked)

    return Path(forum.__file__ or "").resolve().parents[1]


def import_from_tree() -> None:
    """In a child on a tree (``PYTHONPATH`` from :func:`pythonpath`), make
    every ``forum.*`` import that tree's: the editable install's finder is
    dropped (a module the tree does not have is an ``ImportError``, not this
    checkout's), and on a tree of the older layout each ``forum.<part>``
    name finds that tree's module (:func:`older_name`). In this checkout
    (the parent) it does nothing, and a second call adds nothing. Call it
    before the first import of a part."""
    tree = tree_of_forum()
    if tree == ROOT:
        return
    sys.meta_path[:] = [
        finder
        for finder in sys.meta_path
        if not getattr(finder, "__module__", "").startswith("__editable__")
    ]
    if older_layout(tree) and not any(isinstance(f, _OlderLayout) for f in sys.meta_path):
        sys.meta_path.insert(0, _OlderLayout())


def strays(tree: Path) -> list[str]:
    """The modules of Forum this process imported from elsewhere than ``tree``."""
    names = ("forum", *PARTS)
    return sorted(
        f"{name}: {module.__file__}"
        for name, module in list(sys.modules.items())
        if name.partition(".")[0] in names
        and getattr(module, "__file__", None)
        and not Path(module.__file__ or "").resolve().is_relative_to(tree)
    )


def run_child(
    script: Path, function: str, tree: Path, args: Sequence[Any], env: Mapping[str, str] = {}
) -> Any:
    """``function(*args)`` of ``script`` (run to its end if a coroutine) in
    a child on ``tree``, with ``env`` added to its environment; its JSON
    answer (its output's last line). The child runs in no checkout,
    imports from the tree alone (:func:`import_from_tree`), and fails if a
    module of Forum it imported came from elsewhere (:func:`strays`)."""
    command = [sys.executable, "-c", _CHILD, str(script), function, json.dumps(args), str(tree)]
    done = subprocess.run(
        command,
        env={**os.environ, "PYTHONPATH": pythonpath(tree), **env},
        cwd=tempfile.gettempdir(),
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def child() -> None:
    """The child :func:`run_child` starts; ``sys.argv`` holds its arguments."""
    script, function, args, tree = sys.argv[1:]
    import_from_tree()
    spec = importlib.util.spec_from_file_location(Path(script).stem, script)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{script}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    answer = getattr(module, function)(*json.loads(args))
    if inspect.iscoroutine(answer):
        answer = asyncio.run(answer)
    stray = strays(Path(tree).resolve())
    if stray:
        raise SystemExit(f"{script}: imported from outside {tree}: {', '.join(stray)}")
    print(json.dumps(answer))


#: Starts :func:`child` from this folder (the child's working directory is
#: not a checkout, so nothing of Forum is found there).
_CHILD = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import trees; trees.child()"
)
