"""The OpenAPI 3.1 description of the client API, served at ``/v1/openapi.json``.

Written by hand next to ``docs/http-api.md``; a test checks that every route
the app serves is described here and nothing more.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from node.web_bodies import ENTRY_ID_HEADER, JSON, MSGPACK, RAW, TEXT

_ERROR = {"$ref": "#/components/responses/Error"}
_PREFIX = [
    {"$ref": "#/components/parameters/prefix"},
    {"$ref": "#/components/parameters/prefix_b64"},
]
_ENTRY_ID = {
    "name": "id",
    "in": "query",
    "required": True,
    "description": "An entry id, origin:seq (as the reserve answer's X-Forum-Entry-Id).",
    "schema": {"type": "string"},
}


def _flag(name: str, description: str) -> dict[str, Any]:
    return {
        "200": {
            "description": description,
            "content": _json_and_msgpack(
                {"type": "object", "properties": {name: {"type": "boolean"}}}
            ),
        },
        "400": _ERROR,
        "401": _ERROR,
    }


_WAIT = {"$ref": "#/components/parameters/wait"}
_TUPLE = {"$ref": "#/components/schemas/Tuple"}


def _json_and_msgpack(schema: dict[str, Any]) -> dict[str, Any]:
    return {JSON: {"schema": schema}, MSGPACK: {"schema": schema}}


def _single_tuple(description: str) -> dict[str, Any]:
    return {
        "200": {
            "description": description,
            "headers": {
                ENTRY_ID_HEADER: {
                    "description": "The tuple's entry id (raw responses).",
                    "schema": {"type": "string"},
                }
            },
            "content": {
                RAW: {"schema": {"type": "string", "format": "binary"}},
                **_json_and_msgpack(_TUPLE),
            },
        },
        "204": {"description": "Nothing matched (within the wait)."},
        "400": _ERROR,
        "401": _ERROR,
        "406": _ERROR,
        "503": _ERROR,
    }


def _document() -> dict[str, Any]:
    ids = {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "string"}}}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Forum node API",
            "version": "1",
            "description": "A replicated tuple space: write tuples, take or read them by "
            "byte prefix. See docs/http-api.md.",
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/tuples": {
                "post": {
                    "summary": "Write one tuple",
                    "requestBody": {
                        "required": True,
                        "content": {
                            RAW: {"schema": {"type": "string", "format": "binary"}},
                            **_json_and_msgpack({"$ref": "#/components/schemas/WriteBody"}),
                        },
                    },
                    "responses": {
                        "201": {
                            "description": "Durable; its entry id.",
                            "content": {
                                **_json_and_msgpack(
                                    {"type": "object", "properties": {"id": {"type": "string"}}}
                                ),
                                TEXT: {"schema": {"type": "string"}},
                            },
                        },
                        "400": _ERROR,
                        "401": _ERROR,
                        "413": _ERROR,
                    },
                },
                "get": {
                    "summary": "List live tuples by prefix, oldest first, a page at a time",
                    "parameters": [
                        *_PREFIX,
                        {
                            "name": "cursor",
                            "in": "query",
                            "schema": {"type": "integer"},
                            "description": "next_cursor of the previous page; 0 to start.",
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "One page.",
                            "content": _json_and_msgpack(
                                {
                                    "type": "object",
                                    "properties": {
                                        "tuples": {"type": "array", "items": _TUPLE},
                                        "next_cursor": {"type": ["integer", "null"]},
                                    },
                                }
                            ),
                        },
                        "400": _ERROR,
                        "401": _ERROR,
                    },
                },
            },
            "/v1/tuples/batch": {
                "post": {
                    "summary": "Write many tuples: all become durable, or none",
                    "requestBody": {
                        "required": True,
                        "content": _json_and_msgpack(
                            {"$ref": "#/components/schemas/BatchWriteBody"}
                        ),
                    },
                    "responses": {
                        "201": {
                            "description": "Their ids, in order.",
                            "content": _json_and_msgpack(ids),
                        },
                        "400": _ERROR,
                        "401": _ERROR,
                        "413": _ERROR,
                        "415": _ERROR,
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
            "/v1/reserve": {
                "post": {
                    "summary": "Reserve the oldest live match for lease s (then ack or release)",
                    "parameters": [
                        *_PREFIX,
                        _WAIT,
                        {
                            "name": "lease",
                            "in": "query",
                            "required": True,
                            "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
                        },
                    ],
                    "responses": _single_tuple(
                        "The tuple, reserved: out of reach until acked, "
                        "released or its lease runs out."
                    ),
                },
            },
            "/v1/reserve/batch": {
                "post": {
                    "summary": "Reserve up to limit matches for lease seconds",
                    "parameters": [
                        *_PREFIX,
                        _WAIT,
                        {
                            "name": "lease",
                            "in": "query",
                            "required": True,
                            "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "The tuples reserved (possibly none).",
                            "content": _json_and_msgpack(
                                {
                                    "type": "object",
                                    "properties": {"tuples": {"type": "array", "items": _TUPLE}},
                                }
                            ),
                        },
                        "400": _ERROR,
                        "401": _ERROR,
                    },
                },
            },
            "/v1/ack/batch": {
                "post": {
                    "summary": "Take many reserved tuples for good, in one append",
                    "requestBody": {
                        "required": True,
                        "content": _json_and_msgpack(
                            {
                                "type": "object",
                                "properties": {
                                    "ids": {"type": "array", "items": {"type": "string"}}
                                },
                                "required": ["ids"],
                            }
                        ),
                    },
                    "responses": {
                        "200": {
                            "description": "One flag per id: false if it was no longer here.",
                            "content": _json_and_msgpack(
                                {
                                    "type": "object",
                                    "properties": {
                                        "acked": {"type": "array", "items": {"type": "boolean"}}
                                    },
                                }
                            ),
                        },
                        "400": _ERROR,
                        "401": _ERROR,
                        "413": _ERROR,
                        "415": _ERROR,
                    },
                },
            },
            "/v1/ack": {
                "post": {
                    "summary": "Take a reserved tuple for good",
                    "parameters": [_ENTRY_ID],
                    "responses": _flag("acked", "false if the tuple is no longer here"),
                },
            },
            "/v1/release": {
                "post": {
                    "summary": "Give a reserved tuple back now",
                    "parameters": [_ENTRY_ID],
                    "responses": _flag("released", "false if it was not reserved"),
                },
            },
            "/v1/take/batch": {
                "post": {
                    "summary": "Take up to limit tuples: all or none",
                    "parameters": [
                        *_PREFIX,
                        _WAIT,
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "The tuples taken (possibly none).",
                            "content": _json_and_msgpack(
                                {
                                    "type": "object",
                                    "properties": {"tuples": {"type": "array", "items": _TUPLE}},
                                }
                            ),
                        },
                        "400": _ERROR,
                        "401": _ERROR,
                    },
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
                            "content": _json_and_msgpack(
                                {"type": "object", "properties": {"count": {"type": "integer"}}}
                            ),
                        },
                        "400": _ERROR,
                        "401": _ERROR,
                    },
                },
            },
            "/v1/status": {
                "get": {
                    "summary": "The node's identity, contents and peers",
                    "responses": {
                        "200": {
                            "description": "Status.",
                            "content": _json_and_msgpack({"$ref": "#/components/schemas/Status"}),
                        },
                        "401": _ERROR,
                    },
                },
            },
            "/v1/openapi.json": {
                "get": {
                    "summary": "This document",
                    "responses": {"200": {"description": "OpenAPI 3.1", "content": {JSON: {}}}},
                },
            },
            "/healthz": {
                "get": {
                    "summary": "The process is up (no token needed)",
                    "security": [],
                    "responses": {"200": {"description": "Up."}},
                },
            },
            "/readyz": {
                "get": {
                    "summary": "The Strand is open and the node is not shutting down "
                    "(no token needed)",
                    "security": [],
                    "responses": {"200": {"description": "Ready."}, "503": _ERROR},
                },
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (behind the token when one is set)",
                    "responses": {
                        "200": {"description": "Prometheus text format.", "content": {TEXT: {}}}
                    },
                },
            },
        },
        "components": {
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
                    "schema": {"type": "number", "minimum": 0},
                    "description": "Seconds to wait for a match (cut to the node's "
                    "max_wait); absent or 0 answers at once.",
                },
            },
            "schemas": {
                "Tuple": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": "origin:seq"},
                        "payload": {"description": "text (JSON) or bytes (msgpack)"},
                        "payload_b64": {
                            "type": "string",
                            "description": "JSON only, when not UTF-8",
                        },
                    },
                    "required": ["id"],
                },
                "WriteBody": {
                    "type": "object",
                    "properties": {"payload": {}, "payload_b64": {"type": "string"}},
                    "additionalProperties": False,
                    "description": "Exactly one of payload or payload_b64.",
                },
                "BatchWriteBody": {
                    "type": "object",
                    "properties": {
                        "payloads": {"type": "array"},
                        "payloads_b64": {"type": "array", "items": {"type": "string"}},
                    },
                    "additionalProperties": False,
                    "description": "Exactly one of payloads or payloads_b64.",
                },
                "Status": {
                    "type": "object",
                    "properties": {
                        name: {"type": kind}
                        for name, kind in (
                            ("node_id", "string"),
                            ("origin", "string"),
                            ("advertise", "string"),
                            ("version", "string"),
                            ("uptime_seconds", "number"),
                            ("entries", "integer"),
                            ("live", "integer"),
                            ("strand_bytes", "integer"),
                            ("segments", "integer"),
                            ("waiting_takers", "integer"),
                            ("long_polls", "integer"),
                            ("writes", "integer"),
                            ("takes", "integer"),
                            ("double_takes", "integer"),
                            ("tails_cut", "integer"),
                            ("fsync", "string"),
                            ("peers", "array"),
                        )
                    },
                },
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
        },
    }


OPENAPI = _document()


async def openapi_handler(request: web.Request) -> web.Response:
    """``GET /v1/openapi.json``."""
    return web.json_response(OPENAPI)
