"""What the Lens tells about one claim key, beyond granting claims.

* :class:`KeyState` (``inspect``): the live claim (:class:`Holder`: token,
  owner, attempt, since when, lease left), the done marker's token, and the
  key's job record, read in one script, so the three agree.
* The **job record** (``<tag>:task:<key>``, forum.coordinator.keys): a hash of str
  fields to bytes that a layer above the Lens (the task layer) keeps about a
  job: its task, its state, its result. Written two ways: fenced by the
  key's live claim (``record``: a stale holder, whose claim expired or was
  taken over, can never write; ``ClaimLost`` instead), or by a producer
  before any worker (``record_enqueued``: only while the key has no record).
  The Lens sets field ``token`` (the fenced writer's) and ``cancelled`` (a
  cancel's token); every other field is the caller's. A producer of many
  jobs writes their records in batches (``record_enqueued_many`` of
  :class:`NewRecord`: one script per shard, all in one round trip), and an
  operator drops a record nobody holds (``forget_record``: a purged job).
* The **history** (``<tag>:history:<key>``): :class:`HistoryEvent` per
  change of the key's claim (:data:`EVENTS`), pushed by the script that
  ended the claim, the last ``keys.HISTORY_LENGTH`` kept; the live claim's
  "claimed" comes from its in-flight record (:func:`with_live_claim`).
* :class:`CancelOutcome` (``cancel``): a key becomes done, its holder's
  fencing token, if one holds it, retired.

The helpers here are shared by the Lens and ``forum.coordinator.memory``, so both
check and encode alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgpack

__all__ = [
    "EVENTS",
    "CancelOutcome",
    "FieldValue",
    "HistoryEvent",
    "Holder",
    "KeyState",
    "NewRecord",
    "ScanKind",
    "attempts_of",
    "checked_ttl",
    "encode_fields",
    "pack_fields",
    "pack_records",
    "parse_event",
    "with_live_claim",
]

#: What a record's field may be given as; kept as bytes (text as UTF-8,
#: numbers as their ``str``/``repr``).
FieldValue = bytes | str | int | float
#: What :meth:`Lens.scan` lists: keys with a job record, or with a live claim.
ScanKind = Literal["task", "claim"]
#: The fields the Lens writes itself: a caller may not.
RESERVED_FIELDS = frozenset({"token", "cancelled", "ix"})
#: Every history event, by the script that pushes it.
EVENTS = frozenset(
    {"claimed", "completed", "released", "handed_back", "expired", "reoffered", "cancelled"}
)


@dataclass(frozen=True, slots=True)
class Holder:
    """The live claim on a key: its fencing ``token`` and ``owner``, the
    ``attempt`` it runs, ``since`` when (Unix seconds, Redis's clock) and
    how many seconds of lease it has left (``remaining``)."""

    token: int
    owner: str
    attempt: int
    since: float
    remaining: float


@dataclass(frozen=True, slots=True)
class KeyState:
    """One claim key as the Lens holds it, read at once."""

    key: str
    claim: Holder | None = None
    done_token: int | None = None
    record: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A producer's first record of claim ``key``: ``fields`` for ``ttl``
    seconds (``record_enqueued``'s arguments, for ``record_enqueued_many``)."""

    key: str
    fields: Mapping[str, FieldValue]
    ttl: float


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One change of a key's claim: ``at`` (Unix seconds, Redis's clock),
    ``event`` (one of :data:`EVENTS`), the ``token`` of the claim it was
    about (0 when none: a re-offer of a record nobody handed back), the
    ``owner`` and ``attempt`` it ran ("" and 0 when none). ``expired`` is
    the lease of a holder running out, seen (and dated) by the next claim
    or cancel of the key."""

    at: float
    event: str
    token: int
    owner: str
    attempt: int


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    """What ``cancel(key)`` did: ``state`` ``"cancelled"`` (a done marker
    with the new ``token`` turns every copy away; ``owner`` names the holder
    whose claim it retired, ``None`` when nobody held the key) or ``"done"``
    (done before, with ``token``; or cancelled before)."""

    state: Literal["cancelled", "done"]
    token: int | None = None
    owner: str | None = None


def encode_fields(fields: Mapping[str, FieldValue], *, fenced: bool) -> list[tuple[str, bytes]]:
    """``fields`` as (name, bytes) pairs; ``ValueError``/``TypeError`` for a
    name that is empty or the Lens's own, or a value of another type. A
    producer's first record must have a field (``fenced`` writes ``token``)."""
    pairs = []
    for name, value in fields.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"a record field is a non-empty string, not {name!r}")
        if name in RESERVED_FIELDS:
            raise ValueError(f"record field {name!r} is the Lens's own")
        pairs.append((name, _encoded(value)))
    if not pairs and not fenced:
        raise ValueError("a new record needs at least one field")
    return pairs


def pack_fields(pairs: list[tuple[str, bytes]]) -> bytes:
    """The msgpack array ``field, value, ...`` that record.lua unpacks. Bytes
    go as msgpack's old raw type (``use_bin_type=False``): the cmsgpack of
    Redis 7.0 and older cannot read the bin type."""
    flat = [part for name, value in pairs for part in (name.encode(), value)]
    packed: bytes = msgpack.packb(flat, use_bin_type=False)
    return packed


def pack_records(records: Sequence[tuple[int, list[tuple[str, bytes]]]]) -> bytes:
    """The msgpack array ``ttl, fields, ttl, fields, ...`` that
    record_new_many.lua unpacks: per record its TTL in milliseconds (as
    text: a Lua number is not sent as an integer) and its fields' pairs
    flattened as :func:`pack_fields` does."""
    flat: list[object] = []
    for ttl_ms, pairs in records:
        flat += [
            str(ttl_ms).encode(),
            [part for name, value in pairs for part in (name.encode(), value)],
        ]
    packed: bytes = msgpack.packb(flat, use_bin_type=False)
    return packed


def attempts_of(count: int, attempts: Sequence[int] | None) -> Sequence[int]:
    """The attempt of each of ``count`` claims asked for at once: ``attempts``
    (one positive integer each), or 1 each when not given."""
    if attempts is None:
        return [1] * count
    if len(attempts) != count:
        raise ValueError(f"{len(attempts)} attempts for {count} claims")
    for attempt in attempts:
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise ValueError(f"an attempt is a positive integer, not {attempt!r}")
    return attempts


def checked_ttl(ttl: float) -> float:
    """``ttl`` if it is a positive number of seconds, else ``ValueError``."""
    if not ttl > 0:
        raise ValueError(f"a record's ttl is a positive number of seconds, not {ttl!r}")
    return ttl


def _encoded(value: FieldValue) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a record value is bytes, str, int or float, not {type(value).__name__}")
    return (str(value) if isinstance(value, int) else repr(value)).encode()


def parse_event(line: bytes) -> HistoryEvent:
    """One history line (``<ms> <event> <token> <attempt> <owner>``; see
    ``push_history`` in lua/prelude.lua) as an event."""
    at, event, token, attempt, owner = line.decode(errors="replace").split(" ", 4)
    return HistoryEvent(int(at) / 1000, event, int(token), owner, int(attempt))


def with_live_claim(
    events: list[HistoryEvent], live: Holder | None, limit: int
) -> list[HistoryEvent]:
    """A key's history as read (each ended claim's "claimed" and its end),
    with the live claim's "claimed" after it, which no script wrote (a claim
    writes no history: see lua/prelude.lua), the last ``limit`` events."""
    if live is not None and not any(e.token == live.token for e in events):
        events = [*events, HistoryEvent(live.since, "claimed", live.token, live.owner,
                                        live.attempt)]  # fmt: skip
    return events[-limit:]
