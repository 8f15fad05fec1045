"""Dedup at write: the keys of this node's recent writes, each with its window.

A write with a ``key`` and a ``dedup_window`` (``Forum.write``) records the
key here until its window closes (``Properties.dedup_until``, wall clock);
another write with that key on this node meanwhile answers with the first
write's id and writes nothing, as SQS's deduplication id and NATS's
``Msg-Id`` do. Whether the first tuple is still live does not matter: the
window is about writes, not about what became of them.

The table is per node, by design: during a partition two nodes each accept
a write with one key, and both tuples exist (docs/scheduling.md says how
the Lens, whose claim key is the same key, still runs the job once). It is
rebuilt at start from the node's own Writes in the Strand, so a restart
keeps every open window; compaction keeps those Writes while their window
is open (:meth:`ids`).
"""

from __future__ import annotations

import heapq

from node.entries import EntryId


class DedupTable:
    """Key -> (the write's id, until when), for this node's writes."""

    def __init__(self) -> None:
        self._by_key: dict[bytes, tuple[EntryId, int]] = {}
        self._closing: list[tuple[int, bytes]] = []  # (until, key), a heap

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: bytes, now: int) -> EntryId | None:
        """The id of the write with ``key`` whose window is open at ``now``."""
        self._purge(now)
        found = self._by_key.get(key)
        return None if found is None or found[1] <= now else found[0]

    def add(self, key: bytes, entry_id: EntryId, until: int) -> None:
        """Record a write with ``key``, its window open until ``until`` (ms)."""
        known = self._by_key.get(key)
        if known is None or known[1] < until:
            self._by_key[key] = (entry_id, until)
            heapq.heappush(self._closing, (until, key))

    def ids(self) -> list[EntryId]:
        """The ids of the writes whose windows may be open."""
        return [entry_id for entry_id, _ in self._by_key.values()]

    def _purge(self, now: int) -> None:
        closing = self._closing
        while closing and closing[0][0] <= now:
            until, key = heapq.heappop(closing)
            known = self._by_key.get(key)
            if known is not None and known[1] == until:
                del self._by_key[key]
