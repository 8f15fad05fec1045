"""Proof of the cluster key on every replication request and response.

The cluster key is the node's ``--cluster-secret`` or, without one, its
``--token`` (:func:`forum.node.http.app.cluster_key`): a node with a token never
leaves its peer routes open, and nodes that share a token replicate.

With a key set, a request carries::

    X-Forum-Signature: t=<unix seconds>,to=<receiver>,s=<hex HMAC-SHA256>
    HMAC(key, "forum-repl-2\\n" METHOD "\\n" PATH "\\n" t "\\n" to "\\n" || body)

where ``to`` is the origin of the node the request is for, or ``*`` (anyone),
which only the read-only routes (pull, members) take. Pushes name their
receiver; pulls are signed for anyone, since a seed's origin is learned from
its first answer and a wiped node answers at the same URL under a new one.
Its answer carries ``X-Forum-Signature: s=<hex>`` with
``HMAC(key, "forum-repl-2-response\\n" request-signature "\\n" || body)``,
so a response cannot be forged either, nor replayed to another request.

The receiver checks, in this order: the signature (constant-time), the
timestamp (within ``max_clock_skew`` seconds), and that ``to`` is its own
origin, or ``*`` where the route allows it. A push must name its receiver:
replayed to another node of the cluster it is refused, so it can change
nothing there. Within the window a replayed push to its own receiver applies
entries that are already held (a no-op), and a replayed read only reads, so
there is no nonce cache. Binding the method and path stops a body signed for
one route from being sent to another. The domain (``forum-repl-2``) changes
with the format, so a node of the older format (``forum-repl-1``, which named
no receiver) and a newer one never accept each other's requests.

The node's own middleware (``forum.node.http.app``) leaves these routes to this
check (the extension lists them in ``SELF_AUTHENTICATED``), so the key itself
never crosses the wire. Without a key, nothing is signed and nothing is checked.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from forum.replication.errors import BadSignature, ClockSkewed

SIGNATURE_HEADER = "X-Forum-Signature"
#: The ``to`` of a request for whichever node answers (not an origin: origins have no ``*``).
ANYONE = "*"
_DOMAIN = b"forum-repl-2\n"
_RESPONSE_DOMAIN = b"forum-repl-2-response\n"


@dataclass(frozen=True, slots=True)
class ClusterAuth:
    """Signs and checks replication bodies with the cluster ``key`` (``None``: open cluster)."""

    key: str | None
    max_clock_skew: float = 60.0
    clock: Callable[[], float] = field(default=time.time, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.key is not None and not self.key:
            raise ValueError("a cluster key must not be empty")

    def sign_request(self, method: str, path: str, body: bytes, to: str = ANYONE) -> dict[str, str]:
        """The headers proving a request for the node of origin ``to``; empty without a key."""
        if self.key is None:
            return {}
        stamp = str(int(self.clock()))
        mac = _request_mac(self.key, body, method=method, path=path, stamp=stamp, to=to)
        return {SIGNATURE_HEADER: f"t={stamp},to={to},s={mac}"}

    def verify_request(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        me: str,
        anyone: bool = False,
    ) -> str:
        """Check a request's proof, for the node of origin ``me`` (or ``*`` if ``anyone``).

        Returns its signature (to sign the answer with); ``BadSignature`` if it
        is missing, wrong or for another node, ``ClockSkewed`` if it is good
        but outside the clock window.
        """
        if self.key is None:
            return ""
        parts = _parse(headers.get(SIGNATURE_HEADER, ""))
        stamp, to, given = parts.get("t", ""), parts.get("to", ""), parts.get("s", "")
        if not stamp.isdigit() or not to or not given:
            raise BadSignature(f"missing or malformed {SIGNATURE_HEADER} header")
        expected = _request_mac(self.key, body, method=method, path=path, stamp=stamp, to=to)
        if not _same(given, expected):
            raise BadSignature("signature does not match the cluster key")
        offset = int(stamp) - self.clock()
        if abs(offset) > self.max_clock_skew:
            # The signature is good, so its time is the sender's: say how far off.
            raise ClockSkewed(
                f"signature timestamp {offset:+.0f} s from this node's clock, outside "
                f"the allowed clock skew ({self.max_clock_skew:g} s)",
                offset=offset,
                signature=given,
            )
        if to == ANYONE and not anyone:
            raise BadSignature(f"this request must name its receiver ({me}), not anyone")
        if to not in (me, ANYONE):
            raise BadSignature(f"this request was signed for node {to}, not this one ({me})")
        return given

    def sign_response(self, request_signature: str, body: bytes) -> dict[str, str]:
        if self.key is None:
            return {}
        return {SIGNATURE_HEADER: f"s={_response_mac(self.key, request_signature, body)}"}

    def verify_response(
        self, request_headers: Mapping[str, str], headers: Mapping[str, str], body: bytes
    ) -> None:
        """Check the answer to a request that was sent with ``request_headers``."""
        if self.key is None:
            return
        request_signature = _parse(request_headers[SIGNATURE_HEADER])["s"]
        given = _parse(headers.get(SIGNATURE_HEADER, "")).get("s", "")
        expected = _response_mac(self.key, request_signature, body)
        if not given or not _same(given, expected):
            raise BadSignature("the peer's answer is not signed with the cluster key")


def _request_mac(key: str, body: bytes, *, method: str, path: str, stamp: str, to: str) -> str:
    head = f"{method.upper()}\n{path}\n{stamp}\n{to}\n".encode()
    return _mac(key, _DOMAIN + head, body)


def _response_mac(key: str, request_signature: str, body: bytes) -> str:
    return _mac(key, _RESPONSE_DOMAIN + request_signature.encode() + b"\n", body)


def _mac(key: str, head: bytes, body: bytes) -> str:
    mac = hmac.new(key.encode(), head, hashlib.sha256)
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
