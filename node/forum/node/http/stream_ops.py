"""The stream's operations: each op's arguments, and what it does with them.

A request frame ``[id, op, args]`` (:mod:`forum.node.http.stream`, docs/wire.md)
names an op of :data:`OPS`; its args are a msgpack map decoded into the op's
:class:`Args` Struct, then held to the checks of the op's HTTP route
(:data:`forum.node.api.operations.STREAM_OPS`: the same ``check_*`` of
:mod:`forum.node.http.bodies`, :mod:`forum.node.http.query` and
:mod:`forum.node.http.writes`) and run on :class:`forum.node.http.ops.Space`,
so an op answers what its route answers: its status and document.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from forum.node.api.model import (
    DEFAULT_LIMIT,
    MSGPACK,
    AckedReserved,
    Limits,
    Page,
    ReservedTuples,
    Tuples,
)
from forum.node.api.parameters import BATCH_LIMIT, CURSOR, ENTRY_ID, LEASE, PAGE_LIMIT, WAIT
from forum.node.core.space import Pattern
from forum.node.core.write_options import WRITE_OPTION_NAMES
from forum.node.http.bodies import check_extend_lease, check_ids, check_payload, check_payloads
from forum.node.http.ops import Space
from forum.node.http.query import check_entry_id, check_integer, check_seconds
from forum.node.http.responses import reserved_body, tuple_body
from forum.node.http.writes import (
    PLAIN_WRITE,
    WriteRequest,
    check_write_options,
    given_options,
)

# -- the arguments of each op: a msgpack map of these names and types ---------------


class Args(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An op's arguments. Another name, a missing one or another type is not a
    frame of the protocol (1007); a value out of range is the op's refusal."""


class WriteOptionArgs(Args, frozen=True):
    """A write's options, a field for each of
    :class:`~forum.node.core.write_options.WriteOptions` (``nil`` or absent:
    not given), held to the checks of the HTTP routes
    (:func:`~forum.node.http.writes.check_write_options`). Their types too: a
    value of another type is the op's refusal (400), not a bad frame, so a
    caller's mistake in one option does not close the stream under everyone
    else."""

    delay: Any = None
    not_before: Any = None
    ttl: Any = None
    priority: Any = None
    key: Any = None
    dedup_window: Any = None
    wait: Any = None
    copies: Any = None

    def asked(self, count: int, limits: Limits) -> WriteRequest:
        """The options given, checked for a write of ``count`` tuples."""
        if (
            self.delay is None
            and self.not_before is None
            and self.ttl is None
            and self.priority is None
            and self.key is None
            and self.dedup_window is None
            and self.wait is None
            and self.copies is None
        ):
            # The hot path, a plain write: attribute tests only, no call, no dict.
            return PLAIN_WRITE
        given = given_options(self, WRITE_OPTION_NAMES, None)
        return check_write_options(given, count, limits)


class PayloadArgs(WriteOptionArgs, frozen=True, kw_only=True):
    payload: bytes


class PayloadsArgs(WriteOptionArgs, frozen=True, kw_only=True):
    payloads: list[bytes]
    #: One key per payload (:func:`~forum.node.http.writes.check_batch_keys`).
    keys: Any = None

    def asked(self, count: int, limits: Limits) -> WriteRequest:
        if self.keys is None:
            return super().asked(count, limits)
        given = given_options(self, WRITE_OPTION_NAMES, None)
        return check_write_options(given, count, limits, self.keys)


class PatternArgs(Args, frozen=True):
    prefix: bytes = b""


class WaitArgs(PatternArgs, frozen=True):
    wait: float = 0.0


class TakeArgs(Args, frozen=True, kw_only=True):
    """A take's or reserve's: the prefix is required (``b""``: every prefix), as
    over HTTP, where an absent one is a 400."""

    prefix: bytes
    wait: float = 0.0


class BatchArgs(TakeArgs, frozen=True, kw_only=True):
    limit: int = DEFAULT_LIMIT


class WithdrawArgs(Args, frozen=True, kw_only=True):
    prefix: bytes
    limit: int = DEFAULT_LIMIT


class ReserveArgs(TakeArgs, frozen=True, kw_only=True):
    lease: float


class ReserveBatchArgs(ReserveArgs, frozen=True, kw_only=True):
    limit: int = DEFAULT_LIMIT


class AckReserveArgs(ReserveBatchArgs, frozen=True, kw_only=True):
    ids: list[str]


class IdArgs(Args, frozen=True):
    id: str


class IdsArgs(Args, frozen=True):
    ids: list[str]


class ExtendArgs(IdsArgs, frozen=True):
    lease: float


class PageArgs(PatternArgs, frozen=True):
    cursor: int = 0
    limit: int = DEFAULT_LIMIT


#: An answer: the HTTP status and the document (``None``: no body, a 204).
Answer = tuple[int, msgspec.Struct | None]


async def _write(space: Space, a: PayloadArgs) -> Answer:
    payload = check_payload("payload", a.payload, space.limits.max_payload)
    return 201, await space.write(payload, a.asked(1, space.limits))


async def _write_many(space: Space, a: PayloadsArgs) -> Answer:
    payloads = check_payloads("payloads", a.payloads, space.limits)
    return 201, await space.write_many(payloads, a.asked(len(payloads), space.limits))


async def _read(space: Space, a: WaitArgs) -> Answer:
    found = await space.read(Pattern(a.prefix), check_seconds(WAIT, a.wait, space.limits))
    return (204, None) if found is None else (200, tuple_body(found, MSGPACK))


async def _take(space: Space, a: TakeArgs) -> Answer:
    found = await space.take(Pattern(a.prefix), check_seconds(WAIT, a.wait, space.limits))
    return (204, None) if found is None else (200, tuple_body(found, MSGPACK))


async def _withdraw(space: Space, a: WithdrawArgs) -> Answer:
    taken = await space.withdraw(
        Pattern(a.prefix), check_integer(BATCH_LIMIT, a.limit, space.limits)
    )
    return 200, Tuples([tuple_body(t, MSGPACK) for t in taken])


async def _take_many(space: Space, a: BatchArgs) -> Answer:
    limits = space.limits
    taken = await space.take_many(
        Pattern(a.prefix),
        check_integer(BATCH_LIMIT, a.limit, limits),
        check_seconds(WAIT, a.wait, limits),
    )
    return 200, Tuples([tuple_body(t, MSGPACK) for t in taken])


async def _reserve(space: Space, a: ReserveArgs) -> Answer:
    limits = space.limits
    found = await space.reserve(
        Pattern(a.prefix),
        check_seconds(LEASE, a.lease, limits),
        check_seconds(WAIT, a.wait, limits),
    )
    return (204, None) if found is None else (200, reserved_body(found, MSGPACK))


async def _reserve_many(space: Space, a: ReserveBatchArgs) -> Answer:
    limits = space.limits
    reserved = await space.reserve_many(
        Pattern(a.prefix),
        check_seconds(LEASE, a.lease, limits),
        check_integer(BATCH_LIMIT, a.limit, limits),
        check_seconds(WAIT, a.wait, limits),
    )
    return 200, ReservedTuples([reserved_body(t, MSGPACK) for t in reserved])


async def _ack(space: Space, a: IdArgs) -> Answer:
    return 200, await space.ack(check_entry_id(ENTRY_ID, a.id))


async def _ack_many(space: Space, a: IdsArgs) -> Answer:
    return 200, await space.ack_many(check_ids(a.ids, space.limits))


async def _ack_reserve(space: Space, a: AckReserveArgs) -> Answer:
    limits = space.limits
    acked, reserved = await space.ack_reserve(
        check_ids(a.ids, limits),
        Pattern(a.prefix),
        check_seconds(LEASE, a.lease, limits),
        check_integer(BATCH_LIMIT, a.limit, limits),
        check_seconds(WAIT, a.wait, limits),
    )
    return 200, AckedReserved(acked, [reserved_body(t, MSGPACK) for t in reserved])


async def _extend_many(space: Space, a: ExtendArgs) -> Answer:
    ids = check_ids(a.ids, space.limits)
    return 200, await space.extend_many(ids, check_extend_lease(a.lease, space.limits))


async def _release(space: Space, a: IdArgs) -> Answer:
    return 200, await space.release(check_entry_id(ENTRY_ID, a.id))


async def _count(space: Space, a: PatternArgs) -> Answer:
    return 200, await space.count(Pattern(a.prefix))


async def _list(space: Space, a: PageArgs) -> Answer:
    limits = space.limits
    page = space.list(
        Pattern(a.prefix),
        check_integer(CURSOR, a.cursor, limits),
        check_integer(PAGE_LIMIT, a.limit, limits),
    )
    return 200, Page([tuple_body(t, MSGPACK) for t in page.tuples], page.next_cursor)


def _waits(a: WaitArgs | TakeArgs | WriteOptionArgs) -> bool:
    return bool(a.wait)


def _never(_: Args) -> bool:
    return False


def _always(_: Args) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class StreamOp:
    """One op of the stream: its arguments' decoder, what it does with them,
    and whether a request with those arguments may wait (a long poll): such a
    request starts in a task of its own, so its timeout is its own; any other
    starts in the turn that read it (:meth:`_Stream._start`)."""

    decoder: msgspec.msgpack.Decoder[Any]
    run: Callable[[Space, Any], Awaitable[Answer]]
    waits: Callable[[Any], bool]

    @classmethod
    def of(
        cls,
        args: type[Args],
        run: Callable[[Space, Any], Awaitable[Answer]],
        waits: Callable[[Any], bool] = _always,
    ) -> StreamOp:
        return cls(msgspec.msgpack.Decoder(args), run, waits)


#: Every op, by the name a request gives (``cancel`` is the stream's own).
OPS: dict[str, StreamOp] = {
    "write": StreamOp.of(PayloadArgs, _write, _waits),
    "write_many": StreamOp.of(PayloadsArgs, _write_many, _waits),
    "read": StreamOp.of(WaitArgs, _read, _waits),
    "take": StreamOp.of(TakeArgs, _take, _waits),
    "take_many": StreamOp.of(BatchArgs, _take_many, _waits),
    "reserve": StreamOp.of(ReserveArgs, _reserve, _waits),
    "reserve_many": StreamOp.of(ReserveBatchArgs, _reserve_many, _waits),
    "ack": StreamOp.of(IdArgs, _ack, _never),
    "ack_many": StreamOp.of(IdsArgs, _ack_many, _never),
    "ack_reserve": StreamOp.of(AckReserveArgs, _ack_reserve, _waits),
    "extend_many": StreamOp.of(ExtendArgs, _extend_many, _never),
    "release": StreamOp.of(IdArgs, _release, _never),
    "count": StreamOp.of(PatternArgs, _count, _never),
    "list": StreamOp.of(PageArgs, _list, _never),
    "withdraw": StreamOp.of(WithdrawArgs, _withdraw, _never),
}
