"""Every route of the HTTP API, in every content type, against a real ``forum serve``."""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
import msgpack
import pytest

from forum.node.client.remote import ForumClient
from forum.node.config.node import NodeConfig
from forum.node.core.space import Pattern
from forum.node.http.app import build_app
from forum.node.http.openapi import OPENAPI
from tests.fixtures.nodes import NodeProcess

RAW = "application/octet-stream"
JSON = "application/json"
MSGPACK = "application/msgpack"


async def call(
    http: aiohttp.ClientSession, method: str, url: str, **kwargs: Any
) -> tuple[int, dict[str, str], bytes]:
    async with http.request(method, url, **kwargs) as response:
        return response.status, dict(response.headers), await response.read()


# -- write -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        (RAW, b"job-raw\x00\xff", b"job-raw\x00\xff"),
        (None, b"job-no-type", b"job-no-type"),
        ("text/plain", b"job-text", b"job-text"),
        (JSON, json.dumps({"payload": "job-json \u00e9"}).encode(), "job-json \u00e9".encode()),
        (
            JSON,
            json.dumps({"payload_b64": base64.b64encode(b"\xff\x00bin").decode()}).encode(),
            b"\xff\x00bin",
        ),
        (MSGPACK, msgpack.packb({"payload": b"job-mp\xff"}), b"job-mp\xff"),
        ("application/x-msgpack", msgpack.packb({"payload": "job-mp-text"}), b"job-mp-text"),
    ],
    ids=["raw", "no-type", "text", "json", "json-b64", "msgpack", "msgpack-str"],
)
async def test_write_in_each_content_type(
    forum_node: NodeProcess,
    http: aiohttp.ClientSession,
    content_type: str | None,
    body: bytes,
    expected: bytes,
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    status, _, answer = await call(
        http, "POST", f"{forum_node.url}/v1/tuples", data=body, headers=headers
    )
    assert status == 201
    entry_id = json.loads(answer)["id"]
    assert entry_id.startswith("n1-") and entry_id.endswith(":1")
    status, headers_out, payload = await call(
        http, "POST", f"{forum_node.url}/v1/take", params={"prefix": ""}
    )
    assert (status, payload, headers_out["Forum-Entry-Id"]) == (200, expected, entry_id)


@pytest.mark.parametrize(
    ("accept", "decode"),
    [
        (JSON, json.loads),
        (MSGPACK, msgpack.unpackb),
        ("text/plain", lambda b: {"id": b.decode().strip()}),
        ("*/*", json.loads),
    ],
)
async def test_write_answers_in_the_accepted_type(
    forum_node: NodeProcess, http: aiohttp.ClientSession, accept: str, decode: Any
) -> None:
    status, _headers, body = await call(
        http, "POST", f"{forum_node.url}/v1/tuples", data=b"x", headers={"Accept": accept}
    )
    assert status == 201
    assert decode(body)["id"].endswith(":1")


# -- take and read ---------------------------------------------------------------------


async def test_take_in_each_representation(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = forum_node.url
    for payload in (b"job-1", b"job-2", b"job-\xff"):
        await call(http, "POST", f"{url}/v1/tuples", data=payload)

    status, headers, body = await call(http, "POST", f"{url}/v1/take?prefix=job-")
    assert (status, body, headers["Content-Type"]) == (200, b"job-1", RAW)
    assert headers["Forum-Entry-Id"].endswith(":1")

    status, _, body = await call(
        http, "POST", f"{url}/v1/take?prefix=job-", headers={"Accept": MSGPACK}
    )
    assert status == 200
    assert msgpack.unpackb(body) == {
        "id": headers["Forum-Entry-Id"][:-1] + "2",
        "payload": b"job-2",
    }

    status, _, body = await call(
        http, "POST", f"{url}/v1/take?prefix=job-", headers={"Accept": JSON}
    )
    document = json.loads(body)
    assert "payload" not in document
    assert base64.b64decode(document["payload_b64"]) == b"job-\xff"

    status, headers, body = await call(http, "POST", f"{url}/v1/take?prefix=job-")
    assert (status, body) == (204, b"")


#: The routes that take (or reserve): each must be told from which prefix.
TAKING_ROUTES = {
    "/v1/take": "",
    "/v1/take/batch": "",
    "/v1/reserve": "&lease=30",
    "/v1/reserve/batch": "&lease=30",
    "/v1/ack/reserve": "&lease=30",
}


@pytest.mark.parametrize("route", TAKING_ROUTES)
async def test_a_take_without_a_prefix_is_refused_and_an_empty_one_takes_any(
    forum_node: NodeProcess, http: aiohttp.ClientSession, route: str
) -> None:
    """A forgotten ``prefix`` took from every prefix: now a 400 that takes
    nothing; ``prefix=`` (empty, explicit) still takes from every prefix."""
    body = {"json": {"ids": []}} if route == "/v1/ack/reserve" else {}
    async with ForumClient(forum_node.url) as client:
        await client.write_many([b"a-1", b"b-1"])
        extra = TAKING_ROUTES[route]
        status, _, answer = await call(http, "POST", f"{forum_node.url}{route}?{extra[1:]}", **body)
        assert status == 400, answer
        document = json.loads(answer)
        assert document["error"] == "missing_parameter" and "prefix" in document["message"]
        assert await client.count(Pattern(b"")) == 2
        status, _, answer = await call(
            http, "POST", f"{forum_node.url}{route}?prefix={extra}", **body
        )
        assert status == 200, answer
        assert await client.count(Pattern(b"")) < 2


async def test_read_leaves_the_tuple_live(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = forum_node.url
    await call(http, "POST", f"{url}/v1/tuples", data=b"cfg-a")
    for _ in range(2):
        status, _headers, body = await call(http, "GET", f"{url}/v1/read?prefix=cfg-")
        assert (status, body) == (200, b"cfg-a")
    status, _, body = await call(
        http, "GET", f"{url}/v1/read?prefix=cfg-", headers={"Accept": JSON}
    )
    assert json.loads(body)["payload"] == "cfg-a"
    assert (await call(http, "GET", f"{url}/v1/read?prefix=nope"))[0] == 204
    assert json.loads((await call(http, "GET", f"{url}/v1/count?prefix=cfg-"))[2]) == {"count": 1}


async def test_binary_prefix_in_base64(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = forum_node.url
    await call(http, "POST", f"{url}/v1/tuples", data=b"\xff\x00job")
    await call(http, "POST", f"{url}/v1/tuples", data=b"\xfe\x00job")
    prefix = base64.urlsafe_b64encode(b"\xff\x00").decode().rstrip("=")
    status, _, body = await call(http, "POST", f"{url}/v1/take", params={"prefix_b64": prefix})
    assert (status, body) == (200, b"\xff\x00job")


# -- batches ------------------------------------------------------------------------


async def test_batch_write_and_take_in_msgpack(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = forum_node.url
    payloads = [f"b-{i:03}".encode() for i in range(250)]
    status, _, body = await call(
        http,
        "POST",
        f"{url}/v1/tuples/batch",
        data=msgpack.packb({"payloads": payloads}),
        headers={"Content-Type": MSGPACK, "Accept": MSGPACK},
    )
    assert status == 201
    ids = msgpack.unpackb(body)["ids"]
    assert len(ids) == 250 and len(set(ids)) == 250

    status, _, body = await call(
        http, "POST", f"{url}/v1/take/batch?prefix=b-&limit=200", headers={"Accept": MSGPACK}
    )
    taken = msgpack.unpackb(body)["tuples"]
    assert status == 200
    assert [t["payload"] for t in taken] == payloads[:200]
    assert [t["id"] for t in taken] == ids[:200]

    status, _, body = await call(http, "POST", f"{url}/v1/take/batch?prefix=b-&limit=200")
    assert [t["payload"] for t in json.loads(body)["tuples"]] == [
        p.decode() for p in payloads[200:]
    ]
    status, _, body = await call(http, "POST", f"{url}/v1/take/batch?prefix=b-")
    assert (status, json.loads(body)) == (200, {"tuples": []})


async def test_batch_write_in_json(forum_node: NodeProcess, http: aiohttp.ClientSession) -> None:
    url = forum_node.url
    status, _, body = await call(
        http, "POST", f"{url}/v1/tuples/batch", json={"payloads": ["j-1", "j-2"]}
    )
    assert status == 201 and len(json.loads(body)["ids"]) == 2
    encoded = [base64.b64encode(b"j-\xff").decode()]
    status, _, body = await call(
        http, "POST", f"{url}/v1/tuples/batch", json={"payloads_b64": encoded}
    )
    assert status == 201
    assert json.loads((await call(http, "GET", f"{url}/v1/count?prefix=j-"))[2])["count"] == 3


async def test_batch_take_waits_for_the_first(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = forum_node.url
    status, _, body = await call(http, "POST", f"{url}/v1/take/batch?prefix=w-&wait=0.2")
    assert (status, json.loads(body)) == (200, {"tuples": []})


# -- count, list, status -----------------------------------------------------------------


async def test_count_in_each_representation(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = forum_node.url
    for payload in (b"a-1", b"a-2", b"b-1"):
        await call(http, "POST", f"{url}/v1/tuples", data=payload)
    assert json.loads((await call(http, "GET", f"{url}/v1/count?prefix=a-"))[2]) == {"count": 2}
    _, _, body = await call(http, "GET", f"{url}/v1/count", headers={"Accept": MSGPACK})
    assert msgpack.unpackb(body) == {"count": 3}
    _, _, body = await call(
        http, "GET", f"{url}/v1/count?prefix=b", headers={"Accept": "text/plain"}
    )
    assert body == b"1\n"


async def test_list_pages_oldest_first(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = forum_node.url
    payloads = [f"p-{i}".encode() for i in range(5)]
    await call(
        http, "POST", f"{url}/v1/tuples/batch", json={"payloads": [p.decode() for p in payloads]}
    )
    seen: list[str] = []
    cursor = 0
    while True:
        _, _, body = await call(
            http,
            "GET",
            f"{url}/v1/tuples",
            params={"prefix": "p-", "limit": "2", "cursor": str(cursor)},
        )
        page = json.loads(body)
        seen += [t["payload"] for t in page["tuples"]]
        if page["next_cursor"] is None:
            break
        cursor = page["next_cursor"]
    assert seen == [p.decode() for p in payloads]
    _, _, body = await call(http, "GET", f"{url}/v1/tuples?limit=1", headers={"Accept": MSGPACK})
    assert msgpack.unpackb(body)["tuples"][0]["payload"] == b"p-0"


async def test_status(forum_node: NodeProcess, http: aiohttp.ClientSession) -> None:
    url = forum_node.url
    await call(http, "POST", f"{url}/v1/tuples", data=b"s-1")
    await call(http, "POST", f"{url}/v1/tuples", data=b"s-2")
    await call(http, "POST", f"{url}/v1/take?prefix=s-")
    status, _, body = await call(http, "GET", f"{url}/v1/status")
    document = json.loads(body)
    assert status == 200
    assert document["node_id"] == "n1" and document["origin"].startswith("n1-")
    assert (document["live"], document["writes"], document["takes"]) == (1, 2, 1)
    assert document["entries"] == 3 and document["strand_bytes"] > 0
    assert document["advertise"] == url and document["fsync"] == "always"
    assert document["peers"] == []
    _, _, body = await call(http, "GET", f"{url}/v1/status", headers={"Accept": MSGPACK})
    assert msgpack.unpackb(body)["origin"] == document["origin"]


# -- probes, metrics, OpenAPI ------------------------------------------------------------


async def test_health_and_readiness(forum_node: NodeProcess, http: aiohttp.ClientSession) -> None:
    assert (await call(http, "GET", f"{forum_node.url}/healthz"))[0] == 200
    status, _, body = await call(http, "GET", f"{forum_node.url}/readyz")
    assert (status, json.loads(body)) == (200, {"status": "ready", "degraded": []})


async def test_metrics(forum_node: NodeProcess, http: aiohttp.ClientSession) -> None:
    url = forum_node.url
    await call(http, "POST", f"{url}/v1/tuples", data=b"m-1")
    await call(http, "POST", f"{url}/v1/take?prefix=m-")
    await call(http, "POST", f"{url}/v1/tuples", data=b"m-2")
    status, headers, body = await call(http, "GET", f"{url}/metrics")
    text = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    for line in (
        'forum_http_requests_total{method="POST",route="/v1/tuples",status="201"} 2.0',
        'forum_http_requests_total{method="POST",route="/v1/take",status="200"} 1.0',
        "forum_live_tuples 1.0",
        "forum_writes_total 2.0",
        "forum_takes_total 1.0",
        "forum_waiting_takers 0.0",
    ):
        assert line in text, line
    assert 'forum_http_request_duration_seconds_count{method="POST",route="/v1/take"} 1.0' in text
    assert "forum_strand_bytes " in text
    # Each write and take waited for at least one fsync (fsync always).
    assert "forum_strand_fsync_duration_seconds_count 0.0" not in text


async def test_metrics_give_each_prefixs_depth_in_flight_and_oldest_age(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    """What an autoscaler (KEDA, an HPA) scales a queue's workers on, per
    prefix: a payload up to its first ``/``; one without a ``/`` is no series."""
    async with ForumClient(forum_node.url) as client:
        for payload in (b"job/1", b"job/2", b"job/3", b"mail/1", b"no-slash"):
            await client.write(payload)
        await client.write(b"job/later", delay=600)
        assert await client.reserve(Pattern(b"job/"), lease=30) is not None
    _, _, body = await call(http, "GET", f"{forum_node.url}/metrics")
    text = body.decode()
    for line in (
        'forum_prefix_live{prefix="job/"} 2.0',
        'forum_prefix_reserved{prefix="job/"} 1.0',
        'forum_prefix_delayed{prefix="job/"} 1.0',
        'forum_prefix_live{prefix="mail/"} 1.0',
        'forum_prefix_reserved{prefix="mail/"} 0.0',
    ):
        assert line in text, line
    assert 'forum_prefix_oldest_age_seconds{prefix="job/"} ' in text
    assert 'forum_prefix_oldest_age_seconds{prefix="mail/"} ' in text
    assert "no-slash" not in text


async def test_openapi_describes_every_route(local_forum: Any) -> None:
    app = build_app(local_forum, NodeConfig())
    served = {
        (route.resource.canonical, route.method.lower())
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }
    described = {(path, method) for path, ops in OPENAPI["paths"].items() for method in ops}
    assert served == described


async def test_openapi_is_served(forum_node: NodeProcess, http: aiohttp.ClientSession) -> None:
    status, _, body = await call(http, "GET", f"{forum_node.url}/v1/openapi.json")
    assert status == 200 and json.loads(body)["openapi"] == "3.1.0"


async def test_unknown_route_and_method(
    forum_node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    status, _, body = await call(http, "GET", f"{forum_node.url}/v2/tuples")
    assert (status, json.loads(body)["error"]) == (404, "not_found")
    status, headers, body = await call(http, "PUT", f"{forum_node.url}/v1/take")
    assert (status, json.loads(body)["error"]) == (405, "method_not_allowed")
    assert "POST" in headers["Allow"]


async def test_reserve_ack_and_release_over_http(client: ForumClient) -> None:
    """A reservation is a take that comes back unless it is acked."""
    wid = await client.write(b"res/1")
    got = await client.reserve(Pattern(b"res/"), lease=30)
    assert got is not None and got.id == wid
    assert await client.count(Pattern(b"res/")) == 0
    assert await client.release(wid) is True
    assert await client.release(wid) is False
    again = await client.reserve(Pattern(b"res/"), lease=0.2, timeout=5)
    assert again == got
    assert await client.take(Pattern(b"res/"), timeout=10) == b"res/1"  # after the lease
    await client.write(b"res/2")
    second = await client.reserve(Pattern(b"res/"), lease=30)
    assert second is not None
    assert await client.ack(second.id) is True
    assert await client.ack(second.id) is False
    assert await client.count(Pattern(b"res/")) == 0


async def test_reserve_and_ack_in_batches_over_http(client: ForumClient) -> None:
    ids = await client.write_many([b"rb/%d" % i for i in range(4)])
    got = await client.reserve_many(Pattern(b"rb/"), lease=30, limit=3)
    assert [t.id for t in got] == ids[:3]
    assert await client.ack_many([t.id for t in got]) == [True, True, True]
    assert await client.ack_many([ids[0]]) == [False]
    waiting = await client.reserve_many(Pattern(b"none/"), lease=30, limit=3, timeout=0.2)
    assert waiting == []
    assert await client.count(Pattern(b"rb/")) == 1
