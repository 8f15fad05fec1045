"""The OpenAPI 3.1 description of the node's API, served at ``/v1/openapi.json``.

Made from the declarations the node serves by (:mod:`forum.node.api.model`,
:mod:`~forum.node.api.parameters`, :mod:`~forum.node.api.operations`): the
paths from its operations, the schemas from its msgspec Structs (and the
``NodeStatus`` dataclass), the parameters from its parameter table, the
numbers from the serving node's :class:`~forum.node.api.model.Limits`, and the
security of each operation from the rule the ``authenticate`` middleware
enforces (:func:`forum.node.http.auth.bearer_secret`). Only the cluster routes,
replication's, are described here by hand, and only when the app serves them;
an extension describes its own (the dashboard's pages, ``DESCRIBED``), to
which the refusals any route may give and the security are added here.
Tests check that every route the app serves is described and nothing more,
and fuzz a real node against it (``tests/service/test_schemathesis.py``).

Query numbers are described as the strings they are on the wire, with the
grammar of :data:`forum.node.api.parameters.GRAMMAR` as their pattern.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import msgspec
from aiohttp import web

from forum.node.api.model import (
    EVENT_STREAM,
    HEADER_SCHEMAS,
    JSON,
    MSGPACK,
    RAW,
    TEXT,
    BatchWriteBody,
    ExtendBody,
    Ids,
    Limits,
    Payload,
    Problem,
    WriteBody,
)
from forum.node.api.operations import OPERATIONS, SPEC, WATCH, WRITE, WRITE_BATCH, Operation
from forum.node.api.parameters import GRAMMAR, Parameter
from forum.node.api.status import NodeStatus
from forum.node.config.node import NodeConfig
from forum.node.core.codec import MAX_KEY_BYTES
from forum.node.http.auth import CLUSTER_PREFIX, bearer_secret
from forum.node.http.keys import CONFIG, DESCRIBED, LIMITS, OPEN_ROUTES, SELF_AUTHENTICATED
from forum.node.http.query import Query

_ERROR = {"$ref": "#/components/responses/Error"}
#: What any route may answer besides its own: a bad query, or a body where
#: none belongs (400), a browser's request from another site's page (403,
#: forum.node.http.auth), a compressed body (415).
_ALWAYS = ("400", "403", "415")
#: And a route that reads a body: too slow (408), too large (413).
_WITH_BODY = ("408", "413")
#: And every route but the liveness probe: a node shutting down or a failed disk.
_UNAVAILABLE = "503"
#: The cluster routes (replication/forum/replication/routes.py), described when the app serves them.
_CLUSTER = f"{CLUSTER_PREFIX}replication/"
#: The operations a prefix's limit may refuse (429).
_LIMITED = (WRITE, WRITE_BATCH)
#: Component names where the Python name is not the API's.
_NAMES = {NodeStatus.__name__: "Status"}


def _ref(model: type[Any]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{_NAMES.get(model.__name__, model.__name__)}"}


def _schema_hook(kind: type[Any]) -> dict[str, Any]:
    """A payload, as the JSON Schema of its text."""
    if kind is Payload:
        return {
            "type": "string",
            "minLength": 1,
            "description": "A payload: text (JSON; bytes too in msgpack); never empty.",
        }
    raise NotImplementedError(kind)


def _described(model: type[Any]) -> Any:
    """``model`` as the document describes it: payloads spelt as :class:`Payload`."""
    return model[Payload] if getattr(model, "__parameters__", ()) else model


def _schemas(limits: Limits) -> dict[str, Any]:
    """Every Struct of the operations, their bodies and the error, by name."""
    models = {
        model
        for operation in OPERATIONS
        for model in (operation.answer.model, operation.body)
        if model is not None
    }
    _, schemas = msgspec.json.schema_components(
        [_described(m) for m in sorted({*models, Problem}, key=lambda m: m.__name__)],
        schema_hook=_schema_hook,
        ref_template="#/components/schemas/{name}",
    )
    for python, api in _NAMES.items():
        schemas[api] = schemas.pop(python)
    for model in models:
        if getattr(model, "__parameters__", ()):  # msgspec names WriteBody[Payload] so
            schema = schemas[model.__name__] = schemas.pop(f"{model.__name__}_{Payload.__name__}_")
            schema["title"] = model.__name__
    # Every field of the status is sent, defaults included.
    schemas["Status"]["required"] = list(schemas["Status"]["properties"])
    for model in models:
        one_of = getattr(model, "one_of", ())
        if one_of:  # exactly one of them (decode checks it, as missing_field)
            schemas[model.__name__] |= {"minProperties": 1, "maxProperties": 1}
    # The bounds that depend on the node (forum.node.http.bodies checks the same). A
    # batch's length and a payload's size are only described: past them the
    # answer is a 413, which is not a refusal of invalid data to a schema
    # checker (it is to a client).
    for model in (WriteBody, BatchWriteBody):
        schemas[model.__name__]["description"] += (
            f" A payload is at most max_payload ({limits.max_payload}) bytes; more is a 413."
        )
    schemas[BatchWriteBody.__name__]["description"] += (
        f" The whole body (a stream frame too) is at most max_batch_bytes "
        f"({limits.max_batch_bytes}) bytes; more is a 413."
    )
    schemas[ExtendBody.__name__]["properties"]["lease"]["maximum"] = limits.max_lease
    for model in (WriteBody, BatchWriteBody):
        # Spelt as a payload is (a Payload), but it is the write's key.
        schemas[model.__name__]["properties"]["key"] |= {
            "description": "The write's key (its dedup and claim key): text (JSON; bytes "
            f"too in msgpack), 1 to {MAX_KEY_BYTES} bytes.",
            "maxLength": MAX_KEY_BYTES,
        }
    for model, fields in (
        (Ids, ("ids",)),
        (ExtendBody, ("ids",)),
        (BatchWriteBody, ("payloads", "payloads_b64")),
    ):
        for field in fields:
            schemas[model.__name__]["properties"][field]["description"] = (
                f"At most max_batch ({limits.max_batch}) items; more is a 413."
            )
    return schemas


def _parameter(parameter: Parameter, limits: Limits, where: str = "query") -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if parameter.kind in GRAMMAR:
        schema["pattern"] = f"^{GRAMMAR[parameter.kind]}$"
    if where == "path":
        schema["minLength"] = 1
    described: dict[str, Any] = {
        "name": parameter.name,
        "in": where,
        "description": parameter.describe(limits),
        "schema": schema,
    }
    if parameter.required:
        described["required"] = True
    return described


def _content(operation: Operation) -> dict[str, Any]:
    model = operation.answer.model
    document = _ref(model) if model is not None else {}
    by_media = {
        RAW: {"type": "string", "format": "binary"},
        TEXT: {"type": "string"},
        EVENT_STREAM: {"type": "string"},
        JSON: document,
        MSGPACK: document,
    }
    return {media: {"schema": by_media[media]} for media in operation.answer.media}


def _errors(path: str, *, body: bool, bearer: bool, negotiates: bool) -> dict[str, Any]:
    """The refusals a route may answer with, as the middlewares and handlers give them."""
    errors = [*_ALWAYS]
    if negotiates:
        errors.append("406")
    if body:
        errors += _WITH_BODY
    if path != "/healthz":
        errors.append(_UNAVAILABLE)
    if bearer:
        # 403 too: the read token asking for more than a read.
        errors.append("401")
    return {status: _ERROR for status in sorted(errors)}


def _operation(operation: Operation, limits: Limits, bearer: bool) -> dict[str, Any]:
    answer = operation.answer
    success: dict[str, Any] = {"description": answer.description, "content": _content(operation)}
    if answer.headers:
        success["headers"] = {name: HEADER_SCHEMAS[name] for name in answer.headers}
    responses: dict[str, Any] = {str(answer.status): success}
    if operation.none:
        responses["204"] = {"description": "Nothing matched (within the wait)."}
    if operation.not_found is not None:
        responses["404"] = _ERROR  # its description: the error document says why
    responses |= _errors(
        operation.path,
        body=operation.body is not None,
        bearer=bearer,
        negotiates=operation.negotiates,
    )
    described: dict[str, Any] = {
        "summary": operation.summary,
        "security": [{"bearer": []}] if bearer else [],
        "responses": responses,
    }
    if operation in _LIMITED:
        responses["429"] = {
            "description": "A limited prefix is full (Retry-After, and in the body the "
            "prefix, its limit and retry_after).",
            "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
            "content": {JSON: {"schema": _ref(Problem)}},
        }
    parameters = [_parameter(p, limits, "path") for p in operation.in_path]
    parameters += [_parameter(p, limits) for p in operation.parameters]
    if parameters:
        described["parameters"] = parameters
    if operation.body is not None:
        body = _ref(operation.body)
        content: dict[str, Any] = {JSON: {"schema": body}, MSGPACK: {"schema": body}}
        if operation.raw_body:
            raw = {"type": "string", "format": "binary", "minLength": 1}
            content = {RAW: {"schema": raw}, **content}
        described["requestBody"] = {"required": True, "content": content}
    return described


def _cluster_operation(summary: str, message: str | None) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "description": "For peers only: msgpack messages "
        "(replication/forum/replication/messages.py). With a "
        "cluster secret, the request carries X-Forum-Signature: t=<unix seconds>,s=<hex "
        "HMAC-SHA256 of the secret over method, path, t and body> and the answer is signed "
        "back (replication/forum/replication/auth.py); without one, nothing is signed.",
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
            # The signature's (401), a push for another cluster (409).
            "401": _ERROR,
            "409": _ERROR,
            **_errors("", body=message is not None, bearer=False, negotiates=False),
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
    f"{_CLUSTER}lend": {
        "post": _cluster_operation("Reserve this node's own tuples for the asking peer", "lend")
    },
    f"{_CLUSTER}lent": {
        "post": _cluster_operation("Tuples lent to the peer: given back, or kept longer", "lent")
    },
}


#: The kinds of event a watch sends (docs/http-api.md, Watch).
WATCH_EVENTS = ("write", "take", "expire", "ready", "gap", "reset", "overflow")
#: One event of a watch, as an SSE reader sees it (the WHATWG fields; Schemathesis
#: reads an event-stream body as a list of these, and checks each against the
#: schema): ``data`` is a JSON document.
_WATCH_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "enum": list(WATCH_EVENTS)},
        "data": {
            "type": "string",
            "contentMediaType": JSON,
            "description": "The event's document, in JSON (docs/http-api.md, Watch).",
        },
        "id": {"type": "string", "pattern": r"^[0-9a-f]+-[0-9]{1,19}$"},
        "retry": {"type": "integer", "minimum": 0},
    },
}


def _describe_watch(operation: dict[str, Any]) -> None:
    """What the table does not say of ``GET /v1/watch``: its events and its
    resumption header."""
    operation["description"] = (
        "Events `write`, `take`, `expire` (and `ready`, `gap`, `reset`, `overflow`), each "
        "`id: <boot>-<n>`, `event: <kind>`, `data: <JSON>` and a blank line; `: keepalive` "
        "comments while idle. See docs/http-api.md, Watch."
    )
    # The schema of one event: an SSE reader (Schemathesis 4 too) checks each.
    operation["responses"]["200"]["content"][EVENT_STREAM] = {"schema": _WATCH_EVENT}
    operation.setdefault("parameters", []).append(
        {
            "name": "Last-Event-ID",
            "in": "header",
            "description": "The id of the last event seen: the stream resumes after it.",
            "schema": {"type": "string", "pattern": r"^[0-9a-f]+-[0-9]{1,19}$"},
        }
    )


def _extension_paths(
    described: Mapping[str, Mapping[str, Any]],
    config: NodeConfig,
    self_authenticated: frozenset[str],
    open_paths: frozenset[str],
) -> dict[str, Any]:
    """An extension's path items, each operation with its security and the
    refusals any route may give (its own descriptions of a status win)."""
    paths: dict[str, Any] = {}
    for path, item in described.items():
        bearer = bearer_secret(config, self_authenticated, path, open_paths=open_paths) is not None
        for method, given in item.items():
            operation = copy.deepcopy(dict(given))
            operation["security"] = [{"bearer": []}] if bearer else []
            refusals = _errors(path, body=False, bearer=bearer, negotiates=False)
            operation["responses"] = refusals | operation["responses"]
            paths.setdefault(path, {})[method] = operation
    return paths


def build_document(
    config: NodeConfig = NodeConfig(),  # noqa: B008 (frozen: one shared default is safe)
    *,
    cluster: bool = False,
    self_authenticated: frozenset[str] = frozenset(),
    described: Mapping[str, Mapping[str, Any]] | None = None,
    open_paths: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The document for a node with ``config``, and with the cluster routes
    when it serves them (and says which of its routes check their own
    credentials), and an extension's ``described`` routes (``open_paths``:
    those of them open to anyone)."""
    limits = config.api_limits
    paths: dict[str, Any] = {}
    for operation in OPERATIONS:
        bearer = bearer_secret(config, self_authenticated, operation.path) is not None
        paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(
            operation, limits, bearer
        )
    _describe_watch(paths[WATCH.path]["get"])
    if cluster:
        paths |= copy.deepcopy(_CLUSTER_PATHS)
    paths |= _extension_paths(described or {}, config, self_authenticated, open_paths)
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Forum node API",
            "version": "1",
            "description": "A replicated tuple space: write tuples, take or read them by "
            "byte prefix. See docs/http-api.md.",
        },
        "paths": paths,
        "components": {
            "schemas": _schemas(limits),
            "responses": {
                "Error": {
                    "description": "The request was refused and changed nothing.",
                    "content": {JSON: {"schema": _ref(Problem)}},
                },
            },
        },
    }
    if config.token is not None:
        # The default; each operation says its own (the probes and the
        # self-authenticated cluster routes take none).
        document["security"] = [{"bearer": []}]
        document["components"]["securitySchemes"] = {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "The node's token; or its read token, which may GET and "
                "HEAD (not the stream) and is refused anything else with 403.",
            }
        }
    return document


def openapi_document(app: web.Application) -> dict[str, Any]:
    """The document for the node ``app`` serves."""
    cluster = any(
        route.resource is not None and route.resource.canonical.startswith(_CLUSTER)
        for route in app.router.routes()
    )
    return build_document(
        app[CONFIG],
        cluster=cluster,
        self_authenticated=app[SELF_AUTHENTICATED],
        described=app[DESCRIBED],
        open_paths=app[OPEN_ROUTES],
    )


async def openapi_handler(request: web.Request) -> web.Response:
    """``GET /v1/openapi.json``."""
    Query(request, SPEC, request.app[LIMITS])
    return web.json_response(openapi_document(request.app))


#: The document of a node with the default config, no token and no replication.
OPENAPI = build_document()
