"""The served OpenAPI document is the node's own: bearer auth only with a token,
the cluster routes only with replication, and a ``Status`` that is exactly
what ``/v1/status`` answers."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import jsonschema

from forum.dashboard import dashboard
from forum.dashboard.openapi import JOB_STATES
from forum.dashboard.pages import is_page_path
from forum.node.config.node import NodeConfig
from forum.node.http.app import build_app
from forum.node.http.openapi import openapi_document
from forum.node.space.forum import Forum
from forum.replication import extension
from forum.tasks import JobState
from tests.fixtures.nodes import ForumNodes


def _served(app: Any) -> set[tuple[str, str]]:
    return {
        (route.resource.canonical, route.method.lower())
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }


def _described(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(path, method) for path, ops in document["paths"].items() for method in ops}


def _statuses(document: dict[str, Any]) -> set[str]:
    return {
        status
        for ops in document["paths"].values()
        for operation in ops.values()
        for status in operation["responses"]
    }


async def test_every_route_with_replication_is_described(local_forum: Forum) -> None:
    app = build_app(local_forum, NodeConfig(), [extension])
    document = openapi_document(app)
    assert _served(app) == _described(document)
    push = document["paths"]["/v1/cluster/replication/push"]["post"]
    assert push["security"] == []
    assert set(push["requestBody"]["content"]) == {"application/msgpack"}
    assert "X-Forum-Signature" in push["description"]


async def test_bearer_auth_is_declared_only_with_a_token(local_forum: Forum) -> None:
    open_document = openapi_document(build_app(local_forum, NodeConfig()))
    assert "security" not in open_document
    assert "securitySchemes" not in open_document["components"]
    assert "401" not in _statuses(open_document)
    guarded = openapi_document(build_app(local_forum, NodeConfig(token="t0ken")))
    assert guarded["security"] == [{"bearer": []}]
    assert guarded["paths"]["/v1/take"]["post"]["responses"]["401"]
    assert "401" not in guarded["paths"]["/healthz"]["get"]["responses"]


async def test_the_status_schema_is_the_status_a_node_answers(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("described")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{node.url}/v1/openapi.json") as response:
            document = await response.json()
        async with http.get(f"{node.url}/v1/status") as response:
            status = await response.json()
    assert "security" not in document  # this node has no token
    schema = document["components"]["schemas"]["Status"]
    assert set(status) == set(schema["properties"]) == set(schema["required"])
    assert "reserved" in status
    jsonschema.validate(status, schema)


# -- the document cannot drift from what the node serves and enforces (issue 11) --------


async def test_a_node_advertises_the_limits_it_enforces(forum_nodes: ForumNodes) -> None:
    """A node started with other limits says those in its document, and the
    numbers it says are the ones it holds requests to."""
    node = await forum_nodes.start(
        "limited", "--max-batch", "7", "--max-wait", "2.5", "--max-payload", "2048"
    )
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{node.url}/v1/openapi.json") as response:
            document = await response.json()
        schemas = document["components"]["schemas"]
        for model, field in (("Ids", "ids"), ("ExtendBody", "ids"), ("BatchWriteBody", "payloads")):
            assert "max_batch (7)" in schemas[model]["properties"][field]["description"]
        assert schemas["ExtendBody"]["properties"]["lease"]["maximum"] == 3600
        assert "max_payload (2048)" in schemas["WriteBody"]["description"]
        parameters = {
            p["name"]: p["description"]
            for p in document["paths"]["/v1/take/batch"]["post"]["parameters"]
        }
        assert "1 to 7;" in parameters["limit"]
        assert "2.5 s here" in parameters["wait"]
        for limit, status in (("7", 200), ("8", 400)):
            async with http.post(f"{node.url}/v1/take/batch?prefix=&limit={limit}") as response:
                assert response.status == status, await response.text()
        ids = {"ids": [f"limited-x:{i}" for i in range(1, 9)]}
        async with http.post(f"{node.url}/v1/ack/batch", json=ids) as response:
            assert response.status == 413
        for size, status in ((2048, 201), (2049, 413)):
            async with http.post(f"{node.url}/v1/tuples", data=b"j" * size) as response:
                assert response.status == status, await response.text()


async def test_security_is_declared_exactly_where_the_token_is_asked(
    forum_nodes: ForumNodes,
) -> None:
    """Each operation of a node with a token (and replication) is asked with
    no token and with the right one: it refuses the first and not the second
    (401 only without) if and only if its document declares bearer security."""
    node = await forum_nodes.start("guarded", "--cluster-secret", "peers-s3cret", token="t0ken")
    async with aiohttp.ClientSession() as http:
        right = {"Authorization": "Bearer t0ken"}
        async with http.get(f"{node.url}/v1/openapi.json", headers=right) as response:
            document = await response.json()
        declared, enforced = {}, {}
        for path, operations in document["paths"].items():
            for method, operation in operations.items():
                declared[method, path] = operation["security"] == [{"bearer": []}]
                statuses = []
                for headers in ({}, right):
                    async with http.request(method, node.url + path, headers=headers) as answer:
                        statuses.append(answer.status)
                enforced[method, path] = statuses[0] == 401 and statuses[1] != 401
    assert declared == enforced
    assert not declared["get", "/healthz"] and not declared["get", "/readyz"]
    assert declared["post", "/v1/take"] and declared["get", "/metrics"]
    assert not declared["post", "/v1/cluster/replication/push"]  # HMAC-signed instead


async def test_every_served_route_is_described_with_and_without_extensions(
    local_forum: Forum,
) -> None:
    for config, extensions in ((NodeConfig(), []), (NodeConfig(token="t"), [extension])):
        app = build_app(local_forum, config, extensions)
        assert _served(app) == _described(openapi_document(app))


async def test_the_dashboards_routes_are_described_as_they_are_served(local_forum: Forum) -> None:
    """Its pages and assets, and the job actions only with a Lens; each
    behind the token but the login page and the assets."""
    for config, lens in ((NodeConfig(), None), (NodeConfig(token="t"), "redis://127.0.0.1:1/0")):
        app = build_app(local_forum, config, [extension, dashboard(lens_url=lens)])
        document = openapi_document(app)
        assert _served(app) == _described(document)
    paths = document["paths"]
    assert {"/ui/job/retry", "/ui/jobs/act"} <= set(paths)
    assert paths["/ui/peers"]["get"]["security"] == [{"bearer": []}]
    assert paths["/ui/login"]["get"]["security"] == []
    assert paths["/ui/static/dashboard.js"]["get"]["security"] == []
    (next_,) = paths["/ui/login"]["get"]["parameters"]
    pattern = next_["schema"]["pattern"]
    for target, fits in (("/ui/peers?x=1", True), ("//elsewhere/ui", False), ("/v1/status", False)):
        assert (re.search(pattern, target) is not None) is fits
        assert is_page_path(target) is fits
    assert tuple(state.value for state in JobState) == JOB_STATES


async def test_the_watch_is_described_as_an_event_stream(local_forum: Forum) -> None:
    """``GET /v1/watch`` (issue 14): its answer is text/event-stream, its query
    the prefix pair, and ``Last-Event-ID`` its resumption header."""
    document = openapi_document(build_app(local_forum, NodeConfig()))
    watch = document["paths"]["/v1/watch"]["get"]
    assert set(watch["responses"]["200"]["content"]) == {"text/event-stream"}
    assert {(p["name"], p["in"]) for p in watch["parameters"]} == {
        ("prefix", "query"),
        ("prefix_b64", "query"),
        ("Last-Event-ID", "header"),
    }
    assert {"400", "503"} <= set(watch["responses"])
    assert "Last-Event-ID" not in str(document["paths"]["/v1/read"])
