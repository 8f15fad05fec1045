"""The producer's background records (tasks/forum/tasks/enqueued.py): batched into one
Lens call per flush, none lost, against a real Lens on a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from forum.coordinator import Lens
from forum.coordinator.records import NewRecord
from forum.tasks.enqueued import EnqueuedRecords


class Counting(Lens):
    """A real Lens that keeps the size of each ``record_enqueued_many`` call."""

    calls: list[int]

    async def record_enqueued_many(self, records: Sequence[NewRecord]) -> list[bool]:
        self.calls.append(len(records))
        return await super().record_enqueued_many(records)


async def test_background_records_go_in_batches_and_every_one_is_written(redis_url: str) -> None:
    async with Counting.from_url(redis_url) as lens:
        lens.calls = []
        records = EnqueuedRecords(lens)
        keys = [f"job-{i}" for i in range(300)]
        # t0: 300 enqueues note their records at once: the first starts the
        # writer, which finds them all queued (up to a batch each call).
        await asyncio.gather(
            *(records.note(key, {"task": "t"}, 60, background=True) for key in keys)
        )
        # t1: more while that batch may be in flight: they go in a later one.
        for key in ("late-1", "late-2"):
            await records.note(key, {"task": "t"}, 60, background=True)
        await records.aclose()
        states = await lens.inspect_many([*keys, "late-1", "late-2"])
    # "ix": the job index's state (forum.coordinator.jobindex): queued.
    assert all(state.record == {"task": b"t", "ix": b"queued"} for state in states)
    assert sum(lens.calls) == 302
    assert len(lens.calls) < 10, lens.calls


async def test_a_record_written_now_is_there_when_note_returns(redis_url: str) -> None:
    async with Lens.from_url(redis_url) as lens:
        records = EnqueuedRecords(lens)
        await records.note("now", {"task": "t", "due": 1.5}, 60, background=False)
        assert (await lens.inspect("now")).record == {"task": b"t", "due": b"1.5", "ix": b"queued"}
        await records.aclose()
