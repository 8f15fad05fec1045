"""The Redis settings the Lens's guarantees rest on, and the warnings
``Lens.durability()`` gives for a server that falls short of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: What Lens.durability() reads, and what each must be for the guarantees to hold:
#: a completion or claim acknowledged is on disk (or within a second of it),
#: and Redis never evicts a claim, a done marker or a fence to make room.
DURABLE: dict[str, tuple[str, ...]] = {
    "appendonly": ("yes",),
    "appendfsync": ("always", "everysec"),
    "maxmemory-policy": ("noeviction",),
}


def shortfalls(name: str, found: Mapping[Any, Any]) -> list[str]:
    """Lens.durability()'s lines for one server's ``CONFIG GET`` answers."""
    text = {_text(k): _text(v) for k, v in found.items()}
    lines = []
    for setting, good in DURABLE.items():
        value = text.get(setting)
        if value is not None and value not in good:
            lines.append(
                f"Redis {name} has {setting} {value!r}, not {' or '.join(good)}: " + _WHY[setting]
            )
    return lines


#: Why each setting of DURABLE matters, for the warning's second half.
_WHY = {
    "appendonly": "a restart forgets every claim and done marker (finished jobs may run again)",
    "appendfsync": "a crash may forget acknowledged claims and completions",
    "maxmemory-policy": "Redis may evict claims and done markers when full (jobs run twice)",
}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
