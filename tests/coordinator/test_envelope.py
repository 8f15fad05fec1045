"""The job trailer: what travels with a job between deliveries."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forum.coordinator.deadletter import DeadLetter, bury
from forum.coordinator.envelope import MAGIC, Envelope
from forum.node.core.entries import EntryId, Tuple

envelopes = st.builds(
    Envelope,
    payload=st.binary(max_size=200),
    key=st.none() | st.text(min_size=1, max_size=40),
    attempt=st.integers(min_value=1, max_value=10**6),
    error=st.none() | st.text(max_size=100),
)


@given(envelopes)
def test_seal_then_open_is_the_identity(envelope: Envelope) -> None:
    assert Envelope.open(envelope.seal()) == envelope


@given(envelopes)
def test_a_sealed_job_still_starts_with_its_payload(envelope: Envelope) -> None:
    assert envelope.seal().startswith(envelope.payload)


@given(st.binary(max_size=300))
def test_plain_bytes_are_a_first_delivery(data: bytes) -> None:
    opened = Envelope.open(data)
    if not data.endswith(MAGIC):
        assert opened == Envelope(data)


@pytest.mark.parametrize(
    "data",
    [
        b"job/x" + MAGIC,  # too short a trailer
        b"job/x" + b"\xff\xff\xff\xff" + MAGIC,  # length beyond the data
        b"job/x" + b"\xc1" + b"\x00\x00\x00\x01" + MAGIC,  # not msgpack
        b"job/x" + msgpack.packb([1, 2]) + b"\x00\x00\x00\x03" + MAGIC,  # not a map
        b"job/"
        + msgpack.packb({"key": "k", "attempt": 0, "error": None})
        + b"\x00\x00\x00\x17"
        + MAGIC,  # attempt 0
    ],
)
def test_a_payload_that_merely_ends_in_the_magic_is_plain(data: bytes) -> None:
    assert Envelope.open(data) == Envelope(data)


def test_next_attempt_and_failed() -> None:
    first = Envelope(b"job/1", key="a:1")
    second = first.next_attempt("boom")
    assert (second.attempt, second.error, second.key) == (2, "boom", "a:1")
    # A retry keeps MAX_ERROR characters; a dead letter (failed) up to 16 KiB.
    assert second.next_attempt("x" * 5000).error == "x" * 2000
    assert second.failed("x" * 5000).error == "x" * 5000
    with pytest.raises(ValueError):
        Envelope(b"job/1", attempt=0)


def test_dead_letters_keep_the_key_and_revive_from_attempt_one() -> None:
    sealed = bury(Envelope(b"job/1", key="a:1", attempt=5, error="boom"))
    letter = DeadLetter.parse(Tuple(EntryId("n", 9), sealed))
    assert letter.payload == b"job/1" and letter.envelope.error == "boom"
    revived = Envelope(b"job/1", key="a:1", attempt=1, revived="n:9")
    assert Envelope.open(letter.revived()) == revived
    with pytest.raises(ValueError):
        DeadLetter.parse(Tuple(EntryId("n", 9), b"job/1"))


def test_a_retrys_not_before_travels_in_the_trailer() -> None:
    envelope = Envelope(b"job/x", key="k").next_attempt("boom", not_before=1_800_000_000.5)
    again = Envelope.open(envelope.seal())
    assert again == envelope and again.attempt == 2
    assert again.due_in(1_800_000_000.0) == 0.5 and again.due_in(1_900_000_000.0) == 0.0


def test_a_trailer_without_not_before_is_the_old_format() -> None:
    """Old and new workers read each other's tuples: no not_before, no new field."""
    sealed = Envelope(b"job/x", key="k", attempt=2, error="e").seal()
    assert b"not_before" not in sealed and b"revived" not in sealed
    assert Envelope.open(sealed).not_before is None
    assert Envelope(b"p").due_in(0.0) == 0.0


def test_not_before_must_be_a_finite_time() -> None:
    with pytest.raises(ValueError, match="not_before"):
        Envelope(b"p", not_before=float("nan"))
