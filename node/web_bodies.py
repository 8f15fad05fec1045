"""What goes in and out of the HTTP API: content negotiation, validation, errors.

Three representations, chosen by ``Content-Type`` on the way in and
``Accept`` on the way out:

=========  ===========================  =====================================
raw        ``application/octet-stream``  one payload, as is (ids in headers)
JSON       ``application/json``          for people: text payloads as
                                         ``payload``, others as ``payload_b64``
msgpack    ``application/msgpack``       for programs: payloads as bin
=========  ===========================  =====================================

Everything a request carries is checked before anything is changed, so a
rejected request changes nothing. A rejection is an :class:`ApiProblem`:
an HTTP error whose body is ``{"error": code, "message": text}``.

The query grammar is narrower than Python's number parsers on purpose
(``int`` and ``float`` take Unicode digits, ``1_0``, ``1e3`` and ``inf``)::

    integer  = 1*19 DIGIT                   ; ASCII 0-9 only
    seconds  = 1*10 DIGIT [ "." 1*9 DIGIT ]

A payload is never empty: an empty write is almost always a mistake (curl
sends ``Content-Length: 0`` when its ``@file`` is missing), and an empty tuple
matches every prefix.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import parse_qsl

import msgpack
from aiohttp import web
from multidict import MultiMapping

from node.entries import EntryId, Reserved, Tuple
from node.space import Pattern

RAW = "application/octet-stream"
JSON = "application/json"
MSGPACK = "application/msgpack"
TEXT = "text/plain"
#: Other names programs use for msgpack; accepted on the way in and in Accept.
MSGPACK_ALIASES = frozenset({MSGPACK, "application/x-msgpack", "application/vnd.msgpack"})
#: The response header that carries a raw payload's entry id.
ENTRY_ID_HEADER = "Forum-Entry-Id"
#: How many times a reserved tuple has been handed out (``Reserved.deliveries``).
DELIVERIES_HEADER = "Forum-Deliveries"

BodyKind = Literal["raw", "json", "msgpack"]
#: A JSON or msgpack body may spell a payload longer than the payload itself.
_ENCODING_ALLOWANCE = 2
_ENVELOPE_BYTES = 4096
_MAX_MAP = 16
_INTEGER = re.compile(r"[0-9]{1,19}")
_SECONDS = re.compile(r"[0-9]{1,10}(\.[0-9]{1,9})?")


class ApiProblem(web.HTTPError):
    """An HTTP error with the API's JSON error body.

    It is aiohttp's exception type (so the router's own 404/405 and ours are
    handled alike), not a ``ForumError``: it never leaves the server.
    """

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self.status_code = status
        super().__init__(
            headers=headers,
            text=json.dumps({"error": code, "message": message}),
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


def negotiate(request: web.Request, offers: Sequence[str], default: str) -> str:
    """The media type to answer in: the client's best-ranked one among ``offers``.

    No ``Accept`` or ``*/*`` gets ``default``; nothing acceptable is a 406,
    raised before the handler changes anything.
    """
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
        # Within the app's client_max_size (at least every route's limit).
        return await request.read()
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise too_large(f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _decode_document(body: bytes, kind: BodyKind) -> Any:
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


def _object(document: Any, allowed: Iterable[str]) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise bad_request("invalid_body", "the body must be an object (a map)")
    if not all(isinstance(k, str) for k in document):
        raise bad_request("invalid_body", "the body's keys must be text (msgpack str, not bin)")
    unknown = sorted(str(k) for k in document if k not in allowed)
    if unknown:
        raise bad_request("unknown_field", f"unknown field(s): {', '.join(unknown)}")
    return document


def _one_of(document: dict[str, Any], a: str, b: str) -> str:
    present = [name for name in (a, b) if name in document]
    if len(present) != 1:
        raise bad_request("missing_field", f"give exactly one of {a!r} or {b!r}")
    return present[0]


def _payload_value(value: Any, field: str, kind: BodyKind) -> bytes:
    """One payload from a JSON string, base64 text or msgpack bin/str."""
    if field.endswith("_b64"):
        if not isinstance(value, str):
            raise bad_request("invalid_field", f"{field} must be base64 text")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise bad_request("invalid_field", f"{field} is not valid base64: {exc}") from exc
    if isinstance(value, str):
        try:
            return value.encode()
        except UnicodeEncodeError as exc:  # JSON may spell a lone surrogate: "\\ud800"
            raise bad_request("invalid_field", f"{field} is not valid Unicode: {exc}") from exc
    if isinstance(value, bytes) and kind == "msgpack":
        return value
    expected = "bytes or text" if kind == "msgpack" else "text (or use payload_b64)"
    raise bad_request("invalid_field", f"{field} must be {expected}, not {type(value).__name__}")


def _check_size(payload: bytes, limit: int) -> bytes:
    if not payload:
        raise bad_request("empty_payload", "a tuple must not be empty (was a file missing?)")
    if len(payload) > limit:
        raise too_large(f"a payload is {len(payload)} bytes; the limit is {limit}")
    return payload


async def parse_write(request: web.Request, max_payload: int) -> bytes:
    """The one payload of a write: the raw body, or ``payload``/``payload_b64``."""
    kind = body_kind(request)
    if kind == "raw":
        return _check_size(await read_body(request, max_payload), max_payload)
    body = await read_body(request, max_payload * _ENCODING_ALLOWANCE + _ENVELOPE_BYTES)
    document = _object(_decode_document(body, kind), ("payload", "payload_b64"))
    field = _one_of(document, "payload", "payload_b64")
    return _check_size(_payload_value(document[field], field, kind), max_payload)


async def parse_batch_write(
    request: web.Request, max_payload: int, max_batch: int, max_bytes: int
) -> list[bytes]:
    """The payloads of a batch write: ``payloads`` (or ``payloads_b64`` in JSON)."""
    kind = body_kind(request)
    if kind == "raw":
        raise ApiProblem(
            415, "unsupported_media_type", f"a batch is {MSGPACK} or {JSON}, not raw bytes"
        )
    document = _object(
        _decode_document(await read_body(request, max_bytes), kind), ("payloads", "payloads_b64")
    )
    field = _one_of(document, "payloads", "payloads_b64")
    values = document[field]
    if not isinstance(values, list):
        raise bad_request("invalid_field", f"{field} must be a list")
    if len(values) > max_batch:
        raise too_large(f"a batch holds at most {max_batch} tuples, not {len(values)}")
    single = "payload_b64" if field == "payloads_b64" else "payload"
    return [_check_size(_payload_value(v, single, kind), max_payload) for v in values]


async def parse_ids(request: web.Request, max_batch: int) -> list[EntryId]:
    """The entry ids of a batch ack: ``{"ids": ["origin:seq", ...]}``."""
    return _ids(await _ids_document(request, max_batch, ("ids",)), max_batch)


async def parse_extend(
    request: web.Request, max_batch: int, max_lease: float
) -> tuple[list[EntryId], float]:
    """The ids and the new lease of a reservation extend:
    ``{"ids": ["origin:seq", ...], "lease": seconds}``."""
    document = await _ids_document(request, max_batch, ("ids", "lease"))
    ids = _ids(document, max_batch)
    if "lease" not in document:
        raise bad_request("missing_field", "lease (seconds) is required")
    lease = document["lease"]
    if isinstance(lease, bool) or not isinstance(lease, int | float):
        raise bad_request("invalid_field", "lease must be a number of seconds")
    if not 0 < lease <= max_lease:  # NaN fails this too
        raise bad_request("invalid_field", f"lease must be > 0 and <= {max_lease:g} s")
    return ids, float(lease)


async def _ids_document(
    request: web.Request, max_batch: int, allowed: tuple[str, ...]
) -> dict[str, Any]:
    kind = body_kind(request)
    if kind == "raw":
        raise ApiProblem(415, "unsupported_media_type", f"ids are {MSGPACK} or {JSON}")
    # An id is at most an origin (128) and a seq (20 digits) with a colon.
    return _object(_decode_document(await read_body(request, max_batch * 160), kind), allowed)


def _ids(document: dict[str, Any], max_batch: int) -> list[EntryId]:
    values = document.get("ids")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise bad_request("invalid_field", "ids must be a list of entry ids (origin:seq)")
    if len(values) > max_batch:
        raise too_large(f"a batch holds at most {max_batch} ids, not {len(values)}")
    try:
        return [EntryId.parse(v) for v in values]
    except ValueError as exc:
        raise bad_request("invalid_field", f"ids: {exc}") from exc


# -- the query string ----------------------------------------------------------------


class Query:
    """The query parameters of one request, checked against what the route takes.

    An unknown parameter is refused: a typo such as ``?prefx=job-`` on a take
    would otherwise take from every prefix.
    """

    def __init__(self, request: web.Request, allowed: Iterable[str]) -> None:
        try:
            # aiohttp decodes the query leniently (U+FFFD for bytes that are not
            # UTF-8): prefix=%FF would quietly become another prefix.
            parse_qsl(request.rel_url.raw_query_string, keep_blank_values=True, errors="strict")
        except UnicodeDecodeError:
            raise bad_request(
                "invalid_parameter", "the query string is not UTF-8 (give bytes as prefix_b64)"
            ) from None
        self._query: MultiMapping[str] = request.query
        names = set(allowed)
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

    def get(self, name: str) -> str | None:
        value: str | None = self._query.get(name)
        return value

    def pattern(self) -> Pattern:
        """``prefix`` (UTF-8 text) or ``prefix_b64`` (any bytes); neither matches all."""
        text, encoded = self.get("prefix"), self.get("prefix_b64")
        if text is not None and encoded is not None:
            raise bad_request("invalid_parameter", "give prefix or prefix_b64, not both")
        if encoded is not None:
            try:
                # validate=True: a lenient decoder drops bad characters, and an
                # empty result would match (and take) every tuple.
                return Pattern(base64.b64decode(_padded(encoded), altchars=b"-_", validate=True))
            except (binascii.Error, ValueError) as exc:
                raise bad_request("invalid_parameter", f"prefix_b64 is not base64: {exc}") from exc
        return Pattern((text or "").encode())

    def seconds(self, name: str, maximum: float) -> float:
        """A wait in seconds, cut to ``maximum``; absent means 0 (answer at once)."""
        text = self.get(name)
        if text is None:
            return 0.0
        if not _SECONDS.fullmatch(text):
            raise bad_request(
                "invalid_parameter", f"{name} must be seconds such as 5 or 0.25, not {text!r}"
            )
        return min(float(text), maximum)

    def entry_id(self, name: str) -> EntryId:
        """A required entry id in its text form ``origin:seq``."""
        text = self.get(name)
        if text is None:
            raise bad_request("missing_parameter", f"{name} (an entry id, origin:seq) is required")
        try:
            return EntryId.parse(text)
        except ValueError as exc:
            raise bad_request("invalid_parameter", f"{name}: {exc}") from exc

    def lease(self, name: str, maximum: float) -> float:
        """A required lease in seconds, > 0 and at most ``maximum``."""
        if self.get(name) is None:
            raise bad_request("missing_parameter", f"{name} (seconds) is required")
        value = self.seconds(name, math.inf)
        if not 0 < value <= maximum:
            raise bad_request("invalid_parameter", f"{name} must be > 0 and <= {maximum:g} s")
        return value

    def integer(self, name: str, default: int, lo: int, hi: int) -> int:
        text = self.get(name)
        if text is None:
            return default
        if not _INTEGER.fullmatch(text) or not lo <= int(text) <= hi:
            raise bad_request(
                "invalid_parameter", f"{name} must be an integer from {lo} to {hi}, not {text!r}"
            )
        return int(text)


def _padded(text: str) -> str:
    return text + "=" * (-len(text) % 4)


def prefix_query(pattern: Pattern) -> dict[str, str]:
    """The query parameters that carry ``pattern`` (text when it is UTF-8)."""
    try:
        return {"prefix": pattern.prefix.decode()}
    except UnicodeDecodeError:
        return {"prefix_b64": base64.urlsafe_b64encode(pattern.prefix).decode().rstrip("=")}


# -- writing responses ---------------------------------------------------------------


def respond(document: Mapping[str, Any], media: str, status: int = 200) -> web.Response:
    """``document`` in JSON or msgpack (``bytes`` values must already suit the media)."""
    if media == MSGPACK:
        return web.Response(
            body=msgpack.packb(document, use_bin_type=True), status=status, content_type=MSGPACK
        )
    if media == TEXT:
        text = "\n".join(str(v) for v in document.values())
        return web.Response(text=text + "\n", status=status, content_type=TEXT)
    return web.json_response(document, status=status)


def tuple_document(item: Tuple, media: str) -> dict[str, Any]:
    """One tuple: ``{"id", "payload"}``, and ``deliveries`` for a reserved one;
    in JSON a payload that is not UTF-8 is ``payload_b64`` instead."""
    document: dict[str, Any] = {"id": str(item.id)}
    if media == MSGPACK:
        document["payload"] = item.payload
    else:
        try:
            document["payload"] = item.payload.decode()
        except UnicodeDecodeError:
            document["payload_b64"] = base64.b64encode(item.payload).decode()
    if isinstance(item, Reserved):
        document["deliveries"] = item.deliveries
    return document


def respond_tuple(item: Tuple, media: str) -> web.Response:
    """A single tuple: raw bytes with the id in a header, or a document."""
    if media == RAW:
        headers = {ENTRY_ID_HEADER: str(item.id)}
        if isinstance(item, Reserved):
            headers[DELIVERIES_HEADER] = str(item.deliveries)
        return web.Response(body=item.payload, headers=headers, content_type=RAW)
    return respond(tuple_document(item, media), media)


def ids_document(ids: Sequence[EntryId]) -> dict[str, Any]:
    return {"ids": [str(i) for i in ids]}
