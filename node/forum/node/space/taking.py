"""Takes made here: tuples out of the index while their Take is made durable.

A take removes its tuples from the index first, then appends their Takes;
once the append is durable the tuples are the caller's. If the append fails
they are put back in their old places and the error is raised, so the index
never claims a take the log does not hold. A caller cancelled while the
append is under way has not received the tuples: if the Take holds, they
are written back as new tuples (unless the caller already has them, as an
ack's does), else put back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from forum.node.core.entries import EntryId, Properties, Take, Tuple
from forum.node.core.errors import ForumError
from forum.node.space.admission import Admission, Durable
from forum.node.space.kept_properties import KeptProperties
from forum.node.space.listeners import LOCAL, Listeners
from forum.node.space.surfacing import Found
from forum.node.storage.strand import Strand

log = logging.getLogger(__name__)


class Takes:
    """The takes under way here: ``taking``, the ids whose Take is being
    appended; ``killed_while_taking``, those a peer's Take killed meanwhile
    (not to be put back); ``settling``, the ends of takes whose caller was
    cancelled; and ``made``, how many Takes were made here. The Forum passes
    what a take touches: the lapses and kept properties it forgets, the room
    it frees, ``put_live`` (a tuple back in the index at its arrival),
    ``expired_now`` and ``tell_expired`` (a tuple that expired meanwhile is
    not put back), and its callback for durable writes (a write-back)."""

    __slots__ = (
        "_admission",
        "_durable",
        "_expired_now",
        "_lapses",
        "_listeners",
        "_props",
        "_put_live",
        "_strand",
        "_tell_expired",
        "killed_while_taking",
        "made",
        "settling",
        "taking",
    )

    def __init__(
        self,
        *,
        strand: Strand,
        listeners: Listeners,
        admission: Admission,
        props: KeptProperties,
        lapses: dict[EntryId, int],
        durable: Durable,
        put_live: Callable[[int, Tuple], None],
        expired_now: Callable[[EntryId], bool],
        tell_expired: Callable[[list[Tuple]], None],
    ) -> None:
        self._strand = strand
        self._listeners = listeners
        self._admission = admission
        self._props = props
        self._lapses = lapses
        self._durable = durable
        self._put_live = put_live
        self._expired_now = expired_now
        self._tell_expired = tell_expired
        self.taking: set[EntryId] = set()
        self.killed_while_taking: set[EntryId] = set()
        self.settling: set[asyncio.Task[None]] = set()
        self.made = 0

    async def commit(self, found: list[Found], *, rescue: bool = True) -> list[Tuple]:
        """Make the Takes of tuples already out of the index durable.

        A caller cancelled while its append is under way has not received the
        tuples. With ``rescue`` they are written back (as new tuples) if the
        Take holds, rather than lost. An ack passes ``rescue=False``: its
        caller already has the tuple (and a claim on it); a copy under a new
        id, and so a new claim key, would run the job a second time.
        """
        self.taking.update(item.id for _, item in found)
        append = self._strand.submit_takes([item.id for _, item in found])
        try:
            takes = await asyncio.shield(append)
        except asyncio.CancelledError:
            # The append goes on; _settle deals with how it ends.
            settle = asyncio.create_task(self._settle(append, found, rescue))
            self.settling.add(settle)
            settle.add_done_callback(self.settling.discard)
            raise
        except BaseException:
            self._put_back(found)
            raise
        self._done(found, takes)
        return [item for _, item in found]

    async def _settle(
        self, append: asyncio.Future[list[Take]], found: list[Found], rescue: bool
    ) -> None:
        """The end of a take whose caller was cancelled: restore the tuples if
        the append failed; if it held, write them back when ``rescue``."""
        try:
            takes = await append
        except Exception:
            self._put_back(found)
            return
        self._done(found, takes)
        if not rescue:
            return
        log.warning("a take was cancelled after it was durable: writing %d back", len(found))
        by_props: dict[Properties, list[bytes]] = {}
        for _, item in found:  # each written back with its Write's properties
            by_props.setdefault(item.props, []).append(item.payload)
        try:
            for props, payloads in by_props.items():
                await self._strand.submit_writes(payloads, self._durable, props)
        except ForumError:
            log.exception("could not write back %d tuples of a cancelled take", len(found))

    def _put_back(self, found: list[Found]) -> None:
        expired: list[Tuple] = []
        for arrival, item in found:
            self.taking.discard(item.id)
            if item.id in self.killed_while_taking:
                self.killed_while_taking.discard(item.id)
                continue
            if self._props and self._expired_now(item.id):
                self._props.forget(item.id)
                expired.append(item)  # expired while it was being taken
                continue
            self._put_live(arrival, item)
        if expired:
            self._tell_expired(expired)

    def _done(self, found: list[Found], takes: list[Take]) -> None:
        """The ``takes`` of ``found`` are durable: the tuples are dead here,
        counted, and told to the listeners."""
        for _, item in found:
            self.taking.discard(item.id)
            self.killed_while_taking.discard(item.id)
            self._lapses.pop(item.id, None)
            if self._props:
                self._props.forget(item.id)
        if self._admission.room_waiters:
            self._admission.free_room()
        self.made += len(takes)
        self._listeners.notify(takes, LOCAL, [item for _, item in found])
