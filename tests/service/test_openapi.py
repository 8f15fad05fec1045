"""The served OpenAPI document is the node's own: bearer auth only with a token,
the cluster routes only with replication, and a ``Status`` that is exactly
what ``/v1/status`` answers."""

from __future__ import annotations

from typing import Any

import aiohttp
import jsonschema

from node.config import NodeConfig
from node.forum import Forum
from node.web_app import build_app
from node.web_openapi import openapi_document
from replication import extension
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
