"""What a writer may ask of one write beyond its payload, declared once and checked.

:class:`WriteOptions` names the options and their types: every signature
that takes them (``Forum.write``, ``ForumClient.write``,
``SyncForumClient.write`` and their ``write_many``) spells them as
``**options: Unpack[WriteOptions]``, and the wire's spellings
(:mod:`forum.node.api.model`) are held to its names.
:func:`write_properties` takes what the Forum, the HTTP API, the client and
the CLI take from a user (seconds, relative or absolute) and returns the
:class:`~forum.node.core.entries.Properties` a Write carries (absolute wall-clock
milliseconds, the same on every node). A bad value is a ``ValueError`` with
a one-line message, which the HTTP API answers with 400: one set of rules,
and its words, for every way in.
"""

from __future__ import annotations

import math
from typing import TypedDict

from forum.node.core.codec import MAX_KEY_BYTES
from forum.node.core.entries import MAX_PRIORITY, MIN_PRIORITY, PLAIN, Properties
from forum.node.core.errors import TooManyCopies


class WriteOptions(TypedDict, total=False):
    """The options of one write, each optional: none given is a plain write.

    ``delay``: seconds from now until the tuple is due (invisible until
    then); ``not_before``: the same as an absolute Unix time, the two
    exclusive. ``ttl``: seconds the tuple lives once due. ``priority``:
    -128 to 127, higher served first (0 when not given). ``key``: the
    write's key (text is its UTF-8 bytes); with ``dedup_window``, a second
    write with that key on the same node within so many seconds answers
    with the first one's id. ``wait``: seconds a write to a limited prefix
    that is full may wait for room (not given: refused at once).
    ``copies``: how many members (this node one of them) must hold the
    write durably before it is acknowledged, 1 to the cluster's size (not
    given: the node's default, ``forum serve --ack-copies``, 1 unless
    set; see :mod:`forum.node.space.copies`). ``None`` for any but
    ``priority`` is the same as not given."""

    delay: float | None
    not_before: float | None
    ttl: float | None
    priority: int
    key: bytes | str | None
    dedup_window: float | None
    wait: float | None
    copies: int | None


#: The names of the write options, in their declared order.
WRITE_OPTION_NAMES: tuple[str, ...] = tuple(WriteOptions.__annotations__)
_NAMES = frozenset(WRITE_OPTION_NAMES)


def unknown_options(options: WriteOptions, function: str) -> None:
    """Raise the ``TypeError`` Python raises for a keyword ``function``
    does not take, for the first name in ``options`` that is not a write
    option (a signature of ``**options: Unpack[WriteOptions]`` takes any
    name at run time; mypy checks them before)."""
    if not options.keys() <= _NAMES:
        name = next(n for n in options if n not in _NAMES)
        raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")


def check_copies(copies: object, members: int | None = None) -> int:
    """``copies`` as a write's number of copies: a whole number from 1 to
    ``members`` (the cluster's size, this node included; ``None``: not
    known here, no upper bound), else a ``ValueError`` with a one-line
    message (above ``members``: :class:`~forum.node.core.errors.TooManyCopies`,
    one too). Checked before anything is written."""
    if type(copies) is not int:
        raise ValueError(f"copies is a whole number from 1, not {copies!r}")
    if copies < 1:
        raise ValueError(f"copies must be at least 1 (this node's own), not {copies}")
    if members is not None and copies > members:
        have = f"{members} member" + ("" if members == 1 else "s")
        raise TooManyCopies(
            f"copies={copies} but the cluster has {have} (this node and its peers): "
            f"at most {members}"
        )
    return copies


#: The longest delay, ttl or dedup window, and the furthest ``not_before``
#: from now: ten years (a larger one is a mistake, not a schedule).
MAX_SECONDS = 10 * 365 * 24 * 3600.0


def write_properties(  # noqa: C901, PLR0917 (one check per option, inline: the write path)
    now: float,
    delay: float | None = None,
    not_before: float | None = None,
    ttl: float | None = None,
    priority: int = 0,
    key: bytes | str | None = None,
    dedup_window: float | None = None,
) -> Properties:
    """Check a write's options (``ValueError``, one line, for a bad one)
    and return the Properties of a write made at ``now`` (Unix seconds).

    ``delay``: seconds from now until the tuple is due (invisible until
    then); ``not_before``: the same as an absolute time, the two exclusive.
    ``ttl``: seconds the tuple lives once due. ``priority``: -128 to 127,
    higher served first. ``key``: the write's key (the Lens's claim key of
    the job); with ``dedup_window``, a second write with that key on the
    same node within so many seconds returns the first one's id.
    ``Forum.write`` calls this on every write with options (but those of
    :func:`expiring_properties`): a check that passes costs a type test and
    a comparison."""
    if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ValueError(f"priority is a whole number, not {priority!r}")
        raise ValueError(f"priority must be {MIN_PRIORITY} to {MAX_PRIORITY}, not {priority}")
    if ttl is not None and not (type(ttl) in _NUMBERS and 0 < ttl <= MAX_SECONDS):
        _check_seconds("ttl", ttl, zero=False)
    if delay is not None and not (type(delay) in _NUMBERS and 0 <= delay <= MAX_SECONDS):
        _check_seconds("delay", delay, zero=True)
    key_bytes = key.encode() if isinstance(key, str) else key
    if key is not None and not (type(key_bytes) is bytes and 0 < len(key_bytes) <= MAX_KEY_BYTES):
        if not isinstance(key, bytes | str):
            raise ValueError(f"key is text or bytes, not {type(key).__name__}")
        raise ValueError(f"key must be 1 to {MAX_KEY_BYTES} bytes")
    if dedup_window is not None:
        _check_seconds("dedup_window", dedup_window, zero=False)
        if key is None:
            raise ValueError("dedup_window needs a key")
    due = 0
    live_from = now
    if not_before is not None:
        if not _is_number(not_before) or not math.isfinite(not_before):
            raise ValueError(f"not_before is a Unix time in seconds, not {not_before!r}")
        if not_before < 0:
            raise ValueError("not_before must not be before 1970")
        if delay is not None:
            raise ValueError("give delay or not_before, not both")
        if now and not_before - now > MAX_SECONDS:
            raise ValueError("not_before is more than ten years ahead")
        if not_before > now:
            due, live_from = _ms(not_before), not_before
    elif delay:
        due, live_from = _ms(now + delay), now + delay
    # _ms inline (a call less on the write path): a ttl > 0 makes it >= 1 ms.
    expires = math.ceil((live_from + ttl) * 1000) if ttl is not None else 0
    dedup_until = _ms(now + dedup_window) if dedup_window is not None else 0
    if not (due or expires or key_bytes is not None):
        return _BY_PRIORITY[priority]  # a plain write, or one with a priority alone
    fields = (due, expires, priority, key_bytes, dedup_until, False)
    props = _last[0]
    if fields != props:
        # Writes of one burst share their times to the millisecond: one object
        # for them all, fewer for the collector to walk while they are live
        # (and one properties map for the encoder to pack). Compared as a
        # plain tuple: a named tuple's __new__ is a Python call.
        props = _last[0] = _new_properties(Properties, fields)
    if ttl is not None and not due and key_bytes is None:  # for expiring_properties
        _expiring[0] = (ttl, priority, expires, props)
    return props


def expiring_properties(now: float, ttl: float | None, priority: int) -> Properties:
    """``write_properties(now, ttl=ttl, priority=priority)``: a write with
    a ttl, a priority or both and no other option, the options of most
    jobs. A priority alone is one of the Properties made once each. The
    ttl and priority of the last such write with a ttl, given again as the
    same objects (a producer's constants), are not checked again: an
    object that passed the checks passes them again, and an identity test
    costs less. Only the expiry is new, and its Properties once it moves
    on to the next millisecond."""
    last_ttl, last_priority, last_expires, props = _expiring[0]
    if ttl is last_ttl and priority is last_priority:
        expires = _ceil((now + last_ttl) * 1000)
        if expires != last_expires:
            props = _new_properties(Properties, (0, expires, priority, None, 0, False))
            _expiring[0] = (last_ttl, priority, expires, props)
        return props
    if ttl is None and type(priority) is int:  # a priority alone: made once each
        alone = _BY_PRIORITY.get(priority)
        if alone is not None:
            return alone
    return write_properties(now, ttl=ttl, priority=priority)


def is_priority_alone(props: Properties) -> bool:
    """Whether ``props`` says nothing but a priority (or nothing): what the
    index keeps in its key, the only thing such a write needs beyond it."""
    return props is _BY_PRIORITY.get(props.priority)


#: The properties made last (see write_properties).
_last: list[Properties] = [PLAIN]
#: The last write with a ttl and no other option than a priority (see
#: expiring_properties): the ttl and priority objects it was given, which
#: passed the checks, its expiry and its Properties. One tuple, replaced
#: whole (a reader never sees half of an update); it starts with a NaN of its
#: own, which no caller gives.
_expiring: list[tuple[float, int, int, Properties]] = [(float("nan"), 0, 0, PLAIN)]
#: Properties from a tuple of all six fields, without the named tuple's __new__.
_new_properties = tuple.__new__
_ceil = math.ceil  # a global, not a module's attribute, on the fast path


_NUMBERS = (int, float)
#: The properties of a write with a priority and nothing else, made once each.
_BY_PRIORITY = {
    p: PLAIN if p == 0 else Properties(priority=p) for p in range(MIN_PRIORITY, MAX_PRIORITY + 1)
}


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
