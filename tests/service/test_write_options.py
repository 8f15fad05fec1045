"""Issue 14 over the API: write options by every way in (JSON, msgpack, raw and
query, the stream, both client transports), tuple properties in the answers,
429 on a full limited prefix, and pausing a prefix, against real nodes.

The bad values' 400s are in ``test_bad_input.py`` (one table, one node).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import msgpack
import pytest

from forum.node.client.remote import ForumClient
from forum.node.client.sync import SyncForumClient
from forum.node.core.entries import PLAIN
from forum.node.core.errors import LimitExceeded, NodeRejected, Throttled
from forum.node.core.space import Pattern
from forum.node.http.openapi import OPENAPI
from tests.fixtures.nodes import ForumNodes, NodeProcess

JSON = "application/json"
MSGPACK = "application/msgpack"


async def call(
    http: aiohttp.ClientSession, method: str, url: str, **kwargs: Any
) -> tuple[int, Any, bytes]:
    async with http.request(method, url, **kwargs) as response:
        return response.status, response.headers.copy(), await response.read()


async def read_json(http: aiohttp.ClientSession, url: str, prefix: str) -> dict[str, Any]:
    status, _, body = await call(
        http, "GET", f"{url}/v1/read", params={"prefix": prefix}, headers={"Accept": JSON}
    )
    assert status == 200, body
    document: dict[str, Any] = json.loads(body)
    return document


async def _write_json(http: aiohttp.ClientSession, url: str, name: str) -> None:
    body = {"payload": name, "ttl": 60, "priority": 5, "key": f"k-{name}"}
    status, _, answer = await call(http, "POST", f"{url}/v1/tuples", json=body)
    assert status == 201, answer


async def _write_msgpack(http: aiohttp.ClientSession, url: str, name: str) -> None:
    body = {"payload": name.encode(), "ttl": 60.0, "priority": 5, "key": f"k-{name}".encode()}
    status, _, answer = await call(
        http,
        "POST",
        f"{url}/v1/tuples",
        data=msgpack.packb(body),
        headers={"Content-Type": MSGPACK},
    )
    assert status == 201, answer


async def _write_raw(http: aiohttp.ClientSession, url: str, name: str) -> None:
    params = {"ttl": "60", "priority": "5", "key": f"k-{name}"}
    status, _, answer = await call(
        http, "POST", f"{url}/v1/tuples", params=params, data=name.encode()
    )
    assert status == 201, answer


async def _write_batch(http: aiohttp.ClientSession, url: str, name: str) -> None:
    body = {"payloads": [name], "ttl": 60, "priority": 5, "key": f"k-{name}"}
    status, _, answer = await call(http, "POST", f"{url}/v1/tuples/batch", json=body)
    assert status == 201, answer


WAYS = {"json": _write_json, "msgpack": _write_msgpack, "raw": _write_raw, "batch": _write_batch}


@pytest.mark.parametrize("way", [*WAYS, "stream", "http"])
async def test_each_option_arrives_in_the_forum(
    forum_node: NodeProcess, http: aiohttp.ClientSession, way: str
) -> None:
    """ttl, priority and key written one way are the stored tuple's, as a read
    answers them in JSON and as the client parses them into ``Tuple.props``."""
    name = f"opt-{way}"
    before = time.time()
    if way in WAYS:
        await WAYS[way](http, forum_node.url, name)
    else:
        async with ForumClient(forum_node.url, transport=way) as client:  # type: ignore[arg-type]
            await client.write(name.encode(), ttl=60, priority=5, key=f"k-{name}")
    document = await read_json(http, forum_node.url, name)
    assert document["payload"] == name
    assert document["priority"] == 5
    assert document["key"] == f"k-{name}"
    assert before * 1000 + 60_000 <= document["expires"] <= time.time() * 1000 + 60_001
    assert "due" not in document  # due at once
    for transport in ("stream", "http"):
        async with ForumClient(forum_node.url, transport=transport) as client:  # type: ignore[arg-type]
            found = await client.read_entry(Pattern(name.encode()))
        assert found is not None
        assert (found.props.priority, found.props.key) == (5, f"k-{name}".encode())
        assert found.props.expires == document["expires"]


async def test_a_plain_tuple_answers_as_it_always_did(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", f"{forum_node.url}/v1/tuples", data=b"plain-1")
    assert set(await read_json(http, forum_node.url, "plain-")) == {"id", "payload"}
    status, headers, _ = await call(http, "GET", f"{forum_node.url}/v1/read?prefix=plain-")
    assert status == 200
    assert not [h for h in headers if h.startswith("Forum-") and h != "Forum-Entry-Id"]
    async with ForumClient(forum_node.url) as client:
        found = await client.reserve(Pattern(b"plain-"), lease=5)
    assert found is not None and found.props is PLAIN


async def test_a_key_that_is_not_utf8_comes_back_as_bytes(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    async with ForumClient(forum_node.url) as client:
        await client.write(b"bin-1", key=b"\xff\x01", priority=-3)
    document = await read_json(http, forum_node.url, "bin-")
    assert (document["key_b64"], document["priority"]) == ("/wE=", -3)
    status, headers, payload = await call(http, "GET", f"{forum_node.url}/v1/read?prefix=bin-")
    assert (status, payload) == (200, b"bin-1")
    assert (headers["Forum-Key"], headers["Forum-Priority"]) == ("%FF%01", "-3")
    async with ForumClient(forum_node.url) as client:
        reserved = await client.reserve(Pattern(b"bin-"), lease=5)
    assert reserved is not None
    assert (reserved.props.key, reserved.props.priority) == (b"\xff\x01", -3)


async def test_a_delayed_tuple_is_answered_with_its_due_time(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    """(Needs the Forum's delays: invisible until due.)"""
    due = time.time() + 0.5
    body = {"payload": "later-1", "not_before": due}
    status, _, answer = await call(http, "POST", f"{forum_node.url}/v1/tuples", json=body)
    assert status == 201, answer
    status, _, _ = await call(http, "GET", f"{forum_node.url}/v1/read?prefix=later-")
    assert status == 204  # not due yet
    status, _, body_bytes = await call(
        http, "GET", f"{forum_node.url}/v1/read?prefix=later-&wait=10", headers={"Accept": JSON}
    )
    assert status == 200
    assert json.loads(body_bytes)["due"] == pytest.approx(due * 1000, abs=2)


@pytest.mark.parametrize("transport", ["stream", "http"])
async def test_a_bad_option_is_a_400_and_the_stream_goes_on(
    forum_node: NodeProcess, transport: str
) -> None:
    async with ForumClient(forum_node.url, transport=transport) as client:  # type: ignore[arg-type]
        for bad, words in (
            ({"priority": 1000}, "priority must be -128 to 127"),
            ({"priority": "high"}, "priority"),
            ({"ttl": float("nan")}, "ttl"),
            ({"delay": -1.0}, "delay"),
            ({"dedup_window": 5.0}, "dedup_window needs a key"),
        ):
            with pytest.raises(NodeRejected) as refused:
                await client.write(b"bad-1", **bad)
            assert refused.value.status == 400, bad
            assert words in str(refused.value)
            assert not refused.value.retriable
        assert await client.count(Pattern(b"bad-")) == 0
        assert await client.write(b"good-1")  # the same stream, still open


# -- bounded prefixes --------------------------------------------------------------------


async def test_a_full_limited_prefix_is_a_429_with_retry_after(
    forum_nodes: ForumNodes, http: aiohttp.ClientSession
) -> None:
    """(Needs the Forum's limits: a local write past the limit is refused.)"""
    node = await forum_nodes.start("lim", "--limits", "job/=2", "--max-wait", "120")
    async with ForumClient(node.url) as client:
        await client.write_many([b"job/1", b"job/2"])
    status, headers, body = await call(http, "POST", f"{node.url}/v1/tuples", data=b"job/3")
    assert status == 429
    assert int(headers["Retry-After"]) >= 1
    document = json.loads(body)
    assert (document["error"], document["prefix"], document["limit"]) == (
        "limit_exceeded",
        "job/",
        2,
    )
    assert "job/" in document["message"] and "2" in document["message"]
    # A write waits at most a minute for room, whatever the node's max_wait.
    status, _, body = await call(http, "POST", f"{node.url}/v1/tuples?wait=90", data=b"job/3")
    assert (status, json.loads(body)["error"]) == (400, "invalid_option")
    for transport in ("stream", "http"):
        async with ForumClient(node.url, transport=transport) as client:  # type: ignore[arg-type]
            with pytest.raises(Throttled) as throttled:
                await client.write(b"job/4", wait=0.1)
            assert isinstance(throttled.value, LimitExceeded)
            assert throttled.value.retriable
            assert (throttled.value.prefix, throttled.value.limit) == (b"job/", 2)
            assert throttled.value.retry_after > 0
            assert await client.write(b"other/1")  # another prefix is not limited
            assert await client.count(Pattern(b"job/")) == 2
            status_document = await client.status()
            assert status_document.limits == {"job/": [2, 2]}


# -- pausing a prefix --------------------------------------------------------------------


async def test_pause_and_resume_over_http(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    """(That a take of a paused prefix answers nothing needs the Forum's pause.)"""
    url = forum_node.url
    await call(http, "POST", f"{url}/v1/tuples", data=b"job/1")
    status, _, body = await call(http, "POST", f"{url}/v1/prefixes/job%2F/pause")
    assert status == 201 and json.loads(body)["id"]
    status, _, body = await call(http, "GET", f"{url}/v1/prefixes")
    assert (status, json.loads(body)) == (
        200,
        {"prefixes": [{"prefix": "job/", "paused": True, "held": None, "limit": None}]},
    )
    status, _, _ = await call(http, "POST", f"{url}/v1/tuples", data=b"job/2")
    assert status == 201  # writes go on
    status, _, _ = await call(http, "POST", f"{url}/v1/take?prefix=job/")
    assert status == 204
    status, _, body = await call(http, "POST", f"{url}/v1/prefixes/job%2F/resume")
    assert (status, json.loads(body)) == (200, {"resumed": 1})
    status, _, body = await call(http, "POST", f"{url}/v1/take?prefix=job/")
    assert (status, body) == (200, b"job/1")


@pytest.mark.parametrize("transport", ["stream", "http"])
async def test_the_client_pauses_any_bytes(forum_node: NodeProcess, transport: str) -> None:
    async with ForumClient(forum_node.url, transport=transport) as client:  # type: ignore[arg-type]
        assert await client.paused() == []
        marker = await client.pause(b"\xff/x")
        assert marker.origin.startswith("n1-")
        assert await client.paused() == [b"\xff/x"]
        assert await client.resume(b"\xff/x") == 1
        assert await client.resume(b"\xff/x") == 0
        assert await client.paused() == []
        with pytest.raises(ValueError, match="must not be empty"):
            await client.pause(b"")


async def test_pause_needs_the_token(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("guarded", token="t0ken")
    async with ForumClient(node.url) as client:
        with pytest.raises(NodeRejected) as refused:
            await client.pause(b"job/")
        assert refused.value.status == 401
    async with ForumClient(node.url, "t0ken") as client:
        await client.pause(b"job/")
        assert await client.paused() == [b"job/"]


async def test_the_stream_frame_of_wire_md(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    """The write with options that docs/wire.md spells byte by byte."""
    frame = bytes.fromhex(
        "93 03 a5 77 72 69 74 65 84 a7 70 61 79 6c 6f 61 64 c4 05 6a 6f 62 2d 31 a3 74 74 6c"
        " cb 40 4e 00 00 00 00 00 00 a8 70 72 69 6f 72 69 74 79 05 a3 6b 65 79 c4 05 6a 6f 62"
        " 2d 31"
    )
    async with http.ws_connect(f"{forum_node.url}/v1/stream") as socket:
        await socket.send_bytes(frame)
        request_id, status, body = msgpack.unpackb(await socket.receive_bytes())
        assert (request_id, status) == (3, 201) and body["id"]
        await socket.send_bytes(msgpack.packb([4, "take", {"prefix": b"job-"}]))
        request_id, status, body = msgpack.unpackb(await socket.receive_bytes())
    assert (request_id, status, body["payload"]) == (4, 200, b"job-1")
    assert (body["priority"], body["key"]) == (5, b"job-1")
    assert body["expires"] > time.time() * 1000 + 50_000


def test_the_document_describes_the_options_and_routes() -> None:
    paths = OPENAPI["paths"]
    write = paths["/v1/tuples"]["post"]
    parameters = {p["name"]: p for p in write["parameters"]}
    assert set(parameters) >= {"delay", "not_before", "ttl", "priority", "key", "key_b64"}
    assert parameters["priority"]["schema"]["pattern"] == "^-?[0-9]{1,19}$"
    assert "Retry-After" in write["responses"]["429"]["headers"]
    assert "429" in paths["/v1/tuples/batch"]["post"]["responses"]
    schemas = OPENAPI["components"]["schemas"]
    assert {"ttl", "priority", "key", "key_b64", "wait"} <= set(schemas["WriteBody"]["properties"])
    assert {"due", "expires", "priority", "key"} <= set(schemas["TupleBody"]["properties"])
    pause = paths["/v1/prefixes/{prefix}/pause"]["post"]
    assert pause["parameters"][0]["in"] == "path"
    assert set(paths["/v1/prefixes/{prefix}/resume"]) == {"post"}
    assert set(paths["/v1/prefixes"]) == {"get"}


async def test_the_sync_client_writes_with_options_and_pauses(forum_node: NodeProcess) -> None:
    def script() -> tuple[int, list[bytes]]:
        with SyncForumClient(forum_node.url) as space:
            space.write(b"sync-1", priority=2, ttl=30)
            space.write_many([b"sync-2"], priority=1)
            space.pause(b"sync-")
            paused = space.paused()
            space.resume(b"sync-")
            found = space.read_entry(Pattern(b"sync-"))
            assert found is not None
            return found.props.priority, paused

    assert await asyncio.to_thread(script) == (2, [b"sync-"])


async def test_a_second_write_of_a_key_within_its_window_answers_the_first_id(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = f"{forum_node.url}/v1/tuples?key=order-7&dedup_window=300"
    answers = [await call(http, "POST", url, data=b"charge/7") for _ in range(2)]
    assert [status for status, _, _ in answers] == [201, 201]
    assert answers[0][2] == answers[1][2]
    async with ForumClient(forum_node.url) as client:
        again = await client.write(b"charge/7", key="order-7", dedup_window=300)
        assert str(again) == json.loads(answers[0][2])["id"]
        assert await client.count(Pattern(b"charge/")) == 1
