"""Admission: what a write must pass, and what a take must wait for.

* **Limits.** A limited prefix holds at most so many tuples here (live, not
  due yet, reserved, or being written here). A local write that would put
  it over waits up to its ``wait`` for room, else raises
  :class:`~forum.node.core.errors.LimitExceeded`; remote writes never wait.
* **Dedup.** A write with a dedup key whose window is open here answers
  with the first write's id and writes nothing
  (:class:`~forum.node.space.dedup.DedupTable`); a second write with a key
  while the first is under way waits for it.
* **Pauses.** A pause marker (a Write with ``Properties(pause=True)``)
  pauses the takes and reserves of its prefix, and of every pattern that
  starts with it, until a Take of every marker of the prefix ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import cast

from forum.node.core.entries import PLAIN, EntryId, Properties, Tuple, Write
from forum.node.core.errors import ForumError, LimitExceeded
from forum.node.core.space import MAX_WAIT
from forum.node.space.dedup import DedupTable
from forum.node.space.index import LiveIndex
from forum.node.space.reservations import Reservations
from forum.node.space.schedule import Schedule
from forum.node.storage.strand import Strand

#: What a refused write is told to wait before trying again (``LimitExceeded``).
ROOM_RETRY_AFTER = 1.0
#: What a local append is given to call once durable (``Forum._on_writes_durable``).
Durable = Callable[[list[Write]], None]


class Admission:
    """The limits, the dedup keys of writes under way, and the pauses.

    ``limits``: per limited prefix, the most tuples it may hold here.
    ``pause_markers``: each live pause marker's id, with the prefix it
    pauses; ``paused``: each paused prefix, with the ids of its markers.
    ``room_waiters``: writers waiting for room under a limit, woken
    (:meth:`free_room`) when tuples leave. The Forum passes what a limit
    counts (the index, the schedule, the reservations), the Strand and its
    callback for durable writes, and ``retry_waiters`` (a prefix is resumed:
    its takers are served again)."""

    __slots__ = (
        "_dedup",
        "_dedup_writing",
        "_durable",
        "_index",
        "_limited_writing",
        "_reservations",
        "_retry_waiters",
        "_room_ended",
        "_schedule",
        "_strand",
        "limits",
        "pause_markers",
        "paused",
        "room_waiters",
    )

    def __init__(
        self,
        *,
        limits: Mapping[bytes, int] | None,
        strand: Strand,
        durable: Durable,
        dedup: DedupTable,
        index: LiveIndex,
        schedule: Schedule,
        reservations: Reservations,
        retry_waiters: Callable[[], None],
    ) -> None:
        for prefix, limit in (limits or {}).items():
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise ValueError(f"the limit of {prefix!r} must be a whole number >= 1")
        self.limits: dict[bytes, int] = dict(limits or {})
        self.pause_markers: dict[EntryId, bytes] = {}
        self.paused: dict[bytes, set[EntryId]] = {}
        self.room_waiters: list[asyncio.Future[None]] = []
        #: Set on shutdown: a write finds room now or not at all (end_room_waits).
        self._room_ended = False
        # Local writes under way, per limited prefix (counted against its limit).
        self._limited_writing: dict[bytes, int] = {}
        # Writes with a dedup key under way: a second one waits for the first.
        self._dedup_writing: dict[bytes, asyncio.Future[EntryId]] = {}
        self._strand = strand
        self._durable = durable
        self._dedup = dedup
        self._index = index
        self._schedule = schedule
        self._reservations = reservations
        self._retry_waiters = retry_waiters

    # -- writes ------------------------------------------------------------------

    async def write(
        self, payloads: Sequence[bytes], props: Properties, wait: float | None
    ) -> list[EntryId]:
        """Write ``payloads`` with ``props`` once admitted: deduplicated by
        its key, if it opens a window, and once its limited prefixes have room."""
        if wait is not None and not (0 <= wait <= MAX_WAIT):
            raise ValueError(f"wait must be 0 to {MAX_WAIT:.0f} seconds, not {wait!r}")
        key = props.key if props.dedup_until else None
        if key is not None:
            return [await self._write_once(payloads[0], props, key, wait)]
        return await self._write_limited(payloads, props, wait)

    async def write_each(
        self, payloads: Sequence[bytes], each: Sequence[Properties], wait: float | None
    ) -> list[EntryId]:
        """Write each payload with its own properties (``each``, one per
        payload), as :meth:`write` would alone, but in one group commit: a
        payload whose key opens a dedup window answers with the id of the
        write with that key whose window is open (waiting for one under way),
        or of an earlier payload of the batch with that key, and writes nothing."""
        if wait is not None and not (0 <= wait <= MAX_WAIT):
            raise ValueError(f"wait must be 0 to {MAX_WAIT:.0f} seconds, not {wait!r}")
        keyed = {props.key for props in each if props.dedup_until and props.key is not None}
        # Wait out the writes of these keys under way before taking any key
        # ourselves: two batches holding a key each and waiting for the
        # other's would wait for ever.
        while under_way := [f for k in keyed if (f := self._dedup_writing.get(k)) is not None]:
            await asyncio.wait(under_way)  # their failures are theirs: looked at again below
        ids: list[EntryId | None] = [None] * len(payloads)
        first: dict[bytes, int] = {}  # a key's payload written by this batch
        fresh: list[int] = []
        now = self._schedule.now_ms()
        loop = asyncio.get_running_loop()
        for i, props in enumerate(each):
            key = props.key if props.dedup_until else None
            if key is not None:
                if key in first:
                    continue  # answered with the first's id below
                ids[i] = self._dedup.get(key, now)
                if ids[i] is not None:
                    continue
                first[key] = i
                self._dedup_writing[key] = loop.create_future()
            fresh.append(i)
        try:
            written = await self._write_limited(
                [payloads[i] for i in fresh], PLAIN, wait, each=[each[i] for i in fresh]
            )
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else ForumError("cancelled")
            for key in first:
                done = self._dedup_writing.pop(key)
                done.set_exception(error)
                done.exception()  # retrieved: nobody may be waiting
            raise
        for i, entry_id in zip(fresh, written, strict=True):
            ids[i] = entry_id
        for key, i in first.items():
            self._dedup_writing.pop(key).set_result(cast(EntryId, ids[i]))
        answered: list[EntryId] = []
        for found, props in zip(ids, each, strict=True):
            # None: a later payload with a key of this batch, the first's id.
            answered.append(
                found if found is not None else cast(EntryId, ids[first[cast(bytes, props.key)]])
            )
        return answered

    async def _write_once(
        self, payload: bytes, props: Properties, key: bytes, wait: float | None
    ) -> EntryId:
        """A write with a dedup key: the id of the write with that key whose
        window is open, if any (waiting for one under way), else this one's."""
        while (writing := self._dedup_writing.get(key)) is not None:
            with contextlib.suppress(Exception):
                return await asyncio.shield(writing)
        found = self._dedup.get(key, self._schedule.now_ms())
        if found is not None:
            return found
        done: asyncio.Future[EntryId] = asyncio.get_running_loop().create_future()
        self._dedup_writing[key] = done
        try:
            (entry_id,) = await self._write_limited((payload,), props, wait)
        except BaseException as exc:
            done.set_exception(exc if isinstance(exc, Exception) else ForumError("cancelled"))
            done.exception()  # retrieved: nobody may be waiting
            raise
        finally:
            del self._dedup_writing[key]
        done.set_result(entry_id)
        return entry_id

    async def _write_limited(
        self,
        payloads: Sequence[bytes],
        props: Properties,
        wait: float | None,
        *,
        each: Sequence[Properties] | None = None,
    ) -> list[EntryId]:
        """Write, once every limited prefix the payloads fall under has room;
        with ``each``, each payload with its own properties (one append per
        payload, all queued at once: one group commit)."""
        limited = self._limited_by(payloads)
        if limited:
            await self._room_for(limited, wait)
            for prefix, n in limited.items():
                self._limited_writing[prefix] = self._limited_writing.get(prefix, 0) + n
        try:
            # The Strand calls the durable callback itself, whatever happens to this
            # caller: its cancellation cancels only the wait, so no shield is needed.
            if each is None:
                writes = await self._strand.submit_writes(payloads, self._durable, props)
            else:
                submit, durable = self._strand.submit_writes, self._durable
                appends = [submit((p,), durable, e) for p, e in zip(payloads, each, strict=True)]
                writes = [w for append in await asyncio.gather(*appends) for w in append]
        finally:
            for prefix, n in limited.items():
                self._limited_writing[prefix] -= n
        return [entry.id for entry in writes]

    def _limited_by(self, payloads: Sequence[bytes]) -> dict[bytes, int]:
        """Per limited prefix, how many of ``payloads`` fall under it."""
        counts: dict[bytes, int] = {}
        for prefix in self.limits:
            n = sum(1 for payload in payloads if payload.startswith(prefix))
            if n:
                counts[prefix] = n
        return counts

    async def _room_for(self, limited: dict[bytes, int], wait: float | None) -> None:
        """Return once every prefix in ``limited`` has room for its count;
        ``LimitExceeded`` if one has none after ``wait`` seconds (none: at once)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (wait or 0.0)
        while True:
            full = next(
                (p for p, n in limited.items() if self.held_count(p) + n > self.limits[p]), None
            )
            if full is None:
                return
            left = deadline - loop.time()
            if left <= 0:
                raise LimitExceeded(full, self.limits[full], retry_after=ROOM_RETRY_AFTER)
            if self._room_ended:
                raise ForumError("the node is shutting down: it no longer waits for room")
            room: asyncio.Future[None] = loop.create_future()
            self.room_waiters.append(room)
            try:
                await asyncio.wait_for(asyncio.shield(room), left)
            except TimeoutError:
                pass
            finally:
                with contextlib.suppress(ValueError):
                    self.room_waiters.remove(room)

    def end_room_waits(self) -> None:
        """End the waits for room, now and later: such a write raises
        ``ForumError``, having written nothing, instead of waiting out its ``wait``."""
        self._room_ended = True
        self.free_room()

    def free_room(self) -> None:
        """Tuples left: writers waiting for room look again."""
        waiters = self.room_waiters[:]
        self.room_waiters.clear()
        for room in waiters:
            if not room.done():
                room.set_result(None)

    def held_count(self, prefix: bytes) -> int:
        """What a limit counts: the prefix's tuples here that are live, not
        due yet, reserved, or being written here."""
        reserved = self._reservations.count(prefix)
        writing = self._limited_writing.get(prefix, 0)
        return self._index.count(prefix) + self._schedule.count(prefix) + reserved + writing

    def fill(self) -> dict[bytes, tuple[int, int]]:
        """Per limited prefix, how many tuples it holds here and its limit."""
        return {prefix: (self.held_count(prefix), limit) for prefix, limit in self.limits.items()}

    # -- pauses ------------------------------------------------------------------

    def add_pause(self, marker: Tuple) -> None:
        """A pause marker is live: its prefix (the marker's payload) is paused."""
        self.pause_markers[marker.id] = marker.payload
        self.paused.setdefault(marker.payload, set()).add(marker.id)

    def drop_pause(self, marker: EntryId) -> None:
        """A pause marker is taken (or dead): its prefix is resumed with its last marker."""
        prefix = self.pause_markers.pop(marker, None)
        if prefix is None:
            return
        markers = self.paused[prefix]
        markers.discard(marker)
        if not markers:
            del self.paused[prefix]
            self._retry_waiters()  # takers of the prefix are served again

    def is_paused(self, prefix: bytes) -> bool:
        """Whether takes of ``prefix`` are paused (it starts with a paused prefix)."""
        return any(prefix.startswith(paused) for paused in self.paused)
