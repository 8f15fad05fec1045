"""Who hears what a Forum does: entries made durable, tuples live, taken, expired.

Every entry made durable here, local or applied, is handed to the listeners
(replication), with the :class:`Provenance` its applier gave (``LOCAL`` for
entries made here): who holds them already is an argument, not ambient
state, so a listener that sends entries on can see whom not to send them
back to. A listener that raises is logged and the others are still called.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from forum.node.core.entries import Entry, Tuple

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where entries given to ``Forum.apply`` came from, as the caller says;
    the Forum passes it to the listeners untouched.

    ``held_by``: the origins of the nodes that hold the entries already (or get
    them without our help), which a listener sending entries on skips;
    ``None``: every node does, so they go to nobody.
    """

    held_by: frozenset[str] | None = frozenset()


#: Entries made here (or applied with no word on where they came from): held nowhere else.
LOCAL = Provenance()
#: ``listener(entries, provenance)``, called with entries once they are durable here.
Listener = Callable[[Sequence[Entry], Provenance], None]
#: Called with each tuple as it becomes live (written here, surfaced after
#: the remote delay, put back): what a waiting reader wants to hear about.
LiveListener = Callable[[Tuple], None]
#: Called with the tuples that expired here (their ttl ran out), as they do.
ExpiryListener = Callable[[Sequence[Tuple]], None]
#: ``listener(entries, taken)``: the entries a :data:`Listener` gets, with the
#: tuples their Takes removed here (a watcher filters a Take by its target's
#: payload, which the Take does not carry). A Take whose target was not here
#: (taken before its Write arrived, taken twice) has none.
TakeListener = Callable[[Sequence[Entry], Sequence[Tuple]], None]


class Listeners:
    """The listeners of one Forum, by what they hear: ``entries``
    (:data:`Listener`), ``takes`` (:data:`TakeListener`), ``live``
    (:data:`LiveListener`, which the Forum calls itself as it offers a tuple
    to its waiters) and ``expiry`` (:data:`ExpiryListener`)."""

    __slots__ = ("entries", "expiry", "live", "takes")

    def __init__(self) -> None:
        self.entries: list[Listener] = []
        self.takes: list[TakeListener] = []
        self.live: list[LiveListener] = []
        self.expiry: list[ExpiryListener] = []

    def notify(
        self, entries: Sequence[Entry], provenance: Provenance, taken: Sequence[Tuple] = ()
    ) -> None:
        """Entries are durable here; ``taken``: the tuples their Takes removed here."""
        for listener in self.entries:
            try:
                listener(entries, provenance)
            except Exception:
                log.exception("a Forum listener failed")
        for take_listener in self.takes:
            try:
                take_listener(entries, taken)
            except Exception:
                log.exception("a Forum take listener failed")

    def expired(self, expired: Sequence[Tuple]) -> None:
        """Tuples expired here."""
        for listener in self.expiry:
            try:
                listener(expired)
            except Exception:
                log.exception("a Forum expiry listener failed")
