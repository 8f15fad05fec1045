"""``GET /v1/watch`` end to end: a real node's app on a loopback port (in this
process, so a test can stop it and look at its hub), ``ForumClient.watch``,
raw SSE bytes, ``forum watch``, and a real ``forum serve`` stopped by SIGTERM.

Writes and takes show up as events; a watch resumes with ``Last-Event-ID``;
a client that reads nothing is cut off with ``overflow`` while the writes go
on; the node's shutdown ends the streams; bad input is a 400.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from forum.node.client.remote import ForumClient
from forum.node.client.watch import WatchEvent
from forum.node.config.node import NodeConfig
from forum.node.core.errors import NodeRejected
from forum.node.core.space import Pattern
from forum.node.http.app import build_app
from forum.node.http.keys import WATCH_HUB
from forum.node.http.server import NodeRunner
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually, free_port

FORUM = [sys.executable, "-m", "forum"]


@dataclass
class Node:
    url: str
    forum: Forum
    app: web.Application
    runner: NodeRunner


async def start_node(root: Path, **settings: object) -> Node:
    strand = await Strand.open(StrandConfig(fsync="never").with_storage(root).with_node_name("w"))
    forum = Forum(strand)
    config = NodeConfig(listen="127.0.0.1:0", shutdown_timeout=5, **settings)  # type: ignore[arg-type]
    app = build_app(forum, config)
    runner = NodeRunner(app, config)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return Node(f"http://127.0.0.1:{port}", forum, app, runner)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    made = await start_node(tmp_path / "node", watch_heartbeat=0.2)
    try:
        yield made
    finally:
        await made.runner.cleanup()
        await made.forum.aclose()


async def next_of(events: AsyncIterator[WatchEvent], kind: str, within: float = 10) -> WatchEvent:
    async with asyncio.timeout(within):
        async for event in events:
            if event.kind == kind:
                return event
    raise AssertionError(f"the watch ended before a {kind}")


async def test_writes_and_takes_show_up_filtered_by_prefix(node: Node) -> None:
    async with ForumClient(node.url) as client, aclosing(client.watch(Pattern(b"job-"))) as events:
        ready = await next_of(events, "ready")
        assert ready.event_id is not None and ready.heartbeat == 0.2
        first = await client.write(b"job-1")
        await client.write(b"mail-1")
        await node.forum.write(b"job-\xff", priority=5, key=b"k1")
        assert await client.take(Pattern(b"job-1")) == b"job-1"  # not the priority 5 one
        got = [await anext(events) for _ in range(3)]
    assert [(e.kind, e.id, e.payload) for e in got[:1]] == [("write", first, b"job-1")]
    assert (got[1].payload, got[1].priority, got[1].key) == (b"job-\xff", 5, b"k1")
    assert (got[2].kind, got[2].target) == ("take", first)
    assert len({e.event_id for e in got}) == 3


async def test_the_event_format_byte_by_byte(node: Node, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{node.url}/v1/watch", params={"prefix": "job-"}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        hub = node.app[WATCH_HUB]
        opening = await response.content.readuntil(b"\n\n")
        assert opening == (
            f"id: {hub.boot}-0\nevent: ready\n"
            'data: {"heartbeat":0.2,"queue":10000,"queue_bytes":16777216}\n\n'.encode()
        )
        written = await node.forum.write(b'job-"1"\n')
        event = await response.content.readuntil(b"\n\n")
        assert event == (
            f"id: {hub.boot}-1\nevent: write\n"
            f'data: {{"id":"{written}","payload":"job-\\"1\\"\\n"}}\n\n'.encode()
        )
        assert await response.content.readuntil(b"\n\n") == b": keepalive\n\n"


async def test_a_watch_resumes_after_its_last_event_id(node: Node) -> None:
    async with ForumClient(node.url) as client:
        async with aclosing(client.watch(Pattern(b""))) as events:
            await next_of(events, "ready")
            await client.write(b"seen")
            seen = await next_of(events, "write")
        await client.write_many([b"missed-1", b"missed-2"])
        async with aclosing(client.watch(Pattern(b""), last_event_id=seen.event_id)) as events:
            replayed = [await anext(events) for _ in range(3)]
        assert [(e.kind, e.payload) for e in replayed] == [
            ("write", b"missed-1"),
            ("write", b"missed-2"),
            ("ready", None),
        ]
        assert replayed[2].event_id == replayed[1].event_id
        # An id of another run of the node (or another node): told so, then live.
        async with aclosing(client.watch(Pattern(b""), last_event_id="0123ab-7")) as events:
            reset = await anext(events)
            assert reset.kind == "reset" and "read the space again" in (reset.message or "")
            assert (await anext(events)).kind == "ready"


async def test_a_long_replay_comes_whole_and_in_order(node: Node) -> None:
    """A resume whose missed events are many pieces long (the stream encodes
    and sends them a piece at a time) gets them all, in order, then ready."""
    async with ForumClient(node.url) as client:
        async with aclosing(client.watch(Pattern(b"job-"))) as events:
            seen = await next_of(events, "ready")
        written = await client.write_many([b"job-%05d" % i + b"x" * 80 for i in range(3000)])
        await client.write(b"mail")
        async with aclosing(client.watch(Pattern(b"job-"), last_event_id=seen.event_id)) as events:
            replayed = [await anext(events) for _ in range(3001)]
    assert [e.id for e in replayed[:-1]] == written and replayed[-1].kind == "ready"


async def test_bad_input_is_a_400(node: Node, http: aiohttp.ClientSession) -> None:
    for params, headers, code in (
        ({"prefx": "a"}, {}, "unknown_parameter"),
        ({"prefix": "a", "prefix_b64": "YQ"}, {}, "invalid_parameter"),
        ({}, {"Last-Event-ID": "not an id"}, "invalid_header"),
    ):
        async with http.get(f"{node.url}/v1/watch", params=params, headers=headers) as response:
            assert response.status == 400
            assert (await response.json())["error"] == code
    async with http.head(f"{node.url}/v1/watch") as response:  # answers, without a stream
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
    async with ForumClient(node.url) as client:
        with pytest.raises(NodeRejected, match="invalid_header"):
            await anext(client.watch(Pattern(b""), last_event_id="nope"))


async def test_a_client_that_reads_nothing_is_cut_off_while_writes_go_on(tmp_path: Path) -> None:
    node = await start_node(tmp_path / "slow", watch_queue=100)
    try:
        hub = node.app[WATCH_HUB]
        sock = await stalled_watch(node.url)
        await eventually(lambda: hub.watchers == 1)
        # 16 MB of events, far more than the socket buffers hold, in batches
        # smaller than the watcher's queue; the node goes on writing.
        for _ in range(40):
            await node.forum.write_many([b"j" * 8192] * 50)
            await asyncio.sleep(0)
        assert hub.watchers == 0
        assert await node.forum.count(Pattern(b"j")) == 2000
        tail = (await read_to_end(sock))[-400:]
        assert b"event: overflow\n" in tail
        assert b"fell more than 100 events or 16777216 bytes behind" in tail
        assert tail.endswith(b"\r\n0\r\n\r\n")  # then the stream's end
    finally:
        await node.runner.cleanup()
        await node.forum.aclose()


async def stalled_watch(url: str) -> socket.socket:
    """A ``GET /v1/watch`` on a socket that reads nothing (a small receive buffer)."""
    port = int(url.rsplit(":", 1)[1])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, b"GET /v1/watch HTTP/1.1\r\nHost: localhost\r\n\r\n")
    return sock


async def read_to_end(sock: socket.socket) -> bytes:
    received = bytearray()
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(30):
        while chunk := await loop.sock_recv(sock, 1 << 20):
            received += chunk
    sock.close()
    return bytes(received)


async def test_a_client_that_reads_nothing_is_cut_off_after_the_stall_bound(
    tmp_path: Path,
) -> None:
    """Within its queue's bounds, but its socket takes no byte for ``stall``
    seconds while events wait: cut off with ``overflow``, the node quiet
    meanwhile. Failed before: such a watcher was kept for ever, with what
    its stream had buffered."""
    node = await start_node(tmp_path / "stalled")
    try:
        hub = node.app[WATCH_HUB]
        hub.stall, hub.queue_bytes = 0.5, 1 << 30
        sock = await stalled_watch(node.url)
        await eventually(lambda: hub.watchers == 1)
        for _ in range(20):  # 32 MB, more than the socket buffers take, within its bounds
            await node.forum.write_many([b"j" * 8192] * 200)
        await eventually(lambda: hub.watchers == 0, what="the stalled watcher cut off")
        tail = (await read_to_end(sock))[-300:]
        assert b"event: overflow\n" in tail and b"client read nothing for 0.5 s" in tail
        assert tail.endswith(b"\r\n0\r\n\r\n")
    finally:
        await node.runner.cleanup()
        await node.forum.aclose()


async def test_a_write_of_a_large_tuple_reaches_the_watch(node: Node) -> None:
    """Failed before: the client read a stream a line at a time with
    aiohttp's ``readline``, which refuses a line past 512 KiB: a write event
    of a 300 KiB tuple (1.8 MB as JSON) raised ``LineTooLong`` out of ``watch``."""
    async with ForumClient(node.url) as client, aclosing(client.watch(Pattern(b"big"))) as events:
        await next_of(events, "ready")
        big = b"big" + b"\x01" * 300_000  # JSON writes each as \u0001: a 1.8 MB line
        written = await client.write(big)
        event = await next_of(events, "write")
        assert (event.id, event.payload) == (written, big)


async def test_stopping_the_node_ends_the_streams(tmp_path: Path) -> None:
    node = await start_node(tmp_path / "stopping", watch_heartbeat=30)
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{node.url}/v1/watch") as response:
            await response.content.readuntil(b"\n\n")  # ready
            async with asyncio.timeout(10):  # shutdown_timeout would be 5 s per stream
                await node.runner.cleanup()
                assert await response.content.read() == b""
    finally:
        await node.runner.cleanup()
        await node.forum.aclose()


async def test_forum_watch_prints_events_and_sigint_exits_0(
    forum_node: NodeProcess,
) -> None:
    """``forum watch`` against a real ``forum serve``; SIGTERM to the node ends
    the stream (the watch reconnects), SIGINT to the watch exits 0."""
    watch = await asyncio.create_subprocess_exec(
        *FORUM, "watch", "job-", "--node", forum_node.url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert watch.stdout is not None and watch.stderr is not None
    try:
        async with asyncio.timeout(30):
            assert b"watching 'job-'" in await watch.stderr.readline()
            async with ForumClient(forum_node.url) as client:
                written = await client.write(b"job-1 two words")
                await client.write(b"other")
                await client.take(Pattern(b"job-"))
            lines = [await watch.stdout.readline() for _ in range(2)]
            assert lines == [
                f"write {written} job-1 two words\n".encode(),
                f"take {written.origin}:{written.seq + 2} {written}\n".encode(),
            ]
            watch.send_signal(signal.SIGINT)
            assert await watch.wait() == 0
            assert b"Traceback" not in await watch.stderr.read()
    finally:
        if watch.returncode is None:
            watch.kill()
            await watch.wait()


@pytest.mark.slow
async def test_a_watch_follows_a_node_through_its_restart(forum_node: NodeProcess) -> None:
    """SIGTERM ends the open stream at once (the node exits 0, not after its
    shutdown_timeout); the client reconnects with its last id, which the
    restarted node does not know: ``reset``, then live again."""
    async with (
        ForumClient(forum_node.url) as client,
        aclosing(client.watch(Pattern(b""))) as events,
    ):
        await next_of(events, "ready")
        await client.write(b"before")
        before = await next_of(events, "write")
        async with asyncio.timeout(8):  # below the node's shutdown_timeout of 10 s
            assert await forum_node.stop() == 0
        await forum_node.start()
        reset = await anext(events)
        assert reset.kind == "reset" and before.event_id in (reset.message or "")
        assert (await anext(events)).kind == "ready"
        written = await client.write(b"after")
        assert (await next_of(events, "write")).id == written


async def test_an_expiring_tuple_shows_its_expiry_then_expires(node: Node) -> None:
    """The Forum calls the hub's expiry listener when a ttl runs out (main
    since the expiry landed; this branch alone predates it)."""
    async with ForumClient(node.url) as client, aclosing(client.watch(Pattern(b"job-"))) as events:
        await next_of(events, "ready")
        written = await node.forum.write(b"job-brief", ttl=0.2)
        write = await next_of(events, "write")
        assert write.id == written and write.expires > 0
        assert (await next_of(events, "expire", within=3)).id == written


async def test_forum_watch_of_a_node_that_is_not_there_is_one_line_exit_3() -> None:
    watch = await asyncio.create_subprocess_exec(
        *FORUM, "watch", "job-", "--node", f"http://127.0.0.1:{free_port()}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(30):
        out, err = await watch.communicate()
    assert watch.returncode == 3 and out == b""
    assert err.decode().startswith("forum watch: http://127.0.0.1:") and err.count(b"\n") == 1


@pytest.mark.slow
async def test_a_watch_sees_what_a_peer_wrote_and_took(forum_nodes: ForumNodes) -> None:
    """Entries replicated here are events here too, with their writer's ids."""
    a, b = forum_nodes.make("a"), forum_nodes.make("b")
    a.args += ["--peer", b.url]
    b.args += ["--peer", a.url]
    await forum_nodes.start_all()
    async with (
        ForumClient(a.url) as on_a,
        ForumClient(b.url) as on_b,
        aclosing(on_b.watch(Pattern(b"job-"))) as events,
    ):
        await next_of(events, "ready")
        written = await on_a.write(b"job-from-a")
        write = await next_of(events, "write", within=20)
        assert (write.id, write.payload) == (written, b"job-from-a")
        await eventually(lambda: on_a.take(Pattern(b"job-")), what="a take on a")
        take = await next_of(events, "take", within=20)
        assert take.target == written and take.id is not None and take.id.origin == written.origin


@pytest.mark.slow
async def test_the_client_reconnects_a_silent_stream_with_its_last_event_id() -> None:
    """A server that sends ``ready`` (a 0.1 s heartbeat) and one event, then
    falls silent: after three heartbeats (and 5 s of slack) the client takes
    the stream as dropped and asks again with ``Last-Event-ID`` of that event."""
    asked: list[str | None] = []

    async def silent(request: web.Request) -> web.StreamResponse:
        asked.append(request.headers.get("Last-Event-ID"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        n = len(asked)
        await response.write(
            f'id: b-{n}\nevent: ready\ndata: {{"heartbeat": 0.1, "queue": 1}}\n\n'
            f'id: b-{n}x\nevent: expire\ndata: {{"id": "o:{n}"}}\n\n'.encode()
        )
        await asyncio.sleep(3600)  # silent, until the client leaves
        return response

    app = web.Application()
    app.router.add_get("/v1/watch", silent)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with ForumClient(url) as client, aclosing(client.watch(Pattern(b""))) as events:
            expired = [(await next_of(events, "expire")).id for _ in range(2)]
    finally:
        await runner.cleanup()
    assert [str(i) for i in expired] == ["o:1", "o:2"]
    assert asked == [None, "b-1x"]
