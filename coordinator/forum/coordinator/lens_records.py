"""What the Lens knows about a key (forum.coordinator.records), read and
written: job records, the claim history, inspection, listing, cancelling.
:class:`LensRecords` is the part of :class:`forum.coordinator.lens.Lens`
that does not grant claims."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from forum.coordinator import keys
from forum.coordinator.authority import HeldClaim
from forum.coordinator.claim import GONE
from forum.coordinator.connection import LensConnection
from forum.coordinator.errors import AlreadyClaimed, ClaimLost
from forum.coordinator.records import (
    CancelOutcome,
    Holder,
    KeyState,
    checked_ttl,
    encode_fields,
    pack_fields,
    pack_records,
    parse_event,
    with_live_claim,
)
from forum.coordinator.scripts import Call, ms

if TYPE_CHECKING:
    from forum.coordinator.records import FieldValue, HistoryEvent, NewRecord, ScanKind

_CANCELLED = 1


class LensRecords(LensConnection):
    """Job records, histories and the state of keys, in the Lens's Redis."""

    async def done_token(self, key: str) -> int | None:
        """The token that completed ``key``, or ``None`` if it has no done marker."""
        value = await self._call(self._redis.get(self._keys.done(key)))
        return None if value is None else int(value)

    async def inspect(self, key: str) -> KeyState:
        """``key``'s live claim, done marker and job record, read at once."""
        return _key_state(key, await self._run("inspect", key))

    async def inspect_many(self, keys: Sequence[str]) -> list[KeyState]:
        """:meth:`inspect` of each of ``keys``, in order, in one round trip
        (a listing's page); each key read at once, the keys one after another."""
        if not keys:
            return []
        replies = await self._send([self._keyed("inspect", key, ()) for key in keys])
        return [_key_state(key, reply) for key, reply in zip(keys, replies, strict=True)]

    async def record(self, claim: HeldClaim, fields: Mapping[str, FieldValue], ttl: float) -> None:
        """Write ``fields`` into ``claim``'s key's job record, for ``ttl``
        seconds from now, only while ``claim`` is the key's live claim;
        :class:`ClaimLost` (nothing written) otherwise. Field ``token`` is
        set to the claim's; fields not given are kept, unless the record was
        written under an older token (an earlier attempt's): then it is
        replaced as a whole."""
        own = self._own(claim)
        own.check_open()
        packed = pack_fields(encode_fields(fields, fenced=True))
        if not await self._run("record", own.key, own.token, ms(checked_ttl(ttl)), packed):
            own.end(GONE)
            raise ClaimLost(own.key, own.token, f"{GONE}: its record was not written")

    async def record_enqueued(self, key: str, fields: Mapping[str, FieldValue], ttl: float) -> bool:
        """Write ``key``'s first job record (a producer's, unfenced), for
        ``ttl`` seconds; ``False`` (nothing written) if it has one already."""
        if not key:
            raise ValueError("a claim key must not be empty")
        packed = pack_fields(encode_fields(fields, fenced=False))
        return bool(await self._run("record_new", key, ms(checked_ttl(ttl)), packed))

    async def record_enqueued_many(self, records: Sequence[NewRecord]) -> list[bool]:
        """:meth:`record_enqueued` of each record, in order: one script per
        shard (its keys share the shard's hash tag), all in one round trip;
        ``False`` for a key that had a record (or came earlier in the batch).
        Bad input (as :meth:`record_enqueued` refuses) writes none of them."""
        shards: dict[int, list[int]] = {}
        packed = []
        for i, new in enumerate(records):
            if not new.key:
                raise ValueError("a claim key must not be empty")
            packed.append((ms(checked_ttl(new.ttl)), encode_fields(new.fields, fenced=False)))
            shards.setdefault(self._keys.shard(new.key), []).append(i)
        if not records:
            return []
        calls = [
            Call("record_new_many", shard, None, (pack_records([packed[i] for i in batch]),),
                 keys=tuple(records[i].key for i in batch))
            for shard, batch in shards.items()
        ]  # fmt: skip
        written = [False] * len(records)
        for batch, replies in zip(shards.values(), await self._send(calls), strict=True):
            for i, reply in zip(batch, replies, strict=True):
                written[i] = bool(reply)
        return written

    async def forget_record(self, key: str) -> bool:
        """Drop ``key``'s job record (an operator's purge): ``True`` dropped,
        ``False`` there was none. Unfenced, so it refuses while a claim on
        the key is live (:class:`AlreadyClaimed`): the holder's record is
        its own to write, and a job someone runs is not forgotten."""
        if not key:
            raise ValueError("a claim key must not be empty")
        reply = int(await self._run("record_forget", key))
        if reply < 0:
            raise AlreadyClaimed(key, None)
        return bool(reply)

    async def history(self, key: str) -> list[HistoryEvent]:
        """``key``'s claim history, oldest first: the last
        ``keys.HISTORY_LENGTH`` events, kept ``history_ttl`` after the last (none when 0),
        and the live claim's "claimed" (forum.coordinator.records). One round trip;
        the claim is read before the list, so a claim that ends between the
        two reads is in the list (and counted once)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(self._keys.claim(key))
            pipe.hmget(self._keys.job(key), "token", "owner", "attempt", "since")
            pipe.lrange(self._keys.history(key), 0, -1)
            token, (held, owner, attempt, since), lines = await self._call(pipe.execute())
        live = None
        if token is not None and token == held:
            name = (owner or b"").decode(errors="replace")
            live = Holder(int(token), name, int(attempt or 0), int(since or 0) / 1000, 0.0)
        events = [parse_event(bytes(line)) for line in lines]
        return with_live_claim(events, live, keys.HISTORY_LENGTH)

    async def scan(self, kind: ScanKind, count: int = 100) -> AsyncIterator[str]:
        """Every claim key with a job record (``"task"``) or a live claim
        (``"claim"``), in no order, each once, from every shard and, under
        Cluster, every master: ``SCAN`` in steps of about ``count`` keys,
        never ``KEYS``, so Redis serves others meanwhile. A key written or
        dropped during the scan may be listed or not."""
        if kind not in ("task", "claim"):
            raise ValueError(f"scan lists 'task' or 'claim' keys, not {kind!r}")
        if count < 1:
            raise ValueError("count must be at least 1")
        found = self._redis.scan_iter(match=self._keys.scan_pattern(kind), count=count)
        seen: set[str] = set()
        while True:
            try:
                name = await self._call(anext(found))
            except StopAsyncIteration:
                return
            key = self._keys.claim_key_of(bytes(name).decode(errors="replace"), kind)
            if key is not None and key not in seen:
                seen.add(key)
                yield key

    async def cancel(self, key: str) -> CancelOutcome:
        """Make ``key`` done (a done marker with a fresh token turns every
        copy of its job away as :class:`AlreadyDone`, and ``cancelled`` is
        pushed to its history), retiring the fencing token of the claim that
        holds it, if one does (its ``owner`` is said): that holder's every
        call is refused from now on (``ClaimLost``). ``"done"`` if it was
        already (cancel.lua)."""
        if not key:
            raise ValueError("a claim key must not be empty")
        reply = await self._run("cancel", key, self._done_ms, self._history_ms)
        if int(reply[0]) == _CANCELLED:
            token = int(reply[1])
            self._highest_token = max(self._highest_token, token)
            owner = bytes(reply[2]).decode(errors="replace") or None
            return CancelOutcome("cancelled", token=token, owner=owner)
        return CancelOutcome("done", token=int(reply[1]))


def _key_state(key: str, reply: Any) -> KeyState:
    """inspect.lua's reply about ``key`` as a :class:`KeyState`."""
    token, pttl, job, done, record = reply
    holder = None
    if token is not None:
        held = _hash(job)
        holder = Holder(
            token=int(token),
            owner=held.get("owner", b"").decode(errors="replace"),
            # 0: a claim by a worker of an older version, which kept no attempt.
            attempt=int(held.get("attempt", b"0")),
            since=int(held.get("since", b"0")) / 1000,
            remaining=max(int(pttl), 0) / 1000,
        )
    return KeyState(key, holder, None if done is None else int(done), _hash(record))


def _hash(flat: Sequence[Any]) -> dict[str, bytes]:
    """A script's ``HGETALL`` reply (field, value, ...) as a mapping."""
    return {
        bytes(flat[i]).decode(errors="replace"): bytes(flat[i + 1]) for i in range(0, len(flat), 2)
    }
