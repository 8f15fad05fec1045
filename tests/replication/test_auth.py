"""Proof of the cluster key: HMAC over method, path, time, receiver and body."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from forum.replication.auth import ANYONE, SIGNATURE_HEADER, ClusterAuth
from forum.replication.errors import BadSignature

PATH = "/v1/cluster/replication/push"
#: The receiver's origin.
ME = "node-b-1"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_signed_request_verifies_and_its_answer_too() -> None:
    auth = ClusterAuth("s3cret")
    headers = auth.sign_request("POST", PATH, b"body", to=ME)
    signature = auth.verify_request("POST", PATH, headers, b"body", me=ME)
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
    headers = ClusterAuth(secret).sign_request("POST", PATH, b"body", to=ME)
    with pytest.raises(BadSignature):
        ClusterAuth("s3cret").verify_request(method, path, headers, body, me=ME)


def test_a_request_is_for_the_node_it_names() -> None:
    auth = ClusterAuth("s3cret")
    headers = auth.sign_request("POST", PATH, b"body", to=ME)
    with pytest.raises(BadSignature, match=f"signed for node {ME}, not this one"):
        auth.verify_request("POST", PATH, headers, b"body", me="node-c-1", anyone=True)
    # The receiver is signed too: naming another one breaks the signature.
    forged = {SIGNATURE_HEADER: headers[SIGNATURE_HEADER].replace(f"to={ME}", "to=node-c-1")}
    with pytest.raises(BadSignature, match="does not match"):
        auth.verify_request("POST", PATH, forged, b"body", me="node-c-1")


def test_a_request_for_anyone_is_taken_only_where_the_route_allows_it() -> None:
    auth = ClusterAuth("s3cret")
    headers = auth.sign_request("POST", PATH, b"body")
    assert f"to={ANYONE}," in headers[SIGNATURE_HEADER]
    auth.verify_request("POST", PATH, headers, b"body", me=ME, anyone=True)
    with pytest.raises(BadSignature, match="must name its receiver"):
        auth.verify_request("POST", PATH, headers, b"body", me=ME)


def test_the_older_format_does_not_verify() -> None:
    """A ``forum-repl-1`` signature (no receiver) is refused: old and new never mix."""
    clock = Clock(1_000_000)
    stamp = "1000000"
    head = f"forum-repl-1\nPOST\n{PATH}\n{stamp}\n".encode()
    old = hmac.new(b"s3cret", head + b"body", hashlib.sha256).hexdigest()
    auth = ClusterAuth("s3cret", clock=clock)
    for header in (f"t={stamp},s={old}", f"t={stamp},to={ME},s={old}"):
        with pytest.raises(BadSignature):
            auth.verify_request("POST", PATH, {SIGNATURE_HEADER: header}, b"body", me=ME)


@pytest.mark.parametrize(
    "header",
    ["", "t=1", "s=abc", "t=x,s=abc", "t=1000,to=x,s=\u00e9\u00e9", "t=1000,s=abc", "garbage"],
)
def test_missing_or_malformed_signatures_fail(header: str) -> None:
    auth = ClusterAuth("s3cret", clock=Clock(1000))
    with pytest.raises(BadSignature):
        auth.verify_request("POST", PATH, {SIGNATURE_HEADER: header}, b"", me=ME)


def test_stale_signatures_fail() -> None:
    clock = Clock(1_000_000)
    auth = ClusterAuth("s3cret", max_clock_skew=60, clock=clock)
    headers = auth.sign_request("POST", PATH, b"", to=ME)
    clock.now += 61
    with pytest.raises(BadSignature):
        auth.verify_request("POST", PATH, headers, b"", me=ME)


def test_an_answer_is_bound_to_its_request() -> None:
    auth = ClusterAuth("s3cret")
    first = auth.sign_request("POST", PATH, b"one", to=ME)
    second = auth.sign_request("POST", PATH, b"two", to=ME)
    answer = auth.sign_response(auth.verify_request("POST", PATH, first, b"one", me=ME), b"ok")
    with pytest.raises(BadSignature):
        auth.verify_response(second, answer, b"ok")
    with pytest.raises(BadSignature):
        auth.verify_response(first, answer, b"forged")
    with pytest.raises(BadSignature):
        auth.verify_response(first, {}, b"ok")


def test_without_a_secret_nothing_is_signed_or_checked() -> None:
    auth = ClusterAuth(None)
    assert auth.sign_request("POST", PATH, b"") == {}
    assert auth.verify_request("POST", PATH, {}, b"", me=ME) == ""
    auth.verify_response({}, {}, b"")
