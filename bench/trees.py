"""Another checkout of Forum for a benchmark's child to run on: a baseline
commit unpacked (:func:`export`), and the ``PYTHONPATH`` that imports Forum
from a tree (:func:`pythonpath`) rather than from the installed one."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The folders that each hold one part of the ``forum`` namespace
#: (docs/layout.md); a tree from before that layout has none of them.
PARTS = ("node", "replication", "coordinator", "tasks", "dashboard", "deploy")


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
