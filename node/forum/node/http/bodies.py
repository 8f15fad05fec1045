"""What comes into the HTTP API: content negotiation, request bodies, errors.

Three representations, chosen by ``Content-Type`` on the way in and
``Accept`` on the way out:

=========  ===========================  =====================================
raw        ``application/octet-stream``  one payload, as is (ids in headers)
JSON       ``application/json``          for people: text payloads as
                                         ``payload``, others as ``payload_b64``
msgpack    ``application/msgpack``       for programs: payloads as bin
=========  ===========================  =====================================

The bodies and limits are declared in :mod:`forum.node.api.model`; this
module holds each request body to them (the query string:
:mod:`forum.node.http.query`; a write's payloads and options:
:mod:`forum.node.http.writes`; the answers: :mod:`forum.node.http.responses`).
Everything a request carries is checked before anything is changed, so a
rejected request changes nothing. A rejection is an :class:`ApiProblem`: an
HTTP error whose body is ``{"error": code, "message": text}``.

A body is decoded in one pass by msgspec, straight into its Struct with its
payloads spelt natively (text in JSON, bin in msgpack): the hot path, a
valid batch in msgpack. Only a body that fails (or a msgpack map with a
map16/map32 header) is decoded again, in steps, as the stdlib's json and
msgpack's unpacker read it, to say what is wrong in the API's error codes
(a msgpack payload spelt as text passes them all)::

    malformed_json, malformed_msgpack   not JSON / msgpack: the syntax, nesting
                                        deeper than the decoder's stack, and in
                                        msgpack extension types, maps of more
                                        than 16 keys and keys that are not text
                                        or bin
    invalid_body                        not an object with text keys
    unknown_field, missing_field        the Struct's fields; exactly one of a
                                        pair (``Body.one_of``)
    invalid_field                       a value of the wrong type or range
    empty_payload, payload_too_large    (then) a payload, a batch

A payload is never empty: an empty write is almost always a mistake (curl
sends ``Content-Length: 0`` when its ``@file`` is missing), and an empty tuple
matches every prefix.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import msgpack
import msgspec
from aiohttp import web

from forum.node.api.model import (
    JSON,
    MSGPACK,
    MSGPACK_ALIASES,
    Body,
    ExtendBody,
    Ids,
    Limits,
    Payload,
)
from forum.node.api.operations import Operation
from forum.node.core.entries import EntryId

BodyKind = Literal["raw", "json", "msgpack"]
B = TypeVar("B", bound=Body)
#: No body of the API has more fields; a bigger map is refused as it is read.
_MAX_MAP = 16
#: An id is at most an origin (128) and a seq (20 digits) with a colon.
_ID_BYTES = 160


class ApiProblem(web.HTTPError):
    """An HTTP error with the API's JSON error body.

    It is aiohttp's exception type (so the router's own 404/405 and ours are
    handled alike), not a ``ForumError``: it never leaves the server.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        self.status_code = status
        self.details = dict(details or {})
        super().__init__(
            headers=headers,
            text=json.dumps({"error": code, "message": message, **self.details}),
            content_type=JSON,
        )
        self.code = code
        self.message = message


class BodyTimeout(TimeoutError):
    """Set on a request's body stream when the body is late: a read raises it.

    A ``TimeoutError``, so that aiohttp, draining what is left of the body after
    the answer, stops at once and closes the connection.
    """


def bad_request(code: str, message: str) -> ApiProblem:
    return ApiProblem(400, code, message)


def too_large(message: str) -> ApiProblem:
    return ApiProblem(413, "payload_too_large", message)


# -- negotiation -----------------------------------------------------------------


def negotiate(request: web.Request, operation: Operation) -> str:
    """The media type to answer in: the client's best-ranked one among what
    ``operation`` answers in.

    No ``Accept`` or ``*/*`` gets the first (its default); nothing acceptable
    is a 406, raised before the handler changes anything.
    """
    offers = operation.offers
    default = offers[0]
    header = request.headers.get("Accept", "")
    if not header.strip():
        return default
    if header in offers:  # the common case for programs: one exact type
        return header
    ranked: list[tuple[float, int, str]] = []
    for position, item in enumerate(header.split(",")):
        media, *params = (part.strip() for part in item.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality > 0 and media:
            ranked.append((-quality, position, media.lower()))
    for _, _, media in sorted(ranked):
        if media in MSGPACK_ALIASES and MSGPACK in offers:
            return MSGPACK
        if media in offers:
            return media
        if media == "*/*" or (media.endswith("/*") and default.startswith(media[:-1])):
            return default
    raise ApiProblem(
        406, "not_acceptable", f"can answer only in {', '.join(offers)}; Accept was {header!r}"
    )


def body_kind(request: web.Request) -> BodyKind:
    """How the request body is encoded: by Content-Type; anything else is raw bytes."""
    content_type = request.content_type.lower()
    if content_type == JSON:
        return "json"
    if content_type in MSGPACK_ALIASES:
        return "msgpack"
    return "raw"


# -- reading bodies ----------------------------------------------------------------


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, or a 413 as soon as it is known to exceed ``limit``.

    A declared Content-Length over the limit is refused before reading; a
    chunked body is read only up to the limit.
    """
    declared = request.content_length
    if declared is not None:
        if declared > limit:
            raise too_large(f"the body is {declared} bytes; the limit here is {limit}")
        # Not request.read(), which keeps the body on the request until it is
        # answered: a batch's body is dropped once decoded, so a write holds
        # its payloads, not its payloads and its body (node/forum/node/http/budget.py).
        try:
            return await request.content.readexactly(declared) if declared else b""
        except asyncio.IncompleteReadError as exc:
            raise bad_request(
                "bad_request", f"the body ended after {len(exc.partial)} of {declared} bytes"
            ) from None
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise too_large(f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


# -- decoding bodies into their Structs -------------------------------------------------

#: How each representation spells a payload on the fast path (native to msgspec).
_SPELLING: dict[BodyKind, type] = {"json": str, "msgpack": bytes}
#: And when the fast path fails: msgpack may spell a payload as text too.
_SPELLING_AGAIN: dict[BodyKind, type] = {"json": str, "msgpack": Payload}
_DECODERS: dict[tuple[type[Body], BodyKind], Any] = {}
#: The msgpack headers of a map of 16 keys or more (map16, map32); a fixmap holds 15.
_BIG_MAPS = (b"\xde", b"\xdf")


def _spelt(model: type[B], spelling: type) -> type[B]:
    """``model`` with its payloads spelt as ``spelling`` (if it has payloads)."""
    if not getattr(model, "__parameters__", ()):
        return model
    spelt: type[B] = model[spelling]  # type: ignore[index]
    return spelt


def _decoder(model: type[Body], kind: BodyKind) -> Any:
    decoder = _DECODERS.get((model, kind))
    if decoder is None:
        make = msgspec.json.Decoder if kind == "json" else msgspec.msgpack.Decoder
        decoder = _DECODERS[model, kind] = make(_spelt(model, _SPELLING[kind]))
    return decoder


def _payload_hook(kind_of: type, value: Any) -> Any:
    """msgspec's ``dec_hook`` for a msgpack :class:`Payload`: bin or text (msgspec
    adds where it failed, ``at $.payloads[2]``)."""
    if kind_of is Payload and isinstance(value, str | bytes):
        return Payload(value.encode() if isinstance(value, str) else value)
    raise TypeError(f"a payload must be bytes or text, not {type(value).__name__}")


def decode(body: bytes, model: type[B], kind: BodyKind) -> B:
    """``body`` as a ``model``, or the :class:`ApiProblem` that says what is wrong."""
    if kind == "msgpack" and body[:1] in _BIG_MAPS:
        # msgspec would take a map of repeated keys (the last wins); the API
        # refuses any map bigger than a body can be, as msgpack reads it.
        return _diagnose(body, model, kind)
    try:
        decoded: B = _decoder(model, kind).decode(body)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return _diagnose(body, model, kind)
    _one_of(model, (name for name in model.one_of if getattr(decoded, name) is not msgspec.UNSET))
    return decoded


def _diagnose(body: bytes, model: type[B], kind: BodyKind) -> B:
    """Decode a body that failed again, step by step, and raise the first
    problem found in the order of the module docstring. A document that
    passes every step is the ``model`` after all: a msgpack payload spelt as
    text; JSON's ``NaN``, which is not JSON to msgspec, yet a number out of
    range to the API."""
    document = _document(body, kind)
    if not isinstance(document, dict):
        raise bad_request("invalid_body", "the body must be an object (a map)")
    if not all(isinstance(k, str) for k in document):
        raise bad_request("invalid_body", "the body's keys must be text (msgpack str, not bin)")
    unknown = sorted(k for k in document if k not in model.__struct_fields__)
    if unknown:
        raise bad_request("unknown_field", f"unknown field(s): {', '.join(unknown)}")
    fields = msgspec.structs.fields(model)
    missing = [f.name for f in fields if f.required and f.name not in document]
    if missing:
        raise bad_request("missing_field", f"{', '.join(missing)} is required")
    _one_of(model, (name for name in model.one_of if name in document))
    try:
        return msgspec.convert(
            document, _spelt(model, _SPELLING_AGAIN[kind]), dec_hook=_payload_hook
        )
    except msgspec.ValidationError as exc:
        raise bad_request("invalid_field", str(exc)) from exc


def _document(body: bytes, kind: BodyKind) -> Any:
    if kind == "json":
        try:
            return json.loads(body)
        except RecursionError:
            # The C decoder stops at the interpreter's recursion limit, cleanly.
            raise bad_request("malformed_json", "the body is nested too deeply") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise bad_request("malformed_json", f"the body is not JSON: {exc}") from exc
    try:
        # Every length is bounded by the body's own (msgpack's default), and
        # the nesting by msgpack's fixed stack (StackError). No document of
        # the API holds a big map or an extension type.
        return msgpack.unpackb(
            body, raw=False, strict_map_key=True, max_map_len=_MAX_MAP, max_ext_len=0
        )
    except Exception as exc:  # msgpack raises several unrelated types
        reason = str(exc) or type(exc).__name__
        raise bad_request("malformed_msgpack", f"the body is not msgpack: {reason}") from exc


def _one_of(model: type[Body], present: Iterable[str]) -> None:
    if model.one_of and len(list(present)) != 1:
        a, b = model.one_of
        raise bad_request("missing_field", f"give exactly one of {a!r} or {b!r}")


def check_payload(field: str, spelt: str | bytes, limit: int) -> bytes:
    """One payload as bytes: base64 decoded, text encoded; never empty, at most
    ``limit`` (an HTTP body's and a stream frame's, ``forum.node.http.stream``)."""
    if field.endswith("_b64"):
        try:
            payload = base64.b64decode(spelt, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise bad_request("invalid_field", f"{field} is not valid base64: {exc}") from exc
    elif isinstance(spelt, str):
        try:
            payload = spelt.encode()
        except UnicodeEncodeError as exc:  # JSON may spell a lone surrogate: "\ud800"
            raise bad_request("invalid_field", f"{field} is not valid Unicode: {exc}") from exc
    else:
        # bytes(): a Payload (msgspec's, on the slow path) is not encoded
        # back when the tuple is handed out; plain bytes are not copied.
        payload = spelt if type(spelt) is bytes else bytes(spelt)
    if not payload:
        raise bad_request("empty_payload", "a tuple must not be empty (was a file missing?)")
    if len(payload) > limit:
        raise too_large(f"a payload is {len(payload)} bytes; the limit is {limit}")
    return payload


def document_kind(request: web.Request, what: str) -> BodyKind:
    kind = body_kind(request)
    if kind == "raw":
        raise ApiProblem(
            415, "unsupported_media_type", f"{what} are {MSGPACK} or {JSON}, not raw bytes"
        )
    return kind


def check_payloads(field: str, spelt: Sequence[str | bytes], limits: Limits) -> list[bytes]:
    """The payloads of a batch write: at most ``max_batch``, each a :func:`check_payload`."""
    if len(spelt) > limits.max_batch:
        raise too_large(f"a batch holds at most {limits.max_batch} tuples, not {len(spelt)}")
    return [check_payload(field, p, limits.max_payload) for p in spelt]


async def parse_ids(request: web.Request, limits: Limits) -> list[EntryId]:
    """The entry ids of a batch ack: :class:`Ids`."""
    kind = document_kind(request, "ids")
    body = await read_body(request, limits.max_batch * _ID_BYTES)
    return check_ids(decode(body, Ids, kind).ids, limits)


async def parse_extend(request: web.Request, limits: Limits) -> tuple[list[EntryId], float]:
    """The ids and the new lease of a reservation extend: :class:`ExtendBody`."""
    kind = document_kind(request, "ids")
    document = decode(await read_body(request, limits.max_batch * _ID_BYTES), ExtendBody, kind)
    return check_ids(document.ids, limits), check_extend_lease(document.lease, limits)


def check_extend_lease(lease: float, limits: Limits) -> float:
    """The new lease of an extend (a body field, hence ``invalid_field``)."""
    if not 0 < lease <= limits.max_lease:
        raise bad_request("invalid_field", f"lease must be > 0 and <= {limits.max_lease:g} s")
    return lease


def check_ids(values: Sequence[str], limits: Limits) -> list[EntryId]:
    """The entry ids of a batch: at most ``max_batch``, each ``origin:seq``."""
    if len(values) > limits.max_batch:
        raise too_large(f"a batch holds at most {limits.max_batch} ids, not {len(values)}")
    try:
        return [EntryId.parse(v) for v in values]
    except ValueError as exc:
        raise bad_request("invalid_field", f"ids: {exc}") from exc
