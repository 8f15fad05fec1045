"""An in-memory :class:`forum.coordinator.authority.ClaimAuthority`, for tests.

:class:`MemoryAuthority` keeps in one process what the Lens keeps in Redis
(claims, fencing tokens, done markers, in-flight records, attempts records;
forum.coordinator.keys)
and answers as the Lens does, outcome for outcome:
``tests/coordinator/test_authority_contract.py`` runs the same tests against
both. It lets worker logic be tested in milliseconds, and it can fail on
purpose as Redis does:

* ``available = False``: every call raises :class:`LensUnavailable` (an
  outage) until it is set back;
* :meth:`MemoryAuthority.forget`: the state is gone (a ``FLUSHALL``, a restart
  without persistence); the next call raises :class:`LensStateLost`, counted
  once in ``state_losses``, and the one after works. Tokens still rise.

Time is ``clock()`` (``time.monotonic`` unless given), for leases and due
times alike: a test may pass a clock it moves by hand.

Not for production: nothing is shared between processes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from forum.coordinator import keys
from forum.coordinator.authority import Failed, Grab, HeldClaim
from forum.coordinator.claim import CANCELLED, GONE, GONE_BEFORE_COMPLETION, Claim
from forum.coordinator.errors import (
    AlreadyClaimed,
    AlreadyDone,
    AttemptsSpent,
    ClaimLost,
    LensError,
    LensStateLost,
    LensUnavailable,
    NotDue,
)
from forum.coordinator.jobindex import JobCounts, JobFound, JobQuery, MemoryJobIndex
from forum.coordinator.limits import Ask
from forum.coordinator.records import (
    CancelOutcome,
    FieldValue,
    HistoryEvent,
    Holder,
    KeyState,
    NewRecord,
    ScanKind,
    attempts_of,
    checked_ttl,
    encode_fields,
    with_live_claim,
)
from forum.node.config.node import FORGET_AFTER

#: The fields a fenced record replacing an older one keeps (lua/record.lua).
_CARRIED = frozenset({"args", "enqueued", "ix"})


@dataclass(slots=True)
class _Record:
    """An in-flight record (``<tag>:job:<key>``), due for re-offer at ``due``."""

    token: int
    payload: bytes | None
    due: float
    grab: str | None = None
    handed: int | None = None
    owner: str = ""
    attempt: int = 0


@dataclass(slots=True)
class _Held:
    """A live claim (``<tag>:claim:<key>`` and what its record says of it)."""

    token: int
    owner: str
    deadline: float
    attempt: int
    #: When it was granted, Unix seconds.
    since: float


@dataclass(frozen=True, slots=True)
class _Attempts:
    """A job's attempts record (``<tag>:attempts:<key>``, lua/release.lua):
    the next attempt's number, when it is due (``None``: buried), the dead
    letter the job was requeued from, and when the record expires."""

    next: int
    due: float | None
    revived: str
    expires: float


@dataclass(slots=True)
class _Expiring:
    """A job record or a history (``<tag>:task:<key>``, ``<tag>:history:<key>``)
    and when, by ``clock()``, it expires."""

    expires: float
    fields: dict[str, bytes] = field(default_factory=dict)
    events: list[HistoryEvent] = field(default_factory=list)


class MemoryAuthority:
    """Claims on keys, in this process's memory (see the module docstring)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        reaper_lease: float = keys.REAPER_LEASE,
        retention: float = FORGET_AFTER + keys.DONE_MARGIN,
        history_ttl: float = keys.HISTORY_TTL,
    ) -> None:
        self.clock = clock
        #: A claim's :attr:`Claim.margin` is at most this (``keys.SAFETY_MARGIN``).
        self.safety_margin = keys.SAFETY_MARGIN
        self.reaper_lease = reaper_lease
        #: How long a done marker lasts (the Lens's ``LensConfig.retention``).
        self.retention = retention
        #: How long a history lasts after its last event; 0: none is kept
        #: (the Lens's ``history_ttl``).
        self.history_ttl = history_ttl
        #: False: every call raises LensUnavailable, as while Redis is down.
        self.available = True
        self._fence = 0
        self._claims: dict[str, _Held] = {}
        #: Done markers: key -> (token, when it expires by ``clock()``).
        self._done: dict[str, tuple[int, float]] = {}
        self._records: dict[str, _Record] = {}
        self._tasks: dict[str, _Expiring] = {}
        self._histories: dict[str, _Expiring] = {}
        self._attempts: dict[str, _Attempts] = {}
        #: Limits (forum.coordinator.limits): each running bound's members and
        #: their expiries, and each rate's next turn, by ``clock()``.
        self._running: dict[str, dict[str, float]] = {}
        self._turns: dict[str, float] = {}
        self._forgotten = False
        self._state_losses = 0
        #: The job index (forum.coordinator.jobindex), moved where the scripts move it.
        self._index = MemoryJobIndex(self._fields_of)

    @property
    def state_losses(self) -> int:
        return self._state_losses

    def forget(self) -> None:
        """Lose every claim, done marker and in-flight record, as a Redis
        that was flushed; the fence is kept, as the Lens's clock-based tokens
        stay above every earlier one."""
        self._claims.clear()
        self._done.clear()
        self._records.clear()
        self._tasks.clear()
        self._histories.clear()
        self._attempts.clear()
        self._running.clear()
        self._turns.clear()
        self._forgotten = True

    async def ping(self) -> None:
        if not self.available:
            raise LensUnavailable("the memory authority is unavailable")

    async def claim(
        self,
        key: str,
        owner: str,
        lease: float,
        *,
        reoffer: bytes | None = None,
        attempt: int = 1,
        revived: str | None = None,
    ) -> Claim:
        (outcome,) = await self.claim_many([(key, reoffer)], owner, lease, [attempt], [revived])
        if isinstance(outcome, LensError):
            raise outcome
        return outcome

    async def claim_many(
        self,
        requests: Sequence[tuple[str, bytes | None]],
        owner: str,
        lease: float,
        attempts: Sequence[int] | None = None,
        revived: Sequence[str | None] | None = None,
    ) -> list[Claim | LensError]:
        for key, _ in requests:
            if not key:
                raise ValueError("a claim key must not be empty")
        if lease <= 0:
            raise ValueError("lease must be positive")
        numbers = attempts_of(len(requests), attempts)
        lives = [None] * len(requests) if revived is None else revived
        self._enter()
        return [
            self._claim(key, owner, lease, reoffer, attempt=attempt, revived=life or "")
            for (key, reoffer), attempt, life in zip(requests, numbers, lives, strict=True)
        ]

    async def extend_many(self, claims: Sequence[HeldClaim]) -> list[ClaimLost | None]:
        own = [self._own(claim) for claim in claims]
        self._enter()
        return [c.lost() or self._extend(c, c.lease) for c in own]

    async def admit_many(self, asks: Sequence[Ask], lease: float) -> list[tuple[float, bool]]:
        """As the Lens's (lua/admit.lua): all of an ask's limits or none."""
        self._enter()
        return [self._admit(ask, lease) for ask in asks]

    def _admit(self, ask: Ask, lease: float) -> tuple[float, bool]:
        now = self.clock()
        full = turn = 0.0
        for limit in ask.limits:
            if limit.running is not None:
                held = self._running.setdefault(limit.name, {})
                for member in [m for m, expiry in held.items() if expiry <= now]:
                    del held[member]
                if ask.member not in held and len(held) >= limit.running:
                    full = max(full, min(held.values()) - now, 0.001)
            if limit.rate is not None:
                early = self._turns.get(limit.name, now) - 0.5 / limit.rate - now
                turn = max(turn, early)
        if full or turn > 0:
            return max(full, turn), not full
        for limit in ask.limits:
            if limit.running is not None:
                self._running[limit.name][ask.member] = now + lease
            if limit.rate is not None:
                last = max(self._turns.get(limit.name, now), now)
                self._turns[limit.name] = last + 1 / limit.rate
        return 0.0, False

    async def extend_admitted(self, asks: Sequence[Ask], lease: float) -> list[bool]:
        self._enter()
        now, kept = self.clock(), []
        for ask in asks:
            bounds = [self._running.get(limit.name, {}) for limit in ask.limits if limit.running]
            kept.append(all(bound.get(ask.member, now) > now for bound in bounds))
            for bound in bounds if kept[-1] else ():
                bound[ask.member] = now + lease
        return kept

    async def release_admitted(self, asks: Sequence[Ask]) -> None:
        self._enter()
        for ask in asks:
            for limit in ask.limits:
                self._running.get(limit.name, {}).pop(ask.member, None)

    async def complete_many(self, claims: Sequence[HeldClaim]) -> list[ClaimLost | None]:
        own = [self._own(claim) for claim in claims]
        self._enter()
        return [c.lost() or self._complete(c) for c in own]

    async def done_token(self, key: str) -> int | None:
        self._enter()
        return self._done_token(key)

    async def due(self, limit: int = 100) -> list[str]:
        self._enter()
        now = self.clock()
        due = sorted((r.due, key) for key, r in self._records.items() if r.due <= now)
        return [key for _, key in due[:limit]]

    async def grab(self, key: str) -> Grab | None:
        self._enter()
        record = self._records.get(key)
        now = self.clock()
        if record is None or record.due > now:
            return None
        held = self._live(key)
        if held is not None:
            record.due = held.deadline  # due when that claim's lease ends
            return None
        if self._done_token(key) is not None or record.payload is None:
            del self._records[key]
            return None
        record.grab = uuid.uuid4().hex
        record.due = now + self.reaper_lease
        return Grab(key=key, grab_id=record.grab, payload=record.payload)

    async def reaped(self, grab: Grab) -> bool:
        self._enter()
        record = self._records.get(grab.key)
        if record is None or record.grab != grab.grab_id or self._live(grab.key) is not None:
            return False
        del self._records[grab.key]
        if (self._index.settled(grab.key) or ("",))[0] != "dead":
            self._index.move(grab.key, "queued", time.time())
        self._push(grab.key, HistoryEvent(time.time(), "reoffered", record.handed or 0,
                                          record.owner, record.attempt))  # fmt: skip
        return True

    # -- what is known about a key (forum.coordinator.records) --------------------------------

    async def inspect(self, key: str) -> KeyState:
        self._enter()
        held = self._live(key)
        holder = None
        if held is not None:
            remaining = max(0.0, held.deadline - self.clock())
            holder = Holder(held.token, held.owner, held.attempt, held.since, remaining)
        record = self._kept(self._tasks, key)
        fields = dict(record.fields) if record else {}
        return KeyState(key, holder, self._done_token(key), fields)

    async def record(self, claim: HeldClaim, fields: Mapping[str, FieldValue], ttl: float) -> None:
        own = self._own(claim)
        own.check_open()
        pairs = encode_fields(fields, fenced=True)
        expires = self.clock() + checked_ttl(ttl)
        self._enter()
        if not self._holds(own):
            own.end(GONE)
            raise ClaimLost(own.key, own.token, f"{GONE}: its record was not written")
        record = self._kept(self._tasks, own.key)
        kept = record.fields.get("token") if record is not None else None
        if record is None or (kept is not None and int(kept) < own.token):
            carried = {k: v for k, v in (record.fields if record else {}).items() if k in _CARRIED}
            record = self._tasks[own.key] = _Expiring(expires, carried)
        record.fields.update(pairs, token=str(own.token).encode())
        record.expires = expires
        said = record.fields.get("state")
        if said in (b"done", b"dead"):
            self._index.move(own.key, said.decode(), time.time())
        elif said == b"retrying":
            self._index.move(own.key, "retrying", float(record.fields.get("due", b"0")))

    async def record_enqueued(self, key: str, fields: Mapping[str, FieldValue], ttl: float) -> bool:
        if not key:
            raise ValueError("a claim key must not be empty")
        pairs = encode_fields(fields, fenced=False)
        expires = self.clock() + checked_ttl(ttl)
        self._enter()
        record = self._kept(self._tasks, key)
        if record is None:
            self._tasks[key] = _Expiring(expires, dict(pairs))
        else:  # a worker's came first: its fields stay, the producer's are added (producer_late)
            for name, value in dict(pairs).items():
                if name in ("args", "enqueued"):
                    record.fields.setdefault(name, value)
            if "ix" in record.fields:
                return False
        running = self._live(key) is not None
        self._index.enqueued(key, done=self._done_token(key) is not None, running=running)
        return record is None

    async def record_enqueued_many(self, records: Sequence[NewRecord]) -> list[bool]:
        for new in records:  # all checked before any is written, as the Lens does
            if not new.key:
                raise ValueError("a claim key must not be empty")
            encode_fields(new.fields, fenced=False)
            checked_ttl(new.ttl)
        return [await self.record_enqueued(new.key, new.fields, new.ttl) for new in records]

    async def inspect_many(self, keys: Sequence[str]) -> list[KeyState]:
        return [await self.inspect(key) for key in keys]

    async def forget_record(self, key: str) -> bool:
        if not key:
            raise ValueError("a claim key must not be empty")
        self._enter()
        if self._live(key) is not None:
            raise AlreadyClaimed(key, None)
        found = self._kept(self._tasks, key) is not None
        self._index.move(key, None, 0)
        self._tasks.pop(key, None)
        return found

    async def job_counts(self) -> JobCounts:
        self._enter()
        return self._index.counts()

    async def find_jobs(self, query: JobQuery) -> JobFound:
        self._enter()
        return await self._index.find(query)

    async def requeued(self, key: str) -> bool:
        self._enter()
        return self._index.requeued(key)

    async def history(self, key: str) -> list[HistoryEvent]:
        self._enter()
        kept = self._kept(self._histories, key)
        held = self._live(key)
        live = None if held is None else Holder(held.token, held.owner, held.attempt, held.since, 0)
        return with_live_claim(list(kept.events) if kept else [], live, keys.HISTORY_LENGTH)

    async def scan(self, kind: ScanKind, count: int = 100) -> AsyncIterator[str]:
        if kind not in ("task", "claim"):
            raise ValueError(f"scan lists 'task' or 'claim' keys, not {kind!r}")
        if count < 1:
            raise ValueError("count must be at least 1")
        self._enter()
        if kind == "task":
            found = [key for key in self._tasks if self._kept(self._tasks, key) is not None]
        else:
            found = [key for key in self._claims if self._live(key) is not None]
        for key in found:
            yield key

    async def cancel(self, key: str) -> CancelOutcome:
        if not key:
            raise ValueError("a claim key must not be empty")
        self._enter()
        done = self._done_token(key)
        if done is not None:
            return CancelOutcome("done", token=done)
        held = self._live(key)
        if held is None:
            self._expired(key)
        else:  # retired, as cancel.lua retires it: its holder is refused from now on
            del self._claims[key]
        self._fence += 1
        self._done[key] = (self._fence, self.clock() + self.retention)
        record = self._kept(self._tasks, key)
        if record is None:
            record = self._tasks[key] = _Expiring(self.clock() + self.retention)
        record.fields["cancelled"] = str(self._fence).encode()
        self._index.move(key, "cancelled", time.time())
        if held is None:
            self._push(key, HistoryEvent(time.time(), "cancelled", self._fence, "", 0))
            return CancelOutcome("cancelled", token=self._fence)
        self._push(
            key,
            HistoryEvent(held.since, "claimed", held.token, held.owner, held.attempt),
            HistoryEvent(time.time(), "cancelled", self._fence, held.owner, held.attempt),
        )
        return CancelOutcome("cancelled", token=self._fence, owner=held.owner or None)

    async def cancelled_many(self, claims: Sequence[HeldClaim]) -> list[bool]:
        own = [self._own(claim) for claim in claims]
        self._enter()
        for claim in own:
            done = self._done_token(claim.key)
            record = self._kept(self._tasks, claim.key)
            cancel = record.fields.get("cancelled") if record is not None else None
            by_cancel = done is not None and cancel == str(done).encode()
            if by_cancel and done != claim.token and not self._holds(claim):
                claim.refused(CANCELLED)
        return [claim.ended == CANCELLED for claim in own]

    async def durability(self) -> list[str]:
        """Nothing to warn of: this authority promises nothing beyond its process."""
        self._enter()
        return []

    # -- a Claim's operations (forum.coordinator.claim, ClaimIssuer) ---------------------

    async def verify_claim(self, claim: Claim) -> None:
        self._enter()
        if not self._holds(claim):
            raise claim.refused()

    async def extend_claim(self, claim: Claim, lease: float) -> None:
        self._enter()
        lost = self._extend(claim, lease)
        if lost is not None:
            raise lost

    async def complete_claim(self, claim: Claim) -> None:
        self._enter()
        lost = self._complete(claim)
        if lost is not None:
            raise lost

    async def release_claim(self, claim: Claim, failed: Failed | None) -> None:
        self._enter()
        self._end(claim, "released")
        if failed is None:
            self._index.move(claim.key, "queued", time.time())
        else:
            now = self.clock()
            due = None if failed.delay is None else now + failed.delay
            self._attempts[claim.key] = _Attempts(
                claim.attempt + 1, due, failed.revived or "", now + self.retention
            )
            if failed.delay is None:
                self._index.move(claim.key, "dead", time.time())
            else:
                self._index.move(claim.key, "retrying", time.time() + failed.delay)

    async def hand_back_claim(self, claim: Claim, payload: bytes, delay: float) -> None:
        self._enter()
        held = self._live(claim.key)
        attempt = held.attempt if held is not None else 0
        self._end(claim, "handed back")
        self._records[claim.key] = _Record(
            claim.token, payload, self.clock() + delay, handed=claim.token,
            owner=claim.owner, attempt=attempt,
        )  # fmt: skip
        self._index.move(claim.key, *(self._index.settled(claim.key)
                                      or ("queued", time.time() + delay)))  # fmt: skip

    # -- the state, as the Lua scripts change it -----------------------------------------

    def _enter(self) -> None:
        """What every call meets first: an outage, or a state loss (once)."""
        if not self.available:
            raise LensUnavailable("the memory authority is unavailable")
        if self._forgotten:
            self._forgotten = False
            self._state_losses += 1
            raise LensStateLost("memory", "before", None)

    def _live(self, key: str) -> _Held | None:
        """The live claim on ``key``. One whose lease ran out is kept (as the
        Lens keeps its in-flight record) until the next claim or cancel
        ends it in the history (:meth:`_expired`)."""
        held = self._claims.get(key)
        if held is not None and held.deadline <= self.clock():
            return None
        return held

    def _expired(self, key: str) -> None:
        """End the claim on ``key`` whose lease ran out, if there is one."""
        held = self._claims.pop(key, None)
        if held is not None:
            self._ended(key, held, "expired")

    def _ended(self, key: str, held: _Held, event: str) -> None:
        """Push a claim's "claimed" and its end, as ended() in lua/prelude.lua."""
        self._push(
            key,
            HistoryEvent(held.since, "claimed", held.token, held.owner, held.attempt),
            HistoryEvent(time.time(), event, held.token, held.owner, held.attempt),
        )

    def _holds(self, claim: Claim) -> bool:
        held = self._live(claim.key)
        return held is not None and held.token == claim.token

    def _kept(self, kept: dict[str, _Expiring], key: str) -> _Expiring | None:
        """``kept[key]`` unless it expired (then it is dropped)."""
        found = kept.get(key)
        if found is not None and found.expires <= self.clock():
            del kept[key]
            return None
        return found

    def _done_token(self, key: str) -> int | None:
        """The token of ``key``'s done marker unless it expired (then it is dropped)."""
        found = self._done.get(key)
        if found is not None and found[1] <= self.clock():
            del self._done[key]
            return None
        return None if found is None else found[0]

    def _push(self, key: str, *events: HistoryEvent) -> None:
        """Append to ``key``'s history, as push_history() in lua/prelude.lua
        (nothing with ``history_ttl`` 0)."""
        if not self.history_ttl:
            return
        history = self._kept(self._histories, key)
        if history is None:
            history = self._histories[key] = _Expiring(0.0)
        history.events += events
        del history.events[: -keys.HISTORY_LENGTH]
        history.expires = self.clock() + self.history_ttl

    def _claim(
        self, key: str, owner: str, lease: float, reoffer: bytes | None, *, attempt: int,
        revived: str,
    ) -> Claim | LensError:  # fmt: skip
        """As lua/claim.lua: the attempt counted is the largest of the one
        asked for, the attempts record's next, and a lapsed holder's + 1."""
        done = self._done_token(key)
        if done is not None:
            return AlreadyDone(key, done)
        tries = self._attempts.get(key)
        if tries is not None and tries.expires <= self.clock():
            del self._attempts[key]
            tries = None
        renewed = tries is not None and tries.due is None and revived not in ("", tries.revived)
        if tries is not None and not renewed:
            if tries.due is None:
                return AttemptsSpent(key, tries.next - 1)
            if tries.due > self.clock():
                return NotDue(key, tries.due - self.clock(), tries.next)
            attempt = max(attempt, tries.next)
        held = self._live(key)
        if held is not None:
            return AlreadyClaimed(key, held.owner or None, max(0.0, held.deadline - self.clock()))
        lapsed = self._claims.get(key)
        if lapsed is not None:
            attempt = max(attempt, lapsed.attempt + 1)
        if renewed:
            del self._attempts[key]
        self._expired(key)
        self._fence += 1
        deadline = self.clock() + lease
        granted = Claim(
            self, key=key, owner=owner, token=self._fence, lease=lease, deadline=deadline,
            attempt=attempt, lapsed=lapsed is not None,
        )  # fmt: skip
        self._claims[key] = _Held(granted.token, owner, deadline, attempt, time.time())
        self._index.move(key, "running", time.time())
        if reoffer is None:
            self._records.pop(key, None)
        else:
            self._records[key] = _Record(
                granted.token, reoffer, deadline, owner=owner, attempt=attempt
            )
        return granted

    def _extend(self, claim: Claim, lease: float) -> ClaimLost | None:
        if not self._holds(claim):
            return claim.refused()
        deadline = self.clock() + lease
        claim.renew(lease, deadline)
        self._claims[claim.key].deadline = deadline
        record = self._records.get(claim.key)
        if record is not None:
            record.due = deadline
        return None

    def _complete(self, claim: Claim) -> ClaimLost | None:
        if not self._holds(claim):
            return claim.refused(GONE_BEFORE_COMPLETION)
        held = self._claims.pop(claim.key)
        self._records.pop(claim.key, None)
        self._attempts.pop(claim.key, None)
        self._done[claim.key] = (claim.token, self.clock() + self.retention)
        ended = self._index.settled(claim.key)
        self._index.move(claim.key, "dead" if ended and ended[0] == "dead" else "done", time.time())
        claim.end("completed")
        self._ended(claim.key, held, "completed")
        return None

    def _end(self, claim: Claim, how: str) -> None:
        """Release ``claim``'s key (its record goes too); ``ClaimLost`` if it
        does not hold it."""
        if not self._holds(claim):
            raise claim.refused()
        held = self._claims.pop(claim.key)
        self._records.pop(claim.key, None)
        claim.end(how)
        self._ended(claim.key, held, "released" if how == "released" else "handed_back")

    def _fields_of(self, key: str) -> dict[str, bytes] | None:
        """``key``'s job record's fields while it lives (the index's view)."""
        record = self._kept(self._tasks, key)
        return None if record is None else record.fields

    def _own(self, claim: HeldClaim) -> Claim:
        if not isinstance(claim, Claim) or not claim.granted_by(self):
            raise TypeError(f"{claim!r} was not granted by this authority")
        return claim
