"""The answers of the HTTP API: documents in JSON or msgpack, raw tuples.

A tuple's payload (and key) is bin in msgpack; in JSON it is text, or
``payload_b64`` (standard base64) when it is not UTF-8. A raw answer is the
payload itself, its id and properties in headers
(:data:`~forum.node.api.model.PROPERTY_HEADERS`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote_from_bytes

import msgspec
from aiohttp import web

from forum.node.api.model import (
    DELIVERIES_HEADER,
    ENTRY_ID_HEADER,
    MSGPACK,
    PROPERTY_HEADERS,
    RAW,
    TEXT,
    PrefixBody,
    ReservedBody,
    TupleBody,
)
from forum.node.core.entries import PLAIN, Reserved, Tuple


def respond(
    document: msgspec.Struct | Mapping[str, Any], media: str, status: int = 200
) -> web.Response:
    """``document`` in JSON or msgpack, or its values as lines of text.

    JSON goes through the stdlib's encoder (``", "`` and ``": "``
    separators, non-ASCII escaped): the bytes clients and people read.
    msgspec's msgpack is byte for byte what ``msgpack.packb`` writes.
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
    answer is its id and payload alone."""
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
