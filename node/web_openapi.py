"""The OpenAPI 3.1 description of the node's API, served at ``/v1/openapi.json``.

Written by hand next to ``docs/http-api.md``. What is served is made for the
node that serves it (:func:`openapi_document`): bearer auth and the 401s only
when it has a token, batch limits from its config, and the cluster routes
only when replication added them. Tests check that every route the app
serves is described and nothing more, and fuzz a real node against it
(``tests/service/test_schemathesis.py``).

Query numbers are described as the strings they are on the wire, with the
grammar of :mod:`node.web_bodies` as their pattern.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from typing import Any

from aiohttp import web

from node.config import NodeConfig
from node.web_bodies import DELIVERIES_HEADER, ENTRY_ID_HEADER, JSON, MSGPACK, RAW, TEXT, Query
from node.web_keys import CONFIG
from node.web_status import NodeStatus

_ERROR = {"$ref": "#/components/responses/Error"}
_TUPLE = {"$ref": "#/components/schemas/Tuple"}
_WAIT = {"$ref": "#/components/parameters/wait"}
_PREFIX = [
    {"$ref": "#/components/parameters/prefix"},
    {"$ref": "#/components/parameters/prefix_b64"},
]
#: The wire grammar of the query numbers (node.web_bodies).
_INTEGER = "^[0-9]{1,19}$"
_SECONDS = "^[0-9]{1,10}(\\.[0-9]{1,9})?$"
_ENTRY_ID = {
    "name": "id",
    "in": "query",
    "required": True,
    "description": "An entry id, origin:seq (as a raw answer's Forum-Entry-Id).",
    "schema": {"type": "string"},
}
_LEASE = {
    "name": "lease",
    "in": "query",
    "required": True,
    "description": "Seconds the tuple stays reserved: > 0 and at most 3600.",
    "schema": {"type": "string", "pattern": _SECONDS},
}
#: What any route of the API may answer besides its own: a bad query or a
#: body where none belongs (400), a compressed body (415), a node shutting
#: down or a failed disk (503).
_ALWAYS = ("400", "415", "503")
#: And a route that reads a body: too slow (408), too large (413).
_WITH_BODY = ("408", "413")
#: The cluster routes (replication/routes.py), described when the app serves them.
_CLUSTER = "/v1/cluster/replication/"


def _integer(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "description": f"{description} ASCII digits only.",
        "schema": {"type": "string", "pattern": _INTEGER},
    }


def _json_and_msgpack(schema: dict[str, Any]) -> dict[str, Any]:
    return {JSON: {"schema": schema}, MSGPACK: {"schema": schema}}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


def _ok(description: str, schema: dict[str, Any], status: str = "200") -> dict[str, Any]:
    return {status: {"description": description, "content": _json_and_msgpack(schema)}}


def _tuples(description: str) -> dict[str, Any]:
    schema = _object({"tuples": {"type": "array", "items": _TUPLE}}, ("tuples",))
    return {**_ok(description, schema), "406": _ERROR}


def _single_tuple(description: str) -> dict[str, Any]:
    return {
        "200": {
            "description": description,
            "headers": {
                ENTRY_ID_HEADER: {
                    "description": "The tuple's entry id (raw answers).",
                    "schema": {"type": "string"},
                },
                DELIVERIES_HEADER: {
                    "description": "Reservations only (raw answers): the delivery count.",
                    "schema": {"type": "integer", "minimum": 1},
                },
            },
            "content": {
                RAW: {"schema": {"type": "string", "format": "binary"}},
                **_json_and_msgpack(_TUPLE),
            },
        },
        "204": {"description": "Nothing matched (within the wait)."},
        "406": _ERROR,
    }


def _flag(name: str, description: str) -> dict[str, Any]:
    return {**_ok(description, _object({name: {"type": "boolean"}}, (name,))), "406": _ERROR}


def _status_schema() -> dict[str, Any]:
    """``Status`` from :class:`NodeStatus` itself, so the two cannot drift."""
    kinds = {str: "string", int: "integer", float: "number", bool: "boolean"}
    hints = typing.get_type_hints(NodeStatus)
    properties: dict[str, Any] = {}
    for field in dataclasses.fields(NodeStatus):
        hint = hints[field.name]
        if field.name == "peers":
            properties["peers"] = {"type": "array", "items": {"type": "object"}}
        elif isinstance(hint, types.UnionType):  # a ``str | None``
            properties[field.name] = {"type": ["string", "null"]}
        else:
            properties[field.name] = {"type": kinds[hint]}
    return {
        "type": "object",
        "properties": properties,
        "required": [f.name for f in dataclasses.fields(NodeStatus)],
    }


def _client_paths(max_batch: int) -> dict[str, Any]:
    batch_limit = _integer("limit", f"Most tuples to answer with: 1 to {max_batch}; default 100.")
    return {
        "/v1/tuples": {
            "post": {
                "summary": "Write one tuple",
                "requestBody": {
                    "required": True,
                    "content": {
                        RAW: {"schema": {"type": "string", "format": "binary", "minLength": 1}},
                        **_json_and_msgpack({"$ref": "#/components/schemas/WriteBody"}),
                    },
                },
                "responses": {
                    "201": {
                        "description": "Durable; its entry id.",
                        "content": {
                            **_json_and_msgpack(_object({"id": {"type": "string"}}, ("id",))),
                            TEXT: {"schema": {"type": "string"}},
                        },
                    },
                    "406": _ERROR,
                },
            },
            "get": {
                "summary": "List live tuples by prefix, oldest first, a page at a time",
                "parameters": [
                    *_PREFIX,
                    _integer("cursor", "next_cursor of the previous page; 0 (default) to start."),
                    _integer("limit", "Most tuples per page: 1 to 1000; default 100."),
                ],
                "responses": {
                    **_ok(
                        "One page.",
                        _object(
                            {
                                "tuples": {"type": "array", "items": _TUPLE},
                                "next_cursor": {"type": ["integer", "null"]},
                            },
                            ("tuples", "next_cursor"),
                        ),
                    ),
                    "406": _ERROR,
                },
            },
        },
        "/v1/tuples/batch": {
            "post": {
                "summary": "Write many tuples: all become durable, or none",
                "requestBody": {
                    "required": True,
                    "content": _json_and_msgpack({"$ref": "#/components/schemas/BatchWriteBody"}),
                },
                "responses": {
                    **_ok("Their ids, in order.", {"$ref": "#/components/schemas/Ids"}, "201"),
                    "406": _ERROR,
                },
            },
        },
        "/v1/take": {
            "post": {
                "summary": "Take the oldest live tuple that starts with the prefix",
                "parameters": [*_PREFIX, _WAIT],
                "responses": _single_tuple("The tuple, now taken."),
            },
        },
        "/v1/take/batch": {
            "post": {
                "summary": "Take up to limit tuples: all or none",
                "parameters": [*_PREFIX, _WAIT, batch_limit],
                "responses": _tuples("The tuples taken (possibly none)."),
            },
        },
        "/v1/reserve": {
            "post": {
                "summary": "Reserve the oldest live match for lease s (then ack or release)",
                "parameters": [*_PREFIX, _WAIT, _LEASE],
                "responses": _single_tuple(
                    "The tuple, reserved: out of reach until acked, released or its lease ends."
                ),
            },
        },
        "/v1/reserve/batch": {
            "post": {
                "summary": "Reserve up to limit matches for lease seconds",
                "parameters": [*_PREFIX, _WAIT, _LEASE, batch_limit],
                "responses": _tuples("The tuples reserved (possibly none)."),
            },
        },
        "/v1/ack": {
            "post": {
                "summary": "Take a reserved tuple for good",
                "parameters": [_ENTRY_ID],
                "responses": _flag("acked", "false if the tuple is no longer here"),
            },
        },
        "/v1/ack/batch": {
            "post": {
                "summary": "Take many reserved tuples for good, in one append",
                "requestBody": {
                    "required": True,
                    "content": _json_and_msgpack({"$ref": "#/components/schemas/Ids"}),
                },
                "responses": {
                    **_ok(
                        "One flag per id: false if it was no longer here.",
                        _object({"acked": {"type": "array", "items": {"type": "boolean"}}}),
                    ),
                    "406": _ERROR,
                },
            },
        },
        "/v1/reserve/extend": {
            "post": {
                "summary": "Renew many reservations to lease seconds from now (a heartbeat)",
                "requestBody": {
                    "required": True,
                    "content": _json_and_msgpack({"$ref": "#/components/schemas/Extend"}),
                },
                "responses": {
                    **_ok(
                        "One flag per id: false if it was no longer reserved.",
                        _object({"extended": {"type": "array", "items": {"type": "boolean"}}}),
                    ),
                    "406": _ERROR,
                },
            },
        },
        "/v1/release": {
            "post": {
                "summary": "Give a reserved tuple back now",
                "parameters": [_ENTRY_ID],
                "responses": _flag("released", "false if it was not reserved"),
            },
        },
        "/v1/read": {
            "get": {
                "summary": "Read the oldest live tuple that starts with the prefix",
                "parameters": [*_PREFIX, _WAIT],
                "responses": _single_tuple("The tuple, still live."),
            },
        },
        "/v1/count": {
            "get": {
                "summary": "Count live tuples by prefix",
                "parameters": _PREFIX,
                "responses": {
                    "200": {
                        "description": "The count.",
                        "content": {
                            **_json_and_msgpack(
                                _object({"count": {"type": "integer"}}, ("count",))
                            ),
                            TEXT: {"schema": {"type": "string"}},
                        },
                    },
                    "406": _ERROR,
                },
            },
        },
        "/v1/status": {
            "get": {
                "summary": "The node's identity, contents and peers",
                "responses": {
                    **_ok("Status.", {"$ref": "#/components/schemas/Status"}),
                    "406": _ERROR,
                },
            },
        },
        "/v1/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {
                    "200": {"description": "OpenAPI 3.1", "content": {JSON: {"schema": {}}}}
                },
            },
        },
        "/healthz": {
            "get": {
                "summary": "The process is up (no token needed)",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Up.",
                        "content": {JSON: {"schema": _object({"status": {"const": "ok"}})}},
                    }
                },
            },
        },
        "/readyz": {
            "get": {
                "summary": "The Strand is open and the node is not shutting down (no token needed)",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Ready.",
                        "content": {JSON: {"schema": _object({"status": {"type": "string"}})}},
                    },
                },
            },
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics in the text format (behind the token when one "
                "is set)",
                "responses": {
                    "200": {
                        "description": "Prometheus text format.",
                        "content": {TEXT: {"schema": {"type": "string"}}},
                    }
                },
            },
        },
    }


def _cluster_operation(summary: str, message: str | None) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "description": "For peers only: msgpack messages (replication/messages.py). With a "
        "cluster secret, the request carries X-Forum-Signature: t=<unix seconds>,s=<hex "
        "HMAC-SHA256 of the secret over method, path, t and body> and the answer is signed "
        "back (replication/auth.py); without one, nothing is signed.",
        "security": [],
        "parameters": [
            {
                "name": "X-Forum-Signature",
                "in": "header",
                "description": "The request's HMAC (required when the node has a cluster secret).",
                "schema": {"type": "string"},
            }
        ],
        "responses": {
            "200": {
                "description": "The answer message, signed when there is a secret.",
                "content": {MSGPACK: {"schema": {"type": "object"}}},
            },
            "401": _ERROR,
            "409": _ERROR,
        },
    }
    if message is not None:
        operation["requestBody"] = {
            "required": True,
            "description": f"A {message} message.",
            "content": {MSGPACK: {"schema": {"type": "object"}}},
        }
    return operation


_CLUSTER_PATHS = {
    f"{_CLUSTER}push": {"post": _cluster_operation("Apply a peer's push of entries", "push")},
    f"{_CLUSTER}pull": {"post": _cluster_operation("Send a page of what the peer lacks", "pull")},
    f"{_CLUSTER}members": {"get": _cluster_operation("This node and the peers it reaches", None)},
}


def _components() -> dict[str, Any]:
    text = {"type": "string", "minLength": 1}
    return {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "parameters": {
            "prefix": {
                "name": "prefix",
                "in": "query",
                "schema": {"type": "string"},
                "description": "UTF-8 byte prefix; absent matches every tuple.",
            },
            "prefix_b64": {
                "name": "prefix_b64",
                "in": "query",
                "schema": {"type": "string"},
                "description": "The prefix as URL-safe base64, for any bytes.",
            },
            "wait": {
                "name": "wait",
                "in": "query",
                "schema": {"type": "string", "pattern": _SECONDS},
                "description": "Seconds to wait for a match, such as 5 or 0.25 (cut to the "
                "node's max_wait); absent or 0 answers at once.",
            },
        },
        "schemas": {
            "Tuple": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "origin:seq"},
                    "payload": {"description": "text (JSON) or bytes (msgpack)"},
                    "payload_b64": {"type": "string", "description": "JSON only, when not UTF-8"},
                    "deliveries": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Reservations only: 1 the first time, n when n-1 "
                        "earlier leases of this tuple on this node ran out",
                    },
                },
                "required": ["id"],
            },
            "WriteBody": {
                "type": "object",
                "properties": {"payload": text, "payload_b64": text},
                "additionalProperties": False,
                "minProperties": 1,
                "maxProperties": 1,
                "description": "Exactly one of payload (text; bytes too in msgpack) or "
                "payload_b64; never empty.",
            },
            "BatchWriteBody": {
                "type": "object",
                "properties": {
                    "payloads": {"type": "array", "items": text},
                    "payloads_b64": {"type": "array", "items": text},
                },
                "additionalProperties": False,
                "minProperties": 1,
                "maxProperties": 1,
                "description": "Exactly one of payloads or payloads_b64.",
            },
            "Ids": {
                "type": "object",
                "properties": {"ids": {"type": "array", "items": {"type": "string"}}},
                "required": ["ids"],
                "additionalProperties": False,
            },
            "Extend": {
                "type": "object",
                "properties": {
                    "ids": {"type": "array", "items": {"type": "string"}},
                    "lease": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
                },
                "required": ["ids", "lease"],
                "additionalProperties": False,
            },
            "Status": _status_schema(),
            "Error": {
                "type": "object",
                "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
                "required": ["error", "message"],
            },
        },
        "responses": {
            "Error": {
                "description": "The request was refused and changed nothing.",
                "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        },
    }


def build_document(
    *, token: bool, max_batch: int = NodeConfig().max_batch, cluster: bool = False
) -> dict[str, Any]:
    """The document for a node with (or without) a token, and with the cluster
    routes when it serves them."""
    paths = _client_paths(max_batch)
    if cluster:
        paths |= copy.deepcopy(_CLUSTER_PATHS)
    for path, operations in paths.items():
        for operation in operations.values():
            responses = operation["responses"]
            guarded = operation.get("security") != []
            extra = [*_ALWAYS, *(_WITH_BODY if "requestBody" in operation else ())]
            if token and guarded:
                extra.append("401")
            if path in ("/healthz", "/readyz"):
                extra = ["503"] if path == "/readyz" else []
            for status in extra:
                responses.setdefault(status, _ERROR)
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Forum node API",
            "version": "1",
            "description": "A replicated tuple space: write tuples, take or read them by "
            "byte prefix. See docs/http-api.md.",
        },
        "paths": paths,
        "components": _components(),
    }
    if token:
        document["security"] = [{"bearer": []}]
    else:
        del document["components"]["securitySchemes"]
    return document


#: The document of a node with the default config, no token and no replication.
OPENAPI = build_document(token=False)


def openapi_document(app: web.Application) -> dict[str, Any]:
    """The document for the node ``app`` serves."""
    config = app[CONFIG]
    cluster = any(
        route.resource is not None and route.resource.canonical.startswith(_CLUSTER)
        for route in app.router.routes()
    )
    return build_document(
        token=config.token is not None, max_batch=config.max_batch, cluster=cluster
    )


async def openapi_handler(request: web.Request) -> web.Response:
    """``GET /v1/openapi.json``."""
    Query(request, ())
    return web.json_response(openapi_document(request.app))
