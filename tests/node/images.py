"""A Strand's directory as a crash leaves it, and where to cut its files."""

from __future__ import annotations

import shutil
from pathlib import Path

from forum.node.storage import segment
from forum.node.storage.files import LOCK_FILE


def crash_image(directory: Path, to: Path) -> Path:
    """Copy ``directory`` to ``to`` as it is now, while its Strand is open:
    what a crash of the process (not of the machine) would leave behind."""
    shutil.copytree(directory, to, ignore=shutil.ignore_patterns(LOCK_FILE))
    return to


def record_starts(path: Path) -> list[int]:
    """Where each record of a segment file begins."""
    data = path.read_bytes()
    starts, at = [], segment.HEADER.size
    while at < len(data):
        starts.append(at)
        at += segment.FRAME.size + segment.FRAME.unpack_from(data, at)[0]
    return starts
