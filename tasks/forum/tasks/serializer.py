"""How a job's arguments and result become bytes: :class:`Serializer`, and
the two that ship (:class:`JsonSerializer`, the default, and
:class:`MsgpackSerializer`, which also carries ``bytes``).

A serializer is part of an app's wire format: producers and workers of one
app must use the same one (``App(serializer=...)``). ``dumps`` raises
``TypeError`` or ``ValueError`` for a value it cannot encode; the app turns
that into a one-line :class:`forum.tasks.errors.InvalidJob`.

``dumps`` must be deterministic for equal values (JSON sorts object keys,
msgpack keeps a mapping's order, and the body's keyword arguments are sorted
by name first): the default job key is a hash of the encoded arguments
(:mod:`forum.tasks.message`).
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

import msgpack


@runtime_checkable
class Serializer(Protocol):
    """Values to bytes and back. ``name`` identifies it in logs and the CLI."""

    @property
    def name(self) -> str: ...

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class JsonSerializer:
    """Compact JSON (UTF-8, object keys sorted, no NaN). Tuples come back as
    lists, and object keys as strings: what JSON holds."""

    name = "json"

    def dumps(self, value: Any) -> bytes:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)

    def __repr__(self) -> str:
        return "JsonSerializer()"


class MsgpackSerializer:
    """msgpack: ``bytes`` stay bytes, ``str`` stays str; tuples come back as lists."""

    name = "msgpack"

    def dumps(self, value: Any) -> bytes:
        try:
            data: bytes = msgpack.packb(value, use_bin_type=True)
        except (OverflowError, msgpack.PackException) as exc:
            raise ValueError(str(exc)) from None
        return data

    def loads(self, data: bytes) -> Any:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)

    def __repr__(self) -> str:
        return "MsgpackSerializer()"
