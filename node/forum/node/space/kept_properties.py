"""The Properties the Forum keeps beside the live index, by entry id.

The index keeps a tuple's priority alone (in its key); a tuple whose Write
has more (a due time, an expiry, a key) has its Properties kept here until
it is dead, to hand it out with them and to expire it. They are kept per
origin, by seq: an int key rather than the :class:`~forum.node.core.entries.EntryId`,
whose hash is a Python call (a frozen dataclass's) and which, kept as a
key, would be an object per tuple for the cyclic collector to walk; the
Properties are shared by a burst of writes (``write_properties``).
"""

from __future__ import annotations

from forum.node.core.entries import EntryId, Properties


class KeptProperties(dict[str, dict[int, Properties]]):
    """Per origin, seq -> Properties; an origin with none kept has no entry,
    so the table is empty (false) exactly when no tuple keeps any: a dict
    rather than an object holding one, so that test is the dict's own (the
    Forum makes it on every take, to skip the lookups when nothing is kept)."""

    __slots__ = ()

    def of(self, entry_id: EntryId) -> Properties | None:
        """The Properties kept for ``entry_id``, if any."""
        lane = self.get(entry_id.origin)
        return None if lane is None else lane.get(entry_id.seq)

    def keep(self, entry_id: EntryId, props: Properties) -> None:
        lane = self.get(entry_id.origin)
        if lane is None:
            lane = self[entry_id.origin] = {}
        lane[entry_id.seq] = props

    def forget(self, entry_id: EntryId) -> Properties | None:
        """Stop keeping ``entry_id``'s Properties; them, or ``None`` if none were kept."""
        lane = self.get(entry_id.origin)
        if lane is None:
            return None
        props = lane.pop(entry_id.seq, None)
        if not lane:
            del self[entry_id.origin]
        return props
