"""Proof of the cluster secret: HMAC over method, path, time and body."""

from __future__ import annotations

import pytest

from replication.auth import SIGNATURE_HEADER, ClusterAuth
from replication.errors import BadSignature

PATH = "/v1/cluster/replication/push"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_signed_request_verifies_and_its_answer_too() -> None:
    auth = ClusterAuth("s3cret")
    headers = auth.sign_request("POST", PATH, b"body")
    signature = auth.verify_request("POST", PATH, headers, b"body")
    answer = auth.sign_response(signature, b"answer")
    auth.verify_response(headers, answer, b"answer")


@pytest.mark.parametrize(
    ("method", "path", "body", "secret"),
    [
        ("POST", PATH, b"tampered", "s3cret"),
        ("GET", PATH, b"body", "s3cret"),
        ("POST", "/v1/cluster/replication/pull", b"body", "s3cret"),
        ("POST", PATH, b"body", "other"),
    ],
)
def test_anything_changed_fails(method: str, path: str, body: bytes, secret: str) -> None:
    headers = ClusterAuth(secret).sign_request("POST", PATH, b"body")
    with pytest.raises(BadSignature):
        ClusterAuth("s3cret").verify_request(method, path, headers, body)


@pytest.mark.parametrize(
    "header", ["", "t=1", "s=abc", "t=x,s=abc", "t=1000,s=\u00e9\u00e9", "garbage"]
)
def test_missing_or_malformed_signatures_fail(header: str) -> None:
    auth = ClusterAuth("s3cret", clock=Clock(1000))
    with pytest.raises(BadSignature):
        auth.verify_request("POST", PATH, {SIGNATURE_HEADER: header}, b"")


def test_stale_signatures_fail() -> None:
    clock = Clock(1_000_000)
    auth = ClusterAuth("s3cret", max_clock_skew=60, clock=clock)
    headers = auth.sign_request("POST", PATH, b"")
    clock.now += 61
    with pytest.raises(BadSignature):
        auth.verify_request("POST", PATH, headers, b"")


def test_an_answer_is_bound_to_its_request() -> None:
    auth = ClusterAuth("s3cret")
    first = auth.sign_request("POST", PATH, b"one")
    second = auth.sign_request("POST", PATH, b"two")
    answer = auth.sign_response(auth.verify_request("POST", PATH, first, b"one"), b"ok")
    with pytest.raises(BadSignature):
        auth.verify_response(second, answer, b"ok")
    with pytest.raises(BadSignature):
        auth.verify_response(first, answer, b"forged")
    with pytest.raises(BadSignature):
        auth.verify_response(first, {}, b"ok")


def test_without_a_secret_nothing_is_signed_or_checked() -> None:
    auth = ClusterAuth(None)
    assert auth.sign_request("POST", PATH, b"") == {}
    assert auth.verify_request("POST", PATH, {}, b"") == ""
    auth.verify_response({}, {}, b"")
