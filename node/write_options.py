"""What a writer may ask of one write beyond its payload, checked.

:class:`WriteOptions` is what the Forum, the HTTP API, the client and the
CLI take from a user (seconds, relative or absolute); :meth:`~WriteOptions.
properties` turns it into the :class:`~node.entries.Properties` a Write
carries (absolute wall-clock milliseconds, the same on every node). A bad
value is a ``ValueError`` with a one-line message, which the HTTP API
answers with 400.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from node.codec import MAX_KEY_BYTES
from node.entries import MAX_PRIORITY, MIN_PRIORITY, PLAIN, Properties

#: The longest delay, ttl or dedup window, and the furthest ``not_before``
#: from now: ten years (a larger one is a mistake, not a schedule).
MAX_SECONDS = 10 * 365 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """``delay``: seconds from now until the tuple is due (invisible until
    then); ``not_before``: the same as an absolute time (Unix seconds), the
    two exclusive. ``ttl``: seconds the tuple lives once due, then it is
    gone everywhere. ``priority``: -128 to 127, higher served first.
    ``key``: the write's key (the Lens's claim key of the job it carries);
    with ``dedup_window``, a second write with that key on the same node
    within so many seconds returns the first one's id instead of writing."""

    delay: float | None = None
    not_before: float | None = None
    ttl: float | None = None
    priority: int = 0
    key: bytes | str | None = None
    dedup_window: float | None = None

    def __post_init__(self) -> None:
        _check_seconds("delay", self.delay, zero=True)
        _check_seconds("ttl", self.ttl, zero=False)
        _check_seconds("dedup_window", self.dedup_window, zero=False)
        if self.not_before is not None:
            if not _is_number(self.not_before) or not math.isfinite(self.not_before):
                raise ValueError(f"not_before is a Unix time in seconds, not {self.not_before!r}")
            if self.not_before < 0:
                raise ValueError("not_before must not be before 1970")
            if self.delay is not None:
                raise ValueError("give delay or not_before, not both")
        priority = self.priority
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ValueError(f"priority is a whole number, not {priority!r}")
        if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            raise ValueError(f"priority must be {MIN_PRIORITY} to {MAX_PRIORITY}, not {priority}")
        if self.key is not None:
            if not isinstance(self.key, bytes | str):
                raise ValueError(f"key is text or bytes, not {type(self.key).__name__}")
            if not 0 < len(self.key_bytes or b"") <= MAX_KEY_BYTES:
                raise ValueError(f"key must be 1 to {MAX_KEY_BYTES} bytes")
        if self.dedup_window is not None and self.key is None:
            raise ValueError("dedup_window needs a key")

    @property
    def key_bytes(self) -> bytes | None:
        """The key as bytes (text is UTF-8)."""
        return self.key.encode() if isinstance(self.key, str) else self.key

    @property
    def plain(self) -> bool:
        """Whether these are a plain write's options (no property set)."""
        return self == PLAIN_OPTIONS

    def properties(self, now: float) -> Properties:
        """The Write's properties, for a write made at ``now`` (Unix seconds).
        ``ValueError`` if ``not_before`` is further than ``MAX_SECONDS`` ahead."""
        if self.plain:
            return PLAIN
        due_at = now if self.not_before is None else self.not_before
        if self.delay is not None:
            due_at = now + self.delay
        elif due_at - now > MAX_SECONDS:
            raise ValueError("not_before is more than ten years ahead")
        due = _ms(due_at) if due_at > now else 0
        live_from = max(due_at, now)
        expires = 0 if self.ttl is None else _ms(live_from + self.ttl)
        dedup_until = 0 if self.dedup_window is None else _ms(now + self.dedup_window)
        props = Properties(due, expires, self.priority, self.key_bytes, dedup_until)
        return PLAIN if props == PLAIN else props


def _check_seconds(name: str, value: float | None, *, zero: bool) -> None:
    if value is None:
        return
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name} is a number of seconds, not {value!r}")
    if value < 0 or (value == 0 and not zero):
        raise ValueError(f"{name} must be {'>= 0' if zero else '> 0'} seconds, not {value}")
    if value > MAX_SECONDS:
        raise ValueError(f"{name} must be at most ten years ({MAX_SECONDS:.0f} s)")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ms(seconds: float) -> int:
    """Whole milliseconds, rounded up (a due time never comes early)."""
    return max(1, math.ceil(seconds * 1000))


#: The options of a plain write.
PLAIN_OPTIONS = WriteOptions()
