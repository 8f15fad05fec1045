"""The peer transport against a real aiohttp server on loopback: statuses,
timeouts, retries with backoff, signed answers, cancellation."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from forum.replication.auth import ClusterAuth
from forum.replication.config import ReplicationConfig
from forum.replication.errors import (
    BadMessage,
    BadSignature,
    PeerIsSelf,
    PeerRejected,
    PeerTimeout,
    PeerUnavailable,
    Unauthenticated,
)
from forum.replication.transport import HttpTransport
from tests.fixtures.nodes import free_port

SECRET = "s3cret"
#: The stand-in peer's origin.
ORIGIN = "peer-1"
CONFIG = ReplicationConfig(
    request_timeout=0.3,
    connect_timeout=0.3,
    attempts=3,
    backoff_base=0.01,
    backoff_max=0.02,
    page_bytes=1024,
    max_batch_bytes=1024,
)


class Peer:
    """A stand-in peer: real HTTP, answers chosen per path, calls counted."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.auth = ClusterAuth(SECRET)
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        self.calls[name] += 1
        body = await request.read()
        if name == "ok":
            try:
                signature = self.auth.verify_request(
                    request.method, request.path, request.headers, body, me=ORIGIN, anyone=True
                )
            except BadSignature as exc:
                return web.json_response({"error": "unauthorized", "message": str(exc)}, status=401)
            return web.Response(
                body=b"echo:" + body, headers=self.auth.sign_response(signature, b"echo:" + body)
            )
        if name == "flaky" and self.calls[name] < 3:
            return web.json_response({"error": "busy", "message": "try later"}, status=503)
        if name == "flaky":
            signature = self.auth.verify_request(
                request.method, request.path, request.headers, body, me=ORIGIN, anyone=True
            )
            return web.Response(body=b"ok", headers=self.auth.sign_response(signature, b"ok"))
        if name == "slow":
            await asyncio.sleep(30)
        if name == "unsigned":
            return web.Response(body=b"trust me")
        if name == "huge":
            return web.Response(body=b"x" * (2 * 1024 * 1024))
        statuses = {"denied": 401, "self": 409, "bad": 400}
        return web.json_response(
            {"error": name, "message": f"{name} here"}, status=statuses.get(name, 404)
        )


@pytest.fixture
async def peer() -> AsyncIterator[Peer]:
    stand_in = Peer()
    app = web.Application()
    app.router.add_route("*", "/{name}", stand_in.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    stand_in.url = f"http://127.0.0.1:{port}"
    try:
        yield stand_in
    finally:
        await runner.cleanup()


@pytest.fixture
async def transport() -> AsyncIterator[HttpTransport]:
    async with HttpTransport(ClusterAuth(SECRET), CONFIG) as t:
        yield t


async def test_a_signed_call_returns_the_checked_answer(
    peer: Peer, transport: HttpTransport
) -> None:
    assert await transport.call(peer.url, "POST", "/ok", b"hello") == b"echo:hello"
    assert await transport.call(peer.url, "POST", "/ok", b"hi", to=ORIGIN) == b"echo:hi"


async def test_a_call_is_signed_for_its_receiver(peer: Peer, transport: HttpTransport) -> None:
    with pytest.raises(Unauthenticated, match="signed for node peer-2"):
        await transport.call(peer.url, "POST", "/ok", b"hello", to="peer-2")
    assert peer.calls["ok"] == 1  # refused, not retried


async def test_retriable_failures_are_retried(peer: Peer, transport: HttpTransport) -> None:
    assert await transport.call(peer.url, "POST", "/flaky", b"") == b"ok"
    assert peer.calls["flaky"] == 3


async def test_a_call_may_ask_for_one_try(peer: Peer, transport: HttpTransport) -> None:
    """A loan's ask: a taker waits on it, so one try, then its own bound."""
    with pytest.raises(PeerRejected):  # the 503, not tried again
        await transport.call(peer.url, "POST", "/flaky", b"", attempts=1)
    assert peer.calls["flaky"] == 1


@pytest.mark.parametrize(
    ("path", "error"),
    [("/denied", Unauthenticated), ("/self", PeerIsSelf), ("/bad", PeerRejected)],
)
async def test_refusals_are_named_and_not_retried(
    peer: Peer, transport: HttpTransport, path: str, error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        await transport.call(peer.url, "POST", path, b"")
    assert peer.calls[path[1:]] == 1
    assert f"{path[1:]} here" in str(raised.value)


async def test_a_slow_peer_times_out_after_each_attempt(
    peer: Peer, transport: HttpTransport
) -> None:
    started = time.monotonic()
    with pytest.raises(PeerTimeout) as raised:
        await transport.call(peer.url, "POST", "/slow", b"")
    assert isinstance(raised.value, TimeoutError)
    assert peer.calls["slow"] == 3
    assert time.monotonic() - started < 5  # three bounded attempts, not one endless wait


async def test_an_unreachable_peer_is_unavailable(transport: HttpTransport) -> None:
    with pytest.raises(PeerUnavailable) as raised:
        await transport.call(f"http://127.0.0.1:{free_port()}", "POST", "/ok", b"")
    assert raised.value.retriable


async def test_unsigned_and_oversized_answers_are_refused(
    peer: Peer, transport: HttpTransport
) -> None:
    with pytest.raises(BadSignature):
        await transport.call(peer.url, "POST", "/unsigned", b"")
    with pytest.raises(BadMessage):
        await transport.call(peer.url, "POST", "/huge", b"")


async def test_a_call_is_cancellable(peer: Peer, transport: HttpTransport) -> None:
    call = asyncio.create_task(transport.call(peer.url, "POST", "/slow", b""))
    while not peer.calls["slow"]:
        await asyncio.sleep(0.005)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_a_closed_transport_refuses_calls(peer: Peer) -> None:
    transport = HttpTransport(ClusterAuth(None), CONFIG)
    async with transport:
        pass
    with pytest.raises(PeerUnavailable):
        await transport.call(peer.url, "POST", "/ok", b"")
