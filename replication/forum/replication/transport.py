"""Calling a peer: the :class:`PeerTransport` seam and its aiohttp implementation.

A call sends one msgpack body, signed for the peer's origin (or for anyone,
``*``, see :mod:`forum.replication.auth`), to a peer's replication route and
returns the (checked) answer body, or raises a :class:`PeerError`:

=============================  ===========================================
refused, reset, DNS             ``PeerUnavailable`` (retried)
no connection / answer in time  ``PeerTimeout`` (retried)
5xx, 429                        ``PeerRejected``, ``retriable`` (retried)
401                             ``Unauthenticated`` (for our clock: the peer's,
                                signed, is sampled first)
409                             ``PeerIsSelf`` (the URL leads back here)
other 4xx                       ``PeerRejected``
unsigned or oversized answer    ``BadSignature`` / ``BadMessage``
a clock stamp that is no time   ``BadMessage``
=============================  ===========================================

Every request carries our clock and every good answer the peer's
(:mod:`forum.replication.clocks`); ``clocks`` is told each answer's sample of the
peer's clock offset.

Every attempt has a connect timeout and a total timeout; retriable failures
are retried with jittered exponential backoff. A call is cancellable at any
point (shutdown): nothing is left half-done on our side, since calls only
change state here after the answer came back.

All of that but the carrying of bytes is :class:`SignedTransport`'s, shared by
:class:`HttpTransport` and :class:`~forum.replication.memory.MemoryTransport` (peers
in one process, for tests), so the two cannot answer differently.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Protocol, Self

import aiohttp

from forum.node.core.backoff import Backoff
from forum.node.core.errors import error_body
from forum.node.core.resource import AsyncResource
from forum.replication.auth import ANYONE, ClusterAuth
from forum.replication.clocks import ClockSamples, read_stamp, stamp
from forum.replication.config import ReplicationConfig
from forum.replication.errors import (
    BadMessage,
    BadSignature,
    PeerError,
    PeerIsSelf,
    PeerRejected,
    PeerTimeout,
    PeerUnavailable,
    Unauthenticated,
)

MSGPACK = "application/msgpack"
#: Room beyond a page's entry bytes for framing, vectors and member lists.
_ANSWER_SLACK = 1024 * 1024


class PeerTransport(Protocol):
    """Sends one replication request to a peer and returns the answer's body.

    ``to`` is the origin of the node the request is for (``ANYONE``: whichever answers).
    """

    async def call(
        self,
        peer: str,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        to: str = ANYONE,
        headers: Mapping[str, str] | None = None,
        attempts: int | None = None,
    ) -> bytes: ...


class SignedTransport(AsyncResource):
    """What every :class:`PeerTransport` here does around one exchange with a
    peer: sign the request, turn an error status into its ``PeerRejected``,
    check the answer's signature and size, and retry what is worth retrying.
    A subclass carries the bytes (:meth:`_exchange`)."""

    def __init__(
        self, auth: ClusterAuth, config: ReplicationConfig, clocks: ClockSamples | None = None
    ) -> None:
        self._auth = auth
        self._clocks = clocks
        self._attempts = config.attempts
        self._backoff = Backoff(config.backoff_base, config.backoff_max)
        self._max_answer = max(config.page_bytes, config.max_batch_bytes) + _ANSWER_SLACK

    async def aclose(self) -> None:
        return None

    async def call(
        self,
        peer: str,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        to: str = ANYONE,
        headers: Mapping[str, str] | None = None,
        attempts: int | None = None,
    ) -> bytes:
        """Call ``peer`` (its base URL) at ``path``, for the node of origin ``to``,
        retrying what is worth retrying, up to ``attempts`` tries (default:
        the config's). ``headers``: more to send (outside the signature, as
        the clock stamp: what a node of the previous release ignores, e.g.
        the digest of a pull)."""
        most = self._attempts if attempts is None else attempts
        attempt = 0
        while True:
            try:
                return await self._attempt(peer, method, path, body, to=to, extra=headers or {})
            except PeerError as exc:
                attempt += 1
                if not exc.retriable or attempt >= most:
                    raise
            await asyncio.sleep(self._backoff.delay(attempt))

    async def _attempt(
        self, peer: str, method: str, path: str, body: bytes, *, to: str, extra: Mapping[str, str]
    ) -> bytes:
        signed = self._auth.sign_request(method, path, body, to)
        sent = time.time()
        headers = {"Content-Type": MSGPACK, "Accept": MSGPACK, **extra} | signed | stamp(sent)
        status, answer_headers, answer = await self._exchange(peer, method, path, headers, body)
        if len(answer) > self._max_answer:
            raise BadMessage(f"{peer}: answer over {self._max_answer} bytes")
        if status == 401:
            self._refused_for_clock(peer, signed, answer_headers, answer, sent)
        if status >= 400:
            raise _rejection(peer, status, answer)
        self._auth.verify_response(signed, answer_headers, answer)
        theirs = read_stamp(answer_headers)
        if theirs is not None and self._clocks is not None:
            # Their clock when they answered, against the middle of our round trip.
            self._clocks.sample(peer, theirs - (sent + time.time()) / 2)
        return answer

    def _refused_for_clock(
        self,
        peer: str,
        signed: Mapping[str, str],
        headers: Mapping[str, str],
        answer: bytes,
        sent: float,
    ) -> None:
        """If ``peer`` refused us for clock skew, and signed that refusal for
        our request, tell the clocks its clock (from the signed body)."""
        if self._clocks is None or error_body(401, answer)[0] != "clock_skew":
            return
        try:
            self._auth.verify_response(signed, headers, answer)
            theirs = json.loads(answer)["clock"]
        except (BadSignature, ValueError, KeyError, TypeError):
            return  # not proof of anything: the 401 alone is the error
        if isinstance(theirs, int | float) and not isinstance(theirs, bool):
            self._clocks.refused(peer, theirs - (sent + time.time()) / 2)

    async def _exchange(
        self, peer: str, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, Mapping[str, str], bytes]:
        """Send one request; its answer's status, headers and body. ``PeerUnavailable``
        (or ``PeerTimeout``) when no answer came."""
        raise NotImplementedError


class HttpTransport(SignedTransport):
    """:class:`PeerTransport` over aiohttp. Use as ``async with HttpTransport(...) as t``."""

    def __init__(
        self, auth: ClusterAuth, config: ReplicationConfig, clocks: ClockSamples | None = None
    ) -> None:
        super().__init__(auth, config, clocks)
        self._timeout = aiohttp.ClientTimeout(
            total=config.request_timeout,
            connect=config.connect_timeout,
            sock_connect=config.connect_timeout,
        )
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(
            timeout=self._timeout,
            # Keep-alive connections to each peer: pushes are small and frequent.
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=8, enable_cleanup_closed=True),
            headers={"User-Agent": "forum-replication/1"},
        )
        return self

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await asyncio.shield(session.close())

    async def _exchange(
        self, peer: str, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, Mapping[str, str], bytes]:
        if self._session is None:
            raise PeerUnavailable(peer, "the transport is closed")
        url = peer.rstrip("/") + path
        try:
            async with self._session.request(method, url, data=body, headers=headers) as response:
                return response.status, response.headers, await self._read(peer, response)
        except TimeoutError as exc:  # aiohttp's timeouts are TimeoutErrors
            raise PeerTimeout(peer, f"no answer in time ({type(exc).__name__})") from exc
        except aiohttp.ClientError as exc:
            raise PeerUnavailable(peer, f"{type(exc).__name__}: {exc}") from exc

    async def _read(self, peer: str, response: aiohttp.ClientResponse) -> bytes:
        """The body, refused as soon as it is known to be over the bound (not buffered)."""
        length = response.content_length
        if length is not None and length > self._max_answer:
            raise BadMessage(f"{peer}: answer of {length} bytes is over {self._max_answer}")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > self._max_answer:
                raise BadMessage(f"{peer}: answer over {self._max_answer} bytes")
            chunks.append(chunk)
        return b"".join(chunks)


def _rejection(peer: str, status: int, body: bytes) -> PeerRejected:
    _, message = error_body(status, body)
    if status == 401:
        return Unauthenticated(peer, message)
    if status == 409:
        return PeerIsSelf(peer, message)
    return PeerRejected(peer, status, message)
