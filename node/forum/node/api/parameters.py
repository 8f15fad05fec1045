"""The query parameters of the HTTP API, declared once: their grammar and bounds.

:class:`forum.node.http.query.Query` checks a request's query string against
them, and ``/v1/openapi.json`` describes them from the same declarations
(each operation's ``parameters``, :mod:`forum.node.api.operations`). The
client spells its arguments by them too (:func:`prefix_query`,
:func:`bytes_query`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Literal

from forum.node.api.model import DEFAULT_LIMIT, ENTRY_ID_HEADER, Limits
from forum.node.core.codec import MAX_KEY_BYTES
from forum.node.core.entries import MAX_PRIORITY, MIN_PRIORITY
from forum.node.core.space import Pattern

#: What a query value may look like. Numbers are narrower than Python's parsers
#: on purpose (``int`` and ``float`` take Unicode digits, ``1_0``, ``1e3``, ``inf``)::
#:
#:     integer  = 1*19 DIGIT                   ; ASCII 0-9 only
#:     signed   = [ "-" ] 1*19 DIGIT           ; a priority
#:     seconds  = 1*10 DIGIT [ "." 1*9 DIGIT ]
GRAMMAR = {
    "integer": r"[0-9]{1,19}",
    "signed": r"-?[0-9]{1,19}",
    "seconds": r"[0-9]{1,10}(\.[0-9]{1,9})?",
}
Kind = Literal["text", "base64", "integer", "signed", "seconds", "entry_id"]


@dataclass(frozen=True, slots=True)
class Parameter:
    """One query parameter: its name, its grammar, and the bounds it is held to."""

    name: str
    kind: Kind
    #: For people; ``{...}`` names a field of :class:`Limits`.
    description: str
    required: bool = False
    #: An integer's default when absent, and its least value.
    default: int = 0
    minimum: int = 0
    #: The greatest value: a number, or the name of a field of :class:`Limits`.
    maximum: float | str = 2**63 - 1
    #: Seconds past ``maximum`` are cut to it (a wait), not refused (a lease).
    cut: bool = False

    def bound(self, limits: Limits) -> float:
        """``maximum`` on the node with ``limits``."""
        value: float = (
            getattr(limits, self.maximum) if isinstance(self.maximum, str) else self.maximum
        )
        return value

    def describe(self, limits: Limits) -> str:
        return self.description.format(**{k: getattr(limits, k) for k in Limits.__slots__})


PREFIX = Parameter("prefix", "text", "UTF-8 byte prefix; absent matches every tuple.")
PREFIX_B64 = Parameter("prefix_b64", "base64", "The prefix as URL-safe base64, for any bytes.")
WAIT = Parameter(
    "wait",
    "seconds",
    "Seconds to wait for a match, such as 5 or 0.25 (cut to the node's max_wait, "
    "{max_wait:g} s here); absent or 0 answers at once.",
    maximum="max_wait",
    cut=True,
)
LEASE = Parameter(
    "lease",
    "seconds",
    "Seconds the tuple stays reserved: > 0 and at most {max_lease:g}.",
    required=True,
    maximum="max_lease",
)
BATCH_LIMIT = Parameter(
    "limit",
    "integer",
    "Most tuples to answer with: 1 to {max_batch}; default 100.",
    default=DEFAULT_LIMIT,
    minimum=1,
    maximum="max_batch",
)
PAGE_LIMIT = Parameter(
    "limit",
    "integer",
    "Most tuples per page: 1 to {max_page}; default 100.",
    default=DEFAULT_LIMIT,
    minimum=1,
    maximum="max_page",
)
CURSOR = Parameter("cursor", "integer", "next_cursor of the previous page; 0 (default) to start.")
ENTRY_ID = Parameter(
    "id",
    "entry_id",
    f"An entry id, origin:seq (as a raw answer's {ENTRY_ID_HEADER}).",
    required=True,
)
PATTERN = (PREFIX, PREFIX_B64)
#: What a take or reserve takes from: a prefix it must name (either way). An
#: absent one took from every prefix: a forgotten parameter emptied all queues.
TAKE_PREFIX = Parameter(
    "prefix",
    "text",
    "UTF-8 byte prefix of the tuples to take. This or prefix_b64 is required: "
    "an explicit empty prefix= takes from every prefix.",
)
TAKE_PATTERN = (TAKE_PREFIX, PREFIX_B64)

# The write options in the query string (a raw body has no fields for them);
# a JSON or msgpack body may give them as fields instead (WriteOptionFields).
DELAY = Parameter("delay", "seconds", "Seconds until the tuple is due (invisible until then).")
NOT_BEFORE = Parameter(
    "not_before", "seconds", "When the tuple is due, in Unix seconds (not with delay)."
)
TTL = Parameter("ttl", "seconds", "Seconds the tuple lives once due; then it is gone everywhere.")
PRIORITY = Parameter(
    "priority",
    "signed",
    f"{MIN_PRIORITY} to {MAX_PRIORITY}, higher served first; default 0.",
)
KEY = Parameter("key", "text", f"The write's key as UTF-8 text, 1 to {MAX_KEY_BYTES} bytes.")
KEY_B64 = Parameter("key_b64", "base64", "The key as URL-safe base64, for any bytes.")
DEDUP_WINDOW = Parameter(
    "dedup_window",
    "seconds",
    "With key: a second write of the key within so many seconds answers with the "
    "first one's id instead of writing.",
)
WRITE_WAIT = Parameter(
    "wait",
    "seconds",
    "Seconds to wait for room when a limited prefix is full (else 429): at most "
    "{max_write_wait:g} (the node's max_wait, and never over a minute).",
    maximum="max_write_wait",
)
COPIES = Parameter(
    "copies",
    "integer",
    "Members (this node one) that must hold the write durably before it is answered: 1 to "
    "the cluster's size; default the node's ack_copies. Short of them in time: 504 "
    "too_few_copies, the write standing.",
    minimum=1,
)
WRITE_OPTIONS = (
    DELAY, NOT_BEFORE, TTL, PRIORITY, KEY, KEY_B64, DEDUP_WINDOW, WRITE_WAIT, COPIES,
)  # fmt: skip
#: The prefix in the path of the pause routes: its bytes percent-encoded
#: (``job%2F`` for ``job/``, ``%FF`` for the byte 0xFF); never empty.
#: The most groups ``GET /v1/prefixes?separator=`` counts (the first in byte order).
MAX_GROUPS = 500
SEPARATOR = Parameter(
    "separator",
    "text",
    "Also a row per group of tuples here (a payload up to and including its first "
    f"separator, such as /; the payload itself without one) with its live, delayed and "
    f"reserved counts and its oldest live tuple's age; at most {MAX_GROUPS} groups, the "
    "first in byte order.",
)
PATH_PREFIX = Parameter(
    "prefix",
    "text",
    "The prefix, its bytes percent-encoded (job%2F for job/, %FF for the byte 0xFF); not empty.",
    required=True,
)


def prefix_query(pattern: Pattern) -> dict[str, str]:
    """The query parameters that carry ``pattern`` (text when it is UTF-8)."""
    return bytes_query("prefix", pattern.prefix)


def bytes_query(name: str, value: bytes) -> dict[str, str]:
    """The query parameter that carries ``value``: ``name`` as text when it is
    UTF-8, else ``<name>_b64`` (URL-safe base64, unpadded)."""
    try:
        return {name: value.decode()}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.urlsafe_b64encode(value).decode().rstrip("=")}
