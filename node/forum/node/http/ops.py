"""The operations of the client API, each written once.

Two front ends reach them: the HTTP handlers (:mod:`forum.node.http.handlers`,
one request each) and the stream (:mod:`forum.node.http.stream`, many requests in
flight on one WebSocket). Each front end reads its own spelling of the
arguments (a query string and a body; a msgpack map) and holds the values
to the same checks (``check_*`` in :mod:`forum.node.http.bodies`,
:mod:`forum.node.http.query` and :mod:`forum.node.http.writes`) before it calls
an operation here, so a refused request changes nothing, whichever way it
came. What an operation answers is the document of :mod:`forum.node.api.model`
(the front end encodes it), and a failure is the same :class:`ApiProblem`
(:func:`problem_of`), which both answer with its status and error body.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from forum.node.api.model import (
    Acked,
    AckedMany,
    Count,
    Extended,
    Ids,
    Limits,
    Paused,
    Prefixes,
    Released,
    Resumed,
    Written,
)
from forum.node.api.parameters import MAX_GROUPS
from forum.node.core.entries import EntryId, Reserved, Tuple
from forum.node.core.errors import (
    ForumError,
    LimitExceeded,
    RecordTooLarge,
    StrandError,
    TooFewCopies,
    TooManyCopies,
)
from forum.node.core.space import ListPage, Pattern
from forum.node.http.bodies import ApiProblem, bad_request
from forum.node.http.cluster import MapHolder
from forum.node.http.longpoll import LongPolls
from forum.node.http.responses import prefix_body
from forum.node.http.writes import PLAIN_WRITE, WriteRequest
from forum.node.space.forum import Forum, prefix_text

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Space:
    """What the operations of one node work on."""

    forum: Forum
    long_polls: LongPolls
    limits: Limits
    #: The node's cluster map, on a node that has one: keyed writes it does
    #: not own are counted as misplaced (docs/scaling.md).
    cluster: MapHolder | None = None

    async def write(self, payload: bytes, asked: WriteRequest = PLAIN_WRITE) -> Written:
        cluster = self.cluster
        if cluster is not None:
            cluster.note_write(asked.options.get("key"), 1)
            written = await self.forum.write(payload, **asked.options)
            return Written(str(written), map_epoch=cluster.map.epoch)
        if asked is PLAIN_WRITE:  # the hot path: no option given
            return Written(str(await self.forum.write(payload)))
        return Written(str(await self.forum.write(payload, **asked.options)))

    async def write_many(self, payloads: Sequence[bytes], asked: WriteRequest = PLAIN_WRITE) -> Ids:
        if not payloads:
            return Ids([])
        cluster, keys = self.cluster, asked.keys
        if cluster is not None:
            for key in keys or ():
                cluster.note_write(key, 1)
            cluster.note_write(asked.options.get("key"), len(payloads))
        if keys is not None:
            ids = await self.forum.write_many(payloads, keys=keys, **asked.options)
        else:
            ids = await self.forum.write_many(payloads, **asked.options)
        return Ids([str(i) for i in ids])

    async def read(self, pattern: Pattern, wait: float) -> Tuple | None:
        return await self.long_polls.read(pattern, wait)

    async def take(self, pattern: Pattern, wait: float) -> Tuple | None:
        return await self.long_polls.take(pattern, wait)

    async def reserve(self, pattern: Pattern, lease: float, wait: float) -> Reserved | None:
        return await self.long_polls.reserve(pattern, lease, wait)

    async def take_many(self, pattern: Pattern, limit: int, wait: float) -> list[Tuple]:
        """Up to ``limit`` oldest matches, all or none. With ``wait``, when
        nothing matches it waits for one match, then takes what else is
        there: a consumer gets work as soon as there is any, yet in batches
        under load."""
        taken = await self.forum.take_many(pattern, limit)
        if taken or not wait:
            return taken
        first = await self.long_polls.take(pattern, wait)
        if first is None:
            return []
        taken = [first]
        if limit > 1:
            try:
                taken += await self.forum.take_many(pattern, limit - 1)
            except ForumError:
                # The first is taken for good: answer with it rather than lose it.
                log.exception("take batch: the rest of a batch after a wait failed")
        return taken

    async def reserve_many(
        self, pattern: Pattern, lease: float, limit: int, wait: float
    ) -> list[Reserved]:
        """As :meth:`take_many`, reserving for ``lease`` seconds."""
        reserved = await self.forum.reserve_many(pattern, lease, limit)
        if reserved or not wait:
            return reserved
        first = await self.long_polls.reserve(pattern, lease, wait)
        if first is None:
            return []
        reserved = [first]
        if limit > 1:
            reserved += await self.forum.reserve_many(pattern, lease, limit - 1)
        return reserved

    async def withdraw(self, pattern: Pattern, limit: int) -> list[Tuple]:
        return await self.forum.withdraw(pattern, limit)

    async def ack(self, entry_id: EntryId) -> Acked:
        return Acked(await self.forum.ack(entry_id))

    async def ack_many(self, entry_ids: Sequence[EntryId]) -> AckedMany:
        return AckedMany(await self.forum.ack_many(entry_ids))

    async def ack_reserve(
        self,
        entry_ids: Sequence[EntryId],
        pattern: Pattern,
        lease: float,
        limit: int,
        wait: float,
    ) -> tuple[list[bool], list[Reserved]]:
        """:meth:`ack_many`, then :meth:`reserve_many`: a worker's completed
        jobs and its next batch in one round trip. The acks are durable before
        the reserve starts, so they hold whatever it finds (nothing, after its
        wait, or a failure); a request cancelled during the acks' append (its
        client gone) leaves each either acked or reserved still, back when its
        lease runs out."""
        acked = await self.forum.ack_many(entry_ids) if entry_ids else []
        return acked, await self.reserve_many(pattern, lease, limit, wait)

    async def extend_many(self, entry_ids: Sequence[EntryId], lease: float) -> Extended:
        return Extended(await self.forum.extend_many(entry_ids, lease))

    async def release(self, entry_id: EntryId) -> Released:
        return Released(await self.forum.release(entry_id))

    async def count(self, pattern: Pattern) -> Count:
        return Count(await self.forum.count(pattern))

    def list(self, pattern: Pattern, cursor: int, limit: int) -> ListPage:
        return self.forum.list(pattern, cursor=cursor, limit=limit)

    # -- pausing a prefix, and the limited prefixes' fill -----------------------

    async def pause(self, prefix: bytes) -> Paused:
        return Paused(str(await self.forum.pause(_named(prefix))))

    async def resume(self, prefix: bytes) -> Resumed:
        return Resumed(await self.forum.resume(_named(prefix)))

    def prefixes(self, media: str, separator: bytes | None = None) -> Prefixes:
        """The prefixes paused here and those with a limit, with their fill;
        with ``separator``, each group of tuples here too, with its counts."""
        paused, fill = set(self.forum.paused()), self.forum.fill()
        groups: dict[bytes, tuple[int, int, int]] = {}
        if separator is not None:
            try:
                groups = self.forum.groups(separator, MAX_GROUPS)
            except ValueError as exc:
                raise bad_request("invalid_parameter", str(exc)) from None
            groups = dict(list(groups.items())[:MAX_GROUPS])
        rows = sorted(paused | fill.keys() | groups.keys())
        ages = self.forum.oldest_ages(rows) if separator is not None else {}
        return Prefixes(
            [
                prefix_body(
                    prefix,
                    media,
                    paused=prefix in paused,
                    held=fill[prefix][0] if prefix in fill else None,
                    limit=fill[prefix][1] if prefix in fill else None,
                    **_counts(groups, ages, prefix, separator is not None),
                )
                for prefix in rows
            ]
        )


def _counts(
    groups: dict[bytes, tuple[int, int, int]],
    ages: dict[bytes, float],
    prefix: bytes,
    grouped: bool,
) -> dict[str, int | float | None]:
    """A row's live, delayed and reserved counts and its oldest age, when
    grouping was asked."""
    if not grouped:
        return {}
    live, delayed, reserved = groups.get(prefix, (0, 0, 0))
    age = ages.get(prefix)
    return {
        "live": live,
        "delayed": delayed,
        "reserved": reserved,
        "oldest_age": None if age is None else round(age, 3),
    }


def _named(prefix: bytes) -> bytes:
    # The path cannot carry an empty segment anyway; pausing everything at
    # once by accident is not worth a spelling.
    if not prefix:
        raise bad_request("invalid_parameter", "prefix must not be empty")
    return prefix


def problem_of(exc: Exception) -> ApiProblem:
    """The answer to an operation that failed with ``exc``: the problem itself,
    or what a Forum error means to a client; anything else is a 500 (logged
    by the caller, who knows the request)."""
    if isinstance(exc, ApiProblem):
        return exc
    if isinstance(exc, LimitExceeded):
        # Whole seconds for the header (RFC 9110), the figure itself in the
        # body: over the stream, which has no headers, it is all there is.
        retry_after = max(1, math.ceil(exc.retry_after))
        return ApiProblem(
            429,
            "limit_exceeded",
            str(exc),
            headers={"Retry-After": str(retry_after)},
            details={
                "prefix": prefix_text(exc.prefix),
                "limit": exc.limit,
                "retry_after": float(exc.retry_after),
            },
        )
    if isinstance(exc, TooManyCopies):
        return ApiProblem(400, "invalid_option", str(exc))
    if isinstance(exc, TooFewCopies):
        # Not a refusal: the write stands, with fewer copies than it asked.
        return ApiProblem(
            504,
            "too_few_copies",
            str(exc),
            details={
                "ids": [str(i) for i in exc.ids],
                "copies": exc.copies,
                "copies_held": exc.held,
            },
        )
    if isinstance(exc, RecordTooLarge):
        # Bad input that got past the body limits: the log refuses it whole.
        return ApiProblem(413, "payload_too_large", str(exc))
    if isinstance(exc, StrandError):
        return ApiProblem(503, "storage_unavailable", str(exc), headers={"Retry-After": "1"})
    if isinstance(exc, ForumError):
        # The Forum refuses work once it is closing (shutdown).
        return ApiProblem(503, "unavailable", str(exc), headers={"Retry-After": "1"})
    return ApiProblem(500, "internal", "the node failed to answer; its log says why")
