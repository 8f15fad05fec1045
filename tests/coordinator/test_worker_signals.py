"""What a handler's signals make the worker do: :class:`RetryAfter` (retry
after the handler's delay, past ``max_attempts``) and :class:`GiveUp` (bury
now, keeping a long error's tail), on an in-process Forum and the in-memory
authority (its contract with the Lens: test_authority_contract.py)."""

from __future__ import annotations

import time

import pytest

from forum.coordinator import DeadLetter, GiveUp, Job, RetryAfter
from forum.coordinator.envelope import MAX_DEAD_ERROR, MAX_ERROR, Envelope
from forum.coordinator.memory import MemoryAuthority
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from tests.coordinator.harness import eventually, running
from tests.coordinator.test_worker import JOBS, worker


async def test_retry_after_retries_past_max_attempts_then_the_job_succeeds(
    forum: Forum, authority: MemoryAuthority
) -> None:
    attempts: list[int] = []

    async def handler(job: Job) -> None:
        attempts.append(job.attempt)
        if job.attempt < 4:
            raise RetryAfter(0, f"not yet {job.attempt}")

    await forum.write(b"job/x")
    w = worker(forum, authority, handler, max_attempts=1)
    async with running(w):
        await eventually(lambda: w.stats().done == 1)
    assert attempts == [1, 2, 3, 4]
    assert (w.stats().retried, w.stats().dead) == (3, 0)


async def test_retry_after_writes_the_next_attempt_due_after_its_delay(
    forum: Forum, authority: MemoryAuthority
) -> None:
    async def handler(job: Job) -> None:
        raise RetryAfter(600, "rate limited")

    await forum.write(b"job/x")
    w = worker(forum, authority, handler, max_attempts=1)
    before = time.time()
    async with running(w):
        await eventually(lambda: w.stats().retried == 1)
    [retry] = forum.list(JOBS).tuples
    envelope = Envelope.open(retry.payload)
    assert (envelope.attempt, envelope.error) == (2, "rate limited")
    assert envelope.not_before is not None and envelope.not_before >= before + 600
    assert w.stats().dead == 0


async def test_give_up_buries_at_once_keeping_the_tail_of_a_long_error(
    forum: Forum, authority: MemoryAuthority
) -> None:
    error = "Traceback (most recent call last):\n" + "  frame\n" * 5000 + "ValueError: bad input"
    assert len(error) > MAX_DEAD_ERROR
    ran: list[int] = []

    async def handler(job: Job) -> None:
        ran.append(job.attempt)
        raise GiveUp(error)

    await forum.write(b"job/x")
    w = worker(forum, authority, handler, max_attempts=5)
    async with running(w):
        await eventually(lambda: w.stats().dead == 1)
    assert ran == [1]
    [dead] = forum.list(Pattern(b"dead/")).tuples
    letter = DeadLetter.parse(dead).envelope
    assert letter.error is not None and error.endswith(letter.error)
    assert len(letter.error.encode()) == MAX_DEAD_ERROR
    assert await forum.count(JOBS) == 0


def test_a_dead_letter_keeps_whole_characters_of_the_tail() -> None:
    error = "é" * MAX_DEAD_ERROR  # 2 bytes each: cut at a character boundary
    kept = Envelope(b"x").failed(error).error
    assert kept is not None and kept == "é" * (MAX_DEAD_ERROR // 2)
    assert Envelope(b"x").next_attempt("e" * 5000).error == "e" * MAX_ERROR


@pytest.mark.parametrize("delay", [-1.0, float("inf"), float("nan")])
def test_retry_after_refuses_a_delay_that_is_not_a_finite_wait(delay: float) -> None:
    with pytest.raises(ValueError, match="delay"):
        RetryAfter(delay, "x")


async def test_each_claim_records_the_attempt_of_its_delivery(
    forum: Forum, authority: MemoryAuthority
) -> None:
    seen: list[tuple[int, str]] = []
    keys: set[str] = set()

    async def handler(job: Job) -> None:
        holder = (await authority.inspect(job.key)).claim
        assert holder is not None and holder.token == job.token
        seen.append((holder.attempt, holder.owner))
        keys.add(job.key)
        if job.attempt < 3:
            raise RetryAfter(0, "again")

    await forum.write(b"job/x")
    w = worker(forum, authority, handler, max_attempts=1)
    async with running(w):
        await eventually(lambda: w.stats().done == 1)
    assert seen == [(n, w.owner) for n in (1, 2, 3)]
    [key] = keys
    history = [(event.event, event.attempt) for event in await authority.history(key)]
    assert history == [("claimed", 1), ("released", 1), ("claimed", 2), ("released", 2),
                       ("claimed", 3), ("completed", 3)]  # fmt: skip
