"""One client-error base for the node client and replication's transport, one retriable rule."""

from __future__ import annotations

import json

import pytest

from forum.node.core.errors import (
    ClientError,
    ForumError,
    NodeRejected,
    NodeTimeout,
    NodeUnavailable,
    error_body,
)
from forum.replication.errors import (
    PeerError,
    PeerIsSelf,
    PeerRejected,
    PeerTimeout,
    PeerUnavailable,
    ReplicationError,
    Unauthenticated,
)


@pytest.mark.parametrize(
    ("status", "retriable"),
    [(400, False), (401, False), (404, False), (409, False), (413, False), (429, True),
     (500, True), (503, True)],
)  # fmt: skip
def test_a_rejection_is_retriable_by_one_rule_in_both_clients(status: int, retriable: bool) -> None:
    assert NodeRejected("http://n:1", status, "code", "text").retriable is retriable
    assert PeerRejected("http://n:1", status, "text").retriable is retriable


def test_peer_errors_are_client_errors_and_stay_replication_errors() -> None:
    """``except ClientError`` (or ``NodeUnavailable``) catches a failed call from
    either client; ``except ReplicationError`` still catches replication's."""
    unavailable, timeout = PeerUnavailable("http://p:1", "refused"), PeerTimeout("http://p:1", "t")
    for error in (unavailable, timeout, PeerRejected("http://p:1", 500, "x")):
        assert isinstance(error, PeerError) and isinstance(error, ReplicationError)
        assert isinstance(error, ClientError) and isinstance(error, ForumError)
        assert error.peer == error.node == "http://p:1"
        assert str(error).startswith("http://p:1: ")
    assert isinstance(unavailable, NodeUnavailable) and unavailable.retriable
    assert isinstance(timeout, NodeTimeout) and isinstance(timeout, TimeoutError)
    assert not Unauthenticated("http://p:1", "no").retriable
    assert not PeerIsSelf("http://p:1", "me").retriable


def test_an_error_body_is_read_the_same_for_both_clients() -> None:
    node_answer = json.dumps({"error": "invalid_parameter", "message": "limit"}).encode()
    assert error_body(400, node_answer) == ("invalid_parameter", "limit")
    assert error_body(502, b"<html>Bad Gateway</html>") == ("http_502", "<html>Bad Gateway</html>")
    assert error_body(500, b'{"message": "m"}') == ("http_500", "m")
    assert error_body(500, b"[1, 2]") == ("http_500", "[1, 2]")
