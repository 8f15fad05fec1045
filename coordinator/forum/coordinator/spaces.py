"""What a worker needs from a tuple space (:class:`WorkSpace`), and the
adapter that lets a space which can only take serve as one (:class:`TakeOnly`).

A :class:`WorkSpace` hands tuples out on a lease and takes them for good only
when told: ``reserve`` / ``reserve_many``, then ``extend_many`` (the
heartbeat), then ``ack_many`` (done) or ``release`` (give it back now).
``node.Forum`` and ``node.ForumClient`` are work spaces. With one, the node
keeps every job until it is completed: a worker that dies, or a Redis that
forgets, costs a re-run, never a job (forum.coordinator.worker).

:class:`TakeOnly` wraps a plain :class:`node.TupleSpace` (write, take): its
"reserve" is a take, and the tuple then lives only in this process until it
is acked (forgotten) or released (written back). **What it loses:** the
node's copy. A worker that dies (SIGKILL, out of memory, a lost machine)
between a take and the ack loses the jobs it held; nothing re-offers them.
And a job that kills its worker is not counted (``deliveries`` is always 1):
it is lost with the first worker it kills rather than dead-lettered. Use it
only where losing in-flight jobs to a crash is acceptable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from forum.coordinator.envelope import Envelope
from forum.coordinator.job import KeyFunction
from forum.node.core.entries import EntryId, Reserved, Tuple
from forum.node.core.space import Pattern, TupleSpace


@runtime_checkable
class WorkSpace(TupleSpace, Protocol):
    """A space that reserves, extends and acks tuples in batches (``Forum``,
    ``ForumClient``), as the worker runtime needs (see the module docstring)."""

    async def reserve(
        self, pattern: Pattern, lease: float, timeout: float | None = None
    ) -> Reserved | None: ...

    async def reserve_many(self, pattern: Pattern, lease: float, limit: int) -> list[Reserved]: ...

    async def extend_many(self, entry_ids: Sequence[EntryId], lease: float) -> list[bool]: ...

    async def ack_many(self, entry_ids: Sequence[EntryId]) -> list[bool]: ...

    async def release(self, entry_id: EntryId) -> bool: ...


@runtime_checkable
class AckReserving(Protocol):
    """A space that acks and reserves in one request (``ForumClient``: one
    round trip for a worker's completed jobs and its next batch)."""

    async def ack_reserve(
        self,
        entry_ids: Sequence[EntryId],
        pattern: Pattern,
        lease: float,
        limit: int,
        timeout: float | None = None,
    ) -> tuple[list[bool], list[Reserved]]: ...


async def ack_then_reserve(
    space: WorkSpace, entry_ids: Sequence[EntryId], pattern: Pattern, lease: float, limit: int
) -> list[Reserved]:
    """Ack ``entry_ids``, then reserve up to ``limit`` without waiting: one
    request where the space can (:class:`AckReserving`), else two calls (an
    in-process ``Forum`` has no round trip to save)."""
    if isinstance(space, AckReserving):
        return (await space.ack_reserve(entry_ids, pattern, lease, limit))[1]
    if entry_ids:
        await space.ack_many(entry_ids)
    return await space.reserve_many(pattern, lease, limit)


class TakeOnly:
    """A :class:`WorkSpace` over a space that can only take: see the module
    docstring for the guarantee it gives up.

    ``key`` is the worker's key function: a released job is written back
    under a new entry id, so it carries its claim key in its trailer (the key
    function's, else its first entry id), as every later delivery must.
    """

    def __init__(self, space: TupleSpace, key: KeyFunction | None = None) -> None:
        self._space = space
        self._key = key
        #: Taken tuples not yet acked or released: the only copy of each.
        self._held: dict[EntryId, Tuple] = {}

    async def write(self, payload: bytes) -> EntryId:
        return await self._space.write(payload)

    async def read(self, pattern: Pattern) -> bytes | None:
        return await self._space.read(pattern)

    async def take(self, pattern: Pattern, timeout: float | None = None) -> bytes | None:
        return await self._space.take(pattern, timeout)

    async def take_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        return await self._space.take_entry(pattern, timeout)

    async def count(self, pattern: Pattern) -> int:
        return await self._space.count(pattern)

    async def reserve(
        self, pattern: Pattern, lease: float, timeout: float | None = None
    ) -> Reserved | None:
        """A take (``lease`` is moot: the tuple is gone from the space)."""
        item = await self._space.take_entry(pattern, timeout)
        if item is None:
            return None
        self._held[item.id] = item
        return Reserved(item.id, item.payload, item.props)

    async def reserve_many(self, pattern: Pattern, lease: float, limit: int) -> list[Reserved]:
        """Up to ``limit`` takes, one at a time; never waits."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        taken: list[Reserved] = []
        while len(taken) < limit and (item := await self.reserve(pattern, lease)) is not None:
            taken.append(item)
        return taken

    async def extend_many(self, entry_ids: Sequence[EntryId], lease: float) -> list[bool]:
        """Whether each tuple is still held: a taken tuple never runs out."""
        return [entry_id in self._held for entry_id in entry_ids]

    async def ack_many(self, entry_ids: Sequence[EntryId]) -> list[bool]:
        """Forget the tuples: they were taken for good at the "reserve"."""
        return [self._held.pop(entry_id, None) is not None for entry_id in entry_ids]

    async def release(self, entry_id: EntryId) -> bool:
        """Write the tuple back, with its claim key in its trailer; ``False``
        if it is not held. Should the write fail, it is held still."""
        item = self._held.get(entry_id)
        if item is None:
            return False
        envelope = Envelope.open(item.payload)
        try:
            payload = envelope.keyed(self._key, str(item.id), item.props.key).seal()
        except Exception:
            # The worker parks such a job as a dead letter; its bytes go back as they were.
            payload = item.payload
        await self._space.write(payload)
        del self._held[entry_id]
        return True
