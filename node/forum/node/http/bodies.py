"""What goes in and out of the HTTP API: content negotiation, validation, errors.

Three representations, chosen by ``Content-Type`` on the way in and
``Accept`` on the way out:

=========  ===========================  =====================================
raw        ``application/octet-stream``  one payload, as is (ids in headers)
JSON       ``application/json``          for people: text payloads as
                                         ``payload``, others as ``payload_b64``
msgpack    ``application/msgpack``       for programs: payloads as bin
=========  ===========================  =====================================

The bodies, parameters and limits are declared in :mod:`forum.node.api.model`;
this module holds each request to them. Everything a request carries is checked
before anything is changed, so a rejected request changes nothing. A
rejection is an :class:`ApiProblem`: an HTTP error whose body is
``{"error": code, "message": text}``.

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
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, quote_from_bytes

import msgpack
import msgspec
from aiohttp import web
from multidict import MultiMapping

from forum.node.api.model import (
    DELIVERIES_HEADER,
    ENTRY_ID_HEADER,
    GRAMMAR,
    JSON,
    MSGPACK,
    MSGPACK_ALIASES,
    PROPERTY_HEADERS,
    RAW,
    TAKE_PREFIX,
    TEXT,
    WRITE_OPTION_FIELDS,
    WRITE_OPTIONS,
    BatchWriteBody,
    Body,
    ExtendBody,
    Ids,
    Limits,
    Operation,
    Parameter,
    Payload,
    PrefixBody,
    ReservedBody,
    TupleBody,
    WriteBody,
)
from forum.node.core.entries import PLAIN, EntryId, Reserved, Tuple
from forum.node.core.space import Pattern
from forum.node.core.write_options import write_properties

BodyKind = Literal["raw", "json", "msgpack"]
B = TypeVar("B", bound=Body)
#: A JSON or msgpack body may spell a payload longer than the payload itself.
_ENCODING_ALLOWANCE = 2
_ENVELOPE_BYTES = 4096
#: No body of the API has more fields; a bigger map is refused as it is read.
_MAX_MAP = 16
#: An id is at most an origin (128) and a seq (20 digits) with a colon.
_ID_BYTES = 160
_INTEGER = re.compile(GRAMMAR["integer"])
_SIGNED = re.compile(GRAMMAR["signed"])
_SECONDS = re.compile(GRAMMAR["seconds"])


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


def _chosen(document: WriteBody[Any] | BatchWriteBody[Any]) -> tuple[str, Any]:
    """The field of ``one_of`` that ``document`` gives, and its value
    (:func:`decode` made sure there is exactly one)."""
    return next(
        (name, getattr(document, name))
        for name in document.one_of
        if getattr(document, name) is not msgspec.UNSET
    )


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


def _document_kind(request: web.Request, what: str) -> BodyKind:
    kind = body_kind(request)
    if kind == "raw":
        raise ApiProblem(
            415, "unsupported_media_type", f"{what} are {MSGPACK} or {JSON}, not raw bytes"
        )
    return kind


async def parse_write(
    request: web.Request, query: Query, limits: Limits
) -> tuple[bytes, WriteRequest]:
    """The one payload of a write and its options: the raw body, or a
    :class:`WriteBody`; the options from the query string or the body's fields."""
    given = query.write_options()
    kind = body_kind(request)
    if kind == "raw":
        payload = check_payload(
            "body", await read_body(request, limits.max_payload), limits.max_payload
        )
        return payload, check_write_options(given, 1, limits)
    body = await read_body(request, limits.max_payload * _ENCODING_ALLOWANCE + _ENVELOPE_BYTES)
    document = decode(body, WriteBody, kind)
    payload = check_payload(*_chosen(document), limits.max_payload)
    fields = _option_fields(document)
    both = sorted(given.keys() & fields.keys())
    if both:
        raise bad_request("invalid_option", f"give {', '.join(both)} in the query or the body")
    return payload, check_write_options(given | fields, 1, limits)


async def parse_batch_write(
    request: web.Request, limits: Limits
) -> tuple[list[bytes], WriteRequest]:
    """The payloads of a batch write and their options: a :class:`BatchWriteBody`."""
    kind = _document_kind(request, "a batch's tuples")
    document = decode(await read_body(request, limits.max_batch_bytes), BatchWriteBody, kind)
    payloads = check_payloads(*_chosen(document), limits)
    return payloads, check_write_options(_option_fields(document), len(payloads), limits)


def _option_fields(document: WriteBody[Any] | BatchWriteBody[Any]) -> dict[str, Any]:
    """The write options a body gives, by name, the key as bytes."""
    given = {
        name: value
        for name in WRITE_OPTION_FIELDS
        if (value := getattr(document, name)) is not msgspec.UNSET
    }
    if "key" in given and "key_b64" in given:
        raise bad_request("invalid_option", "give key or key_b64, not both")
    if "key_b64" in given:
        try:
            given["key"] = base64.b64decode(given.pop("key_b64"), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise bad_request("invalid_field", f"key_b64 is not valid base64: {exc}") from exc
    elif isinstance(given.get("key"), str):
        try:
            given["key"] = given["key"].encode()
        except UnicodeEncodeError as exc:  # JSON may spell a lone surrogate
            raise bad_request("invalid_field", f"key is not valid Unicode: {exc}") from exc
    elif "key" in given:
        given["key"] = bytes(given["key"])  # a msgpack Payload, as bytes
    return given


# -- the options of a write ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """A write's options, checked: those given, by ``Forum.write``'s keyword
    names, and how long it may wait for room under a prefix's limit
    (``None``: not at all, a 429 at once)."""

    options: Mapping[str, Any] = field(default_factory=dict)
    wait: float | None = None

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``Forum.write`` / ``write_many``."""
        return {**self.options, "wait": self.wait}


#: What a plain write asks (no option given): known by identity.
PLAIN_WRITE = WriteRequest()


def check_write_options(given: Mapping[str, Any], count: int, limits: Limits) -> WriteRequest:
    """The options of a write of ``count`` tuples, held to the Forum's own
    checks (``write_properties``: its one-line ``ValueError`` is the 400's
    message) and ``wait`` to ``Limits.max_write_wait`` (the node's
    ``max_wait``, at most the Forum's 60 s): the checks of every front end
    (query, body, stream), made before anything is written."""
    if not given:
        return PLAIN_WRITE
    options = dict(given)
    wait = options.pop("wait", None)
    number = isinstance(wait, int | float) and not isinstance(wait, bool)
    bound = limits.max_write_wait
    if wait is not None and not (number and 0 <= wait <= bound):  # NaN too
        raise bad_request("invalid_option", f"wait must be 0 to {bound:g} s, not {wait!r}")
    try:
        # Against now: a not_before further than the options allow is known only so.
        write_properties(time.time(), **options)
    except ValueError as exc:
        raise bad_request("invalid_option", str(exc)) from None
    if options.get("key") is not None and count != 1:
        raise bad_request("invalid_option", "a key names one write: give it with one payload")
    return WriteRequest(options, wait or None)


def check_payloads(field: str, spelt: Sequence[str | bytes], limits: Limits) -> list[bytes]:
    """The payloads of a batch write: at most ``max_batch``, each a :func:`check_payload`."""
    if len(spelt) > limits.max_batch:
        raise too_large(f"a batch holds at most {limits.max_batch} tuples, not {len(spelt)}")
    return [check_payload(field, p, limits.max_payload) for p in spelt]


async def parse_ids(request: web.Request, limits: Limits) -> list[EntryId]:
    """The entry ids of a batch ack: :class:`Ids`."""
    kind = _document_kind(request, "ids")
    body = await read_body(request, limits.max_batch * _ID_BYTES)
    return check_ids(decode(body, Ids, kind).ids, limits)


async def parse_extend(request: web.Request, limits: Limits) -> tuple[list[EntryId], float]:
    """The ids and the new lease of a reservation extend: :class:`ExtendBody`."""
    kind = _document_kind(request, "ids")
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


# -- the query string ----------------------------------------------------------------


class Query:
    """The query parameters of one request, checked against what its operation takes.

    An unknown parameter is refused: a typo such as ``?prefx=job-`` on a take
    would otherwise take from every prefix.
    """

    def __init__(self, request: web.Request, operation: Operation, limits: Limits) -> None:
        try:
            # aiohttp decodes the query leniently (U+FFFD for bytes that are not
            # UTF-8): prefix=%FF would quietly become another prefix.
            parse_qsl(request.rel_url.raw_query_string, keep_blank_values=True, errors="strict")
        except UnicodeDecodeError:
            raise bad_request(
                "invalid_parameter", "the query string is not UTF-8 (give bytes as prefix_b64)"
            ) from None
        self._query: MultiMapping[str] = request.query
        self._limits = limits
        self._pattern_required = TAKE_PREFIX in operation.parameters
        names = operation.names
        unknown = sorted(k for k in self._query if k not in names)
        if unknown:
            raise bad_request(
                "unknown_parameter",
                f"unknown query parameter(s): {', '.join(unknown)}; "
                f"this route takes {', '.join(sorted(names)) or 'none'}",
            )
        repeated = sorted({k for k in self._query if len(self._query.getall(k)) > 1})
        if repeated:
            raise bad_request("invalid_parameter", f"given more than once: {', '.join(repeated)}")

    def _get(self, parameter: Parameter) -> str | None:
        value: str | None = self._query.get(parameter.name)
        if value is None and parameter.required:
            raise bad_request(
                "missing_parameter",
                f"{parameter.name} is required: {parameter.describe(self._limits)}",
            )
        return value

    def text(self, parameter: Parameter) -> str | None:
        """A text parameter as given; ``None`` when absent (and not required)."""
        return self._get(parameter)

    def pattern(self) -> Pattern:
        """``prefix`` (UTF-8 text) or ``prefix_b64`` (any bytes); neither matches
        all, but where the operation takes (``TAKE_PREFIX``): there one is required."""
        text, encoded = self._query.get("prefix"), self._query.get("prefix_b64")
        if text is not None and encoded is not None:
            raise bad_request("invalid_parameter", "give prefix or prefix_b64, not both")
        if text is None and encoded is None and self._pattern_required:
            raise bad_request(
                "missing_parameter",
                "prefix is required: name what to take (prefix=job- or prefix_b64=...); "
                "prefix= (empty) takes from every prefix",
            )
        if encoded is not None:
            try:
                # validate=True: a lenient decoder drops bad characters, and an
                # empty result would match (and take) every tuple.
                return Pattern(base64.b64decode(_padded(encoded), altchars=b"-_", validate=True))
            except (binascii.Error, ValueError) as exc:
                raise bad_request("invalid_parameter", f"prefix_b64 is not base64: {exc}") from exc
        return Pattern((text or "").encode())

    def seconds(self, parameter: Parameter) -> float:
        """Seconds in the grammar, held to :func:`check_seconds`; absent is 0."""
        text = self._get(parameter)
        if text is None:
            return 0.0
        if not _SECONDS.fullmatch(text):
            raise bad_request(
                "invalid_parameter",
                f"{parameter.name} must be seconds such as 5 or 0.25, not {text!r}",
            )
        return check_seconds(parameter, float(text), self._limits)

    def integer(self, parameter: Parameter) -> int:
        text = self._get(parameter)
        if text is None:
            return parameter.default
        if not _INTEGER.fullmatch(text):
            raise bad_integer(parameter, text, self._limits)
        return check_integer(parameter, int(text), self._limits)

    def entry_id(self, parameter: Parameter) -> EntryId:
        """An entry id in its text form ``origin:seq``."""
        return check_entry_id(parameter, self._get(parameter) or "")

    def write_options(self) -> dict[str, Any]:
        """The write options the query gives (:data:`~forum.node.api.model.WRITE_OPTIONS`),
        by ``Forum.write``'s names, numbers parsed by the grammar; their values
        are judged by :func:`check_write_options`."""
        given: dict[str, Any] = {}
        for parameter in WRITE_OPTIONS:
            text = self._query.get(parameter.name)
            if text is None:
                continue
            grammar = {"seconds": _SECONDS, "signed": _SIGNED}.get(parameter.kind)
            if grammar is not None and not grammar.fullmatch(text):
                shape = (
                    "seconds such as 5 or 0.25" if parameter.kind == "seconds" else "a whole number"
                )
                raise bad_request(
                    "invalid_parameter", f"{parameter.name} must be {shape}, not {text!r}"
                )
            if parameter.kind == "seconds":
                given[parameter.name] = float(text)
            elif parameter.kind == "signed":
                given[parameter.name] = int(text)
            else:
                given[parameter.name] = text.encode()
        if "key_b64" in given:
            if "key" in given:
                raise bad_request("invalid_parameter", "give key or key_b64, not both")
            encoded = given.pop("key_b64").decode()
            try:
                given["key"] = base64.b64decode(_padded(encoded), altchars=b"-_", validate=True)
            except (binascii.Error, ValueError) as exc:
                raise bad_request("invalid_parameter", f"key_b64 is not base64: {exc}") from exc
        return given


# -- the checks of a parameter's value, shared by the query string and the stream --


def check_seconds(parameter: Parameter, value: float, limits: Limits) -> float:
    """A ``wait`` is cut to its maximum (absent or 0: answer at once); a
    ``lease`` is refused past it."""
    maximum = parameter.bound(limits)
    if parameter.cut:
        if not value >= 0:  # NaN too
            raise bad_request("invalid_parameter", f"{parameter.name} must be >= 0 s")
        return min(value, maximum)
    if not 0 < value <= maximum:
        raise bad_request("invalid_parameter", f"{parameter.name} must be > 0 and <= {maximum:g} s")
    return value


def check_integer(parameter: Parameter, value: int, limits: Limits) -> int:
    if not parameter.minimum <= value <= int(parameter.bound(limits)):
        raise bad_integer(parameter, value, limits)
    return value


def bad_integer(parameter: Parameter, value: object, limits: Limits) -> ApiProblem:
    lo, hi = parameter.minimum, int(parameter.bound(limits))
    return bad_request(
        "invalid_parameter", f"{parameter.name} must be an integer from {lo} to {hi}, not {value!r}"
    )


def check_entry_id(parameter: Parameter, text: str) -> EntryId:
    try:
        return EntryId.parse(text)
    except ValueError as exc:
        raise bad_request("invalid_parameter", f"{parameter.name}: {exc}") from exc


def _padded(text: str) -> str:
    return text + "=" * (-len(text) % 4)


# -- writing responses ---------------------------------------------------------------


def respond(
    document: msgspec.Struct | Mapping[str, Any], media: str, status: int = 200
) -> web.Response:
    """``document`` in JSON or msgpack, or its values as lines of text.

    JSON goes through the stdlib's encoder, as it always has (``", "`` and
    ``": "`` separators, non-ASCII escaped): clients and people read those
    bytes. msgspec's msgpack is byte for byte what ``msgpack.packb`` wrote.
    """
    if media == MSGPACK:
        return web.Response(
            body=msgspec.msgpack.encode(document), status=status, content_type=MSGPACK
        )
    values = msgspec.to_builtins(document, builtin_types=(bytes,))
    if media == TEXT:
        text = "\n".join(str(v) for v in values.values())
        return web.Response(text=text + "\n", status=status, content_type=TEXT)
    return web.json_response(values, status=status)


def tuple_body(item: Tuple, media: str) -> TupleBody:
    """One tuple; in JSON a payload that is not UTF-8 is ``payload_b64`` instead."""
    return TupleBody(str(item.id), **_payload_fields(item, media))


def reserved_body(item: Reserved, media: str) -> ReservedBody:
    """One reserved tuple: a tuple and its delivery count."""
    return ReservedBody(str(item.id), **_payload_fields(item, media), deliveries=item.deliveries)


def _payload_fields(item: Tuple, media: str) -> dict[str, Any]:
    fields = _bytes_fields("payload", item.payload, media)
    if item.props is not PLAIN and item.props != PLAIN:
        fields |= _property_fields(item, media)
    return fields


def _bytes_fields(name: str, value: bytes, media: str) -> dict[str, Any]:
    """``value`` as the field ``name``: bytes in msgpack; in JSON text, or
    ``<name>_b64`` (standard base64) when it is not UTF-8."""
    if media == MSGPACK:
        return {name: value}
    try:
        return {name: value.decode()}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(value).decode()}


def _property_fields(item: Tuple, media: str) -> dict[str, Any]:
    """The properties a client sees, each only when set: a plain tuple's
    answer is what it was before there were properties."""
    props = item.props
    fields: dict[str, Any] = {}
    if props.due:
        fields["due"] = props.due
    if props.expires:
        fields["expires"] = props.expires
    if props.priority:
        fields["priority"] = props.priority
    if props.key is not None:
        fields |= _bytes_fields("key", props.key, media)
    return fields


def prefix_body(prefix: bytes, media: str, **figures: Any) -> PrefixBody:
    """A paused or limited prefix, spelt as a payload is."""
    return PrefixBody(**_bytes_fields("prefix", prefix, media), **figures)


def respond_tuple(item: Tuple, media: str) -> web.Response:
    """A single tuple: raw bytes with the id (and a reservation's delivery
    count) in headers, or a document."""
    if media == RAW:
        headers = {ENTRY_ID_HEADER: str(item.id)}
        if isinstance(item, Reserved):
            headers[DELIVERIES_HEADER] = str(item.deliveries)
        if item.props != PLAIN:
            for name, value in _property_fields(item, MSGPACK).items():
                shown = quote_from_bytes(value) if isinstance(value, bytes) else str(value)
                headers[PROPERTY_HEADERS[name]] = shown
        return web.Response(body=item.payload, headers=headers, content_type=RAW)
    document = reserved_body(item, media) if isinstance(item, Reserved) else tuple_body(item, media)
    return respond(document, media)
