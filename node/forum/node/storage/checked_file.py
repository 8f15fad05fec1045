"""Small files of the data directory, replaced atomically and durably, with a checksum.

``HORIZON`` (:mod:`forum.node.storage.compaction`) and ``MANIFEST``
(:mod:`forum.node.storage.manifest`)
are each one *document*: a msgpack map, followed by its CRC-32 (u32 BE).
A document is replaced whole: written to ``<name>.tmp``, fsynced, renamed
over the file, and the directory fsynced, so a crash leaves the old one or
the new one (and maybe a ``.tmp``, which the next open removes).

Blocking file work: the Strand runs it in a thread.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from forum.node.core.errors import StrandCorrupt
from forum.node.storage.files import fsync_dir, write_all

TMP_SUFFIX = ".tmp"
_CRC = struct.Struct(">I")


def read_document(path: Path) -> dict[str, Any] | None:
    """The document in ``path`` (``None`` if there is no such file);
    ``StrandCorrupt`` if it does not check out or is not a map."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    body, crc = data[: -_CRC.size], data[-_CRC.size :]
    if len(crc) != _CRC.size or zlib.crc32(body) != _CRC.unpack(crc)[0]:
        raise StrandCorrupt(str(path), 0, f"the {path.name} file does not check out")
    try:
        document = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise StrandCorrupt(str(path), 0, f"the {path.name} file is not one: {exc}") from exc
    if not isinstance(document, dict):
        raise StrandCorrupt(str(path), 0, f"the {path.name} file is not one: not a map")
    return document


def write_document(path: Path, document: dict[str, Any]) -> None:
    """Replace ``path`` with ``document`` atomically and durably."""
    body = msgpack.packb(document, use_bin_type=True)
    replace_file(path, body + _CRC.pack(zlib.crc32(body)))


def replace_file(path: Path, data: bytes, before_rename: Callable[[], None] | None = None) -> None:
    """Replace ``path`` with ``data``: a ``.tmp`` written and fsynced, renamed
    over it, the directory fsynced. ``before_rename`` is called once the
    ``.tmp`` is durable."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if before_rename is not None:
        before_rename()
    os.replace(tmp, path)
    fsync_dir(path.parent)
