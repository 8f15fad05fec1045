"""Repair from peers: a node whose data directory was damaged rebuilds what it lost.

``forum serve --repair`` opens a damaged directory anyway (the Strand sets
the damaged files aside and says what it found, :class:`forum.node.storage.damage.Damage`)
and, before the node listens to clients, runs :meth:`Repair.run` with its
peers. What a lost file held is of three kinds, and each comes back its own way:

- **its own entries** (its writes, its takes): the seqs of its origin it
  no longer holds (:meth:`forum.node.storage.strand.Strand.missing_own`). Peers hold
  them, and the node's rounds pull them like any entries it lacks: a
  damaged node takes in an entry of its own origin at or below the highest
  seq it ever issued (``own_seq_floor``) that it does not hold. It never
  blames a peer as forged for holding them (:meth:`Replicator._check`).
  Peers' vectors may show it issued more than the directory says (the
  tail of the last segment): the Strand reserves up to that, so no own seq
  is ever issued twice with other bytes.
- **other origins' entries**: the lost seqs are gaps in its vector; every
  peer's page fills them.
- **what was dead**: a Take that lay in a lost file leaves its target live
  here. If a peer holds the Take, it comes back with the entries above and
  kills the target again; if the peers dropped it by compaction, the
  target's seq is in their dead ranges, so each peer is *rechecked* (every
  seq held here at or below what the peer holds is served again, and its
  dead ranges kill the stale copies: :meth:`~forum.replication.antientropy.Syncer.recheck`).
  Nothing taken comes back; the node does not serve clients until then.

A pass with a peer is one round (:meth:`Syncer.sync`) and one recheck. The
repair ends once every peer known has given its pass, or, after
``repair_wait`` seconds (``FORUM_REPL_REPAIR_WAIT``), once at least one has
(the rest are reported as not reached; the node's rounds with them go on as
usual). Own seqs that no
peer had are reported; when every member known answered, those that no
peer's vector shows it holds (past a gap of its own) are lost for good and
recorded dead (peers then pass them, instead of waiting for ever for a gap
in this origin). Alone (no peers), a node repairs nothing and says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from forum.node.space.forum import Forum
from forum.replication.errors import BadMessage, BadSignature, PeerError
from forum.replication.membership import Membership, Peer
from forum.replication.messages import SeqRange
from forum.replication.vector import size, subtract, union

log = logging.getLogger(__name__)

#: Seconds between two tries of a peer that did not answer.
_RETRY = 0.5
#: Seconds between two "still waiting" lines.
_SAY_EVERY = 10.0

#: ``pass_with(peer)``: one repair pass with a peer (a round and a recheck).
PassWith = Callable[[Peer], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What a repair found and did (``/v1/status``'s ``repair``)."""

    #: ``repairing`` while it runs, then ``repaired`` (every own seq back),
    #: ``incomplete`` (some never came back), or ``alone`` (no peer to ask).
    state: str
    #: The damage the Strand found (one line) and the files it set aside.
    damage: str
    set_aside: tuple[str, ...] = ()
    #: Entries taken in from peers while repairing, and of them the node's own.
    recovered: int = 0
    recovered_own: int = 0
    #: Own seqs the directory lacked that came back (as entries, or as seqs
    #: a peer dropped by compaction: dead for good, and known so now).
    own_found: int = 0
    #: Seqs of the node's own origin no peer had: ``[first, last]`` ranges.
    missing_own: tuple[SeqRange, ...] = ()
    #: Of those, the ones recorded dead: every member known answered and no
    #: peer's vector holds them (the rest a peer holds past a gap of its own,
    #: or a peer not reached may hold: they stay missing).
    recorded_dead: tuple[SeqRange, ...] = ()
    #: The peers that gave their pass, and those that did not answer (with why).
    peers_repaired_from: tuple[str, ...] = ()
    peers_not_reached: dict[str, str] = field(default_factory=dict)
    #: Seconds the repair took.
    seconds: float = 0.0

    def to_document(self) -> dict[str, Any]:
        document = asdict(self)
        document["missing_own"] = [list(r) for r in self.missing_own]
        document["recorded_dead"] = [list(r) for r in self.recorded_dead]
        document["set_aside"] = list(self.set_aside)
        document["peers_repaired_from"] = list(self.peers_repaired_from)
        return document


class Repair:
    """One repair of a damaged node from its peers (see the module docstring)."""

    def __init__(self, forum: Forum, membership: Membership, pass_with: PassWith) -> None:
        self._forum = forum
        self._membership = membership
        self._pass_with = pass_with
        damage = forum.strand.damage
        self.report = RepairReport(
            state="repairing",
            damage=damage.description if damage is not None else "",
            set_aside=tuple(str(p) for p in damage.set_aside) if damage is not None else (),
        )
        self.recovered = 0
        self.recovered_own = 0
        self._missing_before = size(forum.strand.missing_own())

    @property
    def running(self) -> bool:
        return self.report.state == "repairing"

    def count(self, origin: str, entries: int) -> None:
        """Entries of ``origin`` taken in while repairing."""
        self.recovered += entries
        if origin == self._forum.strand.origin:
            self.recovered_own += entries

    async def run(self, wait: float) -> RepairReport:
        """Pass with every peer known, or after ``wait`` seconds with those
        that answered (at least one); the report."""
        strand = self._forum.strand
        loop_time = asyncio.get_running_loop().time
        begun = said = loop_time()
        log.warning(
            "repair: %s; own seqs missing: %s; fetching them from peers",
            self.report.damage or "the data directory",
            _ranges(strand.missing_own()),
        )
        done: list[str] = []
        failed: dict[str, str] = {}
        while True:
            peers = [p for p in self._membership.peers() if p.url not in done]
            for peer in peers:
                try:
                    await self._pass_with(peer)
                except (PeerError, BadMessage, BadSignature, TimeoutError) as exc:
                    failed[peer.url] = str(exc) or type(exc).__name__
                else:
                    done.append(peer.url)
                    failed.pop(peer.url, None)
                    log.info("repair: pass with %s done", peer.url)
            remaining = [p.url for p in self._membership.peers() if p.url not in done]
            if not remaining or (done and loop_time() - begun >= wait):
                break
            if loop_time() - said >= _SAY_EVERY:
                said = loop_time()
                log.warning(
                    "repair: waiting for %d peer(s) to answer (%s)",
                    len(remaining),
                    "; ".join(f"{url}: {failed.get(url, 'no answer yet')}" for url in remaining),
                )
            await asyncio.sleep(_RETRY)
        return await self._finish(done, {u: failed.get(u, "no answer") for u in remaining}, begun)

    async def _finish(
        self, done: list[str], unreached: dict[str, str], begun: float
    ) -> RepairReport:
        strand = self._forum.strand
        missing = strand.missing_own()
        found = max(0, self._missing_before - size(missing))
        # What a peer holds past a gap of its own is not served (a page holds
        # only the gap-free prefix), but its vector lists it: not lost.
        held: list[SeqRange] = []
        for peer in self._membership.peers():
            held = union(held, peer.vector.held(strand.origin))
        lost = subtract(missing, held)
        if lost and done and not unreached:
            # Every member known answered and none holds them: lost for good.
            await self._forum.apply_dead(strand.origin, lost)
        recorded = tuple(lost) if done and not unreached else ()
        alone = not done and not unreached
        state = "alone" if alone else "incomplete" if missing else "repaired"
        self.report = RepairReport(
            state=state,
            damage=self.report.damage,
            set_aside=self.report.set_aside,
            recovered=self.recovered,
            recovered_own=self.recovered_own,
            own_found=found,
            missing_own=tuple(missing),
            recorded_dead=recorded,
            peers_repaired_from=tuple(done),
            peers_not_reached=unreached,
            seconds=round(asyncio.get_running_loop().time() - begun, 3),
        )
        say = log.warning if missing or unreached else log.info
        say(
            "repair: %s: %d entries recovered from %d peer(s) (%d of this node's own); "
            "%d of %d own seqs lost found again (held, or dropped by the peers); "
            "own seqs no peer had: %s%s%s",
            state,
            self.recovered,
            len(done),
            self.recovered_own,
            found,
            self._missing_before,
            _ranges(missing),
            f" (recorded dead, lost for good: {_ranges(recorded)})" if recorded else "",
            f"; not reached: {', '.join(unreached)}" if unreached else "",
        )
        return self.report


def _ranges(ranges: Sequence[SeqRange]) -> str:
    if not ranges:
        return "none"
    shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:10])
    return shown + (f" and {len(ranges) - 10} more ranges" if len(ranges) > 10 else "")
