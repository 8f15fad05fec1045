"""Proof of the cluster secret on every replication request and response.

With a secret set, a request carries::

    X-Forum-Signature: t=<unix seconds>,s=<hex HMAC-SHA256>
    HMAC(secret, "forum-repl-1\\n" METHOD "\\n" PATH "\\n" t "\\n" || body)

and its answer carries ``X-Forum-Signature: s=<hex>`` with
``HMAC(secret, "forum-repl-1-response\\n" request-signature "\\n" || body)``,
so a response cannot be forged either, nor replayed to another request.

Signatures are compared in constant time. The node's own middleware
(``node.web_app``) leaves these routes to this check (the extension lists
them in ``SELF_AUTHENTICATED``), so the secret itself never crosses the wire.

The timestamp bounds a replay to ``max_clock_skew`` seconds; there is no
nonce cache because nothing a replay could do matters: a replayed push
applies entries that are already held (a no-op), a replayed pull only reads.
Binding the method and path stops a body signed for one route from being
sent to another.

Without a secret, nothing is signed and nothing is checked.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from replication.errors import BadSignature

SIGNATURE_HEADER = "X-Forum-Signature"
_DOMAIN = b"forum-repl-1\n"
_RESPONSE_DOMAIN = b"forum-repl-1-response\n"


@dataclass(frozen=True, slots=True)
class ClusterAuth:
    """Signs and checks replication bodies with ``secret`` (``None``: open cluster)."""

    secret: str | None
    max_clock_skew: float = 60.0
    clock: Callable[[], float] = field(default=time.time, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.secret is not None and not self.secret:
            raise ValueError("a cluster secret must not be empty")

    @property
    def enabled(self) -> bool:
        return self.secret is not None

    def sign_request(self, method: str, path: str, body: bytes) -> dict[str, str]:
        """The headers proving a request; empty when there is no secret."""
        if self.secret is None:
            return {}
        stamp = str(int(self.clock()))
        mac = _request_mac(self.secret, method, path, stamp, body)
        return {SIGNATURE_HEADER: f"t={stamp},s={mac}"}

    def verify_request(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> str:
        """Check a request's proof; returns its signature (to sign the answer with).

        ``BadSignature`` if it is missing, wrong or outside the clock window.
        """
        if self.secret is None:
            return ""
        parts = _parse(headers.get(SIGNATURE_HEADER, ""))
        stamp, given = parts.get("t", ""), parts.get("s", "")
        if not stamp.isdigit() or not given:
            raise BadSignature(f"missing or malformed {SIGNATURE_HEADER} header")
        if abs(self.clock() - int(stamp)) > self.max_clock_skew:
            raise BadSignature("signature timestamp outside the allowed clock skew")
        if not _same(given, _request_mac(self.secret, method, path, stamp, body)):
            raise BadSignature("signature does not match the cluster secret")
        return given

    def sign_response(self, request_signature: str, body: bytes) -> dict[str, str]:
        if self.secret is None:
            return {}
        return {SIGNATURE_HEADER: f"s={_response_mac(self.secret, request_signature, body)}"}

    def verify_response(
        self, request_headers: Mapping[str, str], headers: Mapping[str, str], body: bytes
    ) -> None:
        """Check the answer to a request that was sent with ``request_headers``."""
        if self.secret is None:
            return
        request_signature = _parse(request_headers[SIGNATURE_HEADER])["s"]
        given = _parse(headers.get(SIGNATURE_HEADER, "")).get("s", "")
        expected = _response_mac(self.secret, request_signature, body)
        if not given or not _same(given, expected):
            raise BadSignature("the peer's answer is not signed with the cluster secret")


def _request_mac(secret: str, method: str, path: str, stamp: str, body: bytes) -> str:
    head = f"{method.upper()}\n{path}\n{stamp}\n".encode()
    return _mac(secret, _DOMAIN + head, body)


def _response_mac(secret: str, request_signature: str, body: bytes) -> str:
    return _mac(secret, _RESPONSE_DOMAIN + request_signature.encode() + b"\n", body)


def _mac(secret: str, head: bytes, body: bytes) -> str:
    mac = hmac.new(secret.encode(), head, hashlib.sha256)
    mac.update(body)
    return mac.hexdigest()


def _same(given: str, expected: str) -> bool:
    # Bytes, not str: compare_digest refuses non-ASCII text, and a header may hold any.
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _parse(header: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if sep:
            parts[key] = value
    return parts
