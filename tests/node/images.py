"""Copies of a live Strand's directory, as a crash would leave it."""

from __future__ import annotations

import shutil
from pathlib import Path

from node.strand import LOCK_FILE


def crash_image(directory: Path, to: Path) -> Path:
    """Copy ``directory`` to ``to`` as it is now, while its Strand is open:
    what a crash of the process (not of the machine) would leave behind."""
    shutil.copytree(directory, to, ignore=shutil.ignore_patterns(LOCK_FILE))
    return to
