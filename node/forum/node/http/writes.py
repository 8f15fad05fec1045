"""A write's request, read from each way in: its payloads and its options.

The options come from the query string (:data:`~forum.node.api.parameters.WRITE_OPTIONS`,
for a raw body), a JSON or msgpack body's fields
(:class:`~forum.node.api.model.WriteOptionFields`) or a stream frame's args
(:class:`~forum.node.http.stream_ops.WriteOptionArgs`), each by the names of
:class:`~forum.node.core.write_options.WriteOptions`, and all go through
:func:`check_write_options`: ``write_properties``'s checks (its one-line
``ValueError`` is the 400's message) before anything is written.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
from aiohttp import web

from forum.node.api.model import WRITE_OPTION_FIELDS, BatchWriteBody, Limits, WriteBody
from forum.node.api.parameters import WRITE_OPTIONS
from forum.node.core.write_options import WriteOptions, check_copies, write_properties
from forum.node.http.bodies import (
    bad_request,
    body_kind,
    check_payload,
    check_payloads,
    decode,
    document_kind,
    read_body,
)
from forum.node.http.query import INTEGER, SECONDS, SIGNED, Query, b64url_decode

#: A JSON or msgpack body may spell a payload longer than the payload itself.
_ENCODING_ALLOWANCE = 2
_ENVELOPE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """A write's options, checked: the keyword arguments of ``Forum.write``
    and ``write_many`` (:class:`~forum.node.core.write_options.WriteOptions`),
    those given and ``wait`` only when the write may wait for room under a
    prefix's limit (else a 429 at once)."""

    options: WriteOptions = field(default_factory=WriteOptions)
    #: A batch's keys, one per payload (``None``: not given).
    keys: tuple[bytes, ...] | None = None


#: What a plain write asks (no option given): known by identity.
PLAIN_WRITE = WriteRequest()


def check_write_options(
    given: Mapping[str, Any], count: int, limits: Limits, keys: Sequence[Any] | None = None
) -> WriteRequest:
    """The options of a write of ``count`` tuples, held to the Forum's own
    checks (``write_properties``: its one-line ``ValueError`` is the 400's
    message) and ``wait`` to ``Limits.max_write_wait`` (the node's
    ``max_wait``, at most the Forum's 60 s): the checks of every front end
    (query, body, stream), made before anything is written. ``keys``, a
    batch's key per payload (:func:`check_batch_keys`)."""
    if not given and keys is None:
        return PLAIN_WRITE
    options = dict(given)
    checked = None if keys is None else check_batch_keys(keys, count, options)
    wait = options.pop("wait", None)
    copies = options.pop("copies", None)
    number = isinstance(wait, int | float) and not isinstance(wait, bool)
    bound = limits.max_write_wait
    if wait is not None and not (number and 0 <= wait <= bound):  # NaN too
        raise bad_request("invalid_option", f"wait must be 0 to {bound:g} s, not {wait!r}")
    try:
        # Against now: a not_before further than the options allow is known only so.
        # A batch with keys: its options checked as its first write's.
        write_properties(time.time(), **(options | {"key": checked[0]} if checked else options))
        if copies is not None:  # its bound, the cluster's size, is the Forum's to check
            options["copies"] = check_copies(copies)
    except ValueError as exc:
        raise bad_request("invalid_option", str(exc)) from None
    if options.get("key") is not None and count != 1:
        raise bad_request("invalid_option", "a key names one write: give it with one payload")
    if wait:
        options["wait"] = wait
    return WriteRequest(cast(WriteOptions, options), checked)


def check_batch_keys(
    keys: Sequence[Any], count: int, options: Mapping[str, Any]
) -> tuple[bytes, ...]:
    """A batch's ``keys`` (text, or bytes in msgpack; one per payload, not
    with ``key`` in ``options``), each held to ``write_properties``'s check
    of a key, as bytes."""
    if not isinstance(keys, list) or len(keys) != count:
        raise bad_request("invalid_option", f"keys must be a list of {count} keys, one per payload")
    if options.get("key") is not None:
        raise bad_request("invalid_option", "give key or keys, not both")
    checked: list[bytes] = []
    for key in keys:
        try:
            raw = key.encode() if isinstance(key, str) else key
        except UnicodeEncodeError as exc:  # JSON may spell a lone surrogate
            raise bad_request("invalid_field", f"a key is not valid Unicode: {exc}") from exc
        try:
            write_properties(0.0, key=raw)
        except ValueError as exc:
            raise bad_request("invalid_option", f"keys: {exc}") from None
        checked.append(bytes(raw))  # a msgpack Payload, as bytes
    return tuple(checked)


async def parse_write(
    request: web.Request, query: Query, limits: Limits
) -> tuple[bytes, WriteRequest]:
    """The one payload of a write and its options: the raw body, or a
    :class:`WriteBody`; the options from the query string or the body's fields."""
    given = _query_options(query)
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
    kind = document_kind(request, "a batch's tuples")
    document = decode(await read_body(request, limits.max_batch_bytes), BatchWriteBody, kind)
    payloads = check_payloads(*_chosen(document), limits)
    keys = None if document.keys is msgspec.UNSET else document.keys
    return payloads, check_write_options(_option_fields(document), len(payloads), limits, keys)


def given_options(args: msgspec.Struct, names: tuple[str, ...], absent: Any) -> dict[str, Any]:
    """The fields ``names`` of ``args`` that are not ``absent``, by name: the
    options a body (absent: ``UNSET``) or a stream frame (``None``) gives."""
    return {name: value for name in names if (value := getattr(args, name)) is not absent}


def _query_options(query: Query) -> dict[str, Any]:
    """The write options the query gives (:data:`~forum.node.api.parameters.WRITE_OPTIONS`),
    by their names, numbers parsed by the grammar, the key as bytes."""
    given: dict[str, Any] = {}
    for parameter in WRITE_OPTIONS:
        text = query.text(parameter)
        if text is None:
            continue
        grammar = {"seconds": SECONDS, "signed": SIGNED, "integer": INTEGER}.get(parameter.kind)
        if grammar is not None and not grammar.fullmatch(text):
            shape = "seconds such as 5 or 0.25" if parameter.kind == "seconds" else "a whole number"
            raise bad_request(
                "invalid_parameter", f"{parameter.name} must be {shape}, not {text!r}"
            )
        if parameter.kind == "seconds":
            given[parameter.name] = float(text)
        elif parameter.kind in ("signed", "integer"):
            given[parameter.name] = int(text)
        else:
            given[parameter.name] = text.encode()
    if "key_b64" in given:
        if "key" in given:
            raise bad_request("invalid_parameter", "give key or key_b64, not both")
        try:
            given["key"] = b64url_decode(given.pop("key_b64").decode())
        except (binascii.Error, ValueError) as exc:
            raise bad_request("invalid_parameter", f"key_b64 is not base64: {exc}") from exc
    return given


def _option_fields(document: WriteBody[Any] | BatchWriteBody[Any]) -> dict[str, Any]:
    """The write options a body gives, by name, the key as bytes."""
    given = given_options(document, WRITE_OPTION_FIELDS, msgspec.UNSET)
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


def _chosen(document: WriteBody[Any] | BatchWriteBody[Any]) -> tuple[str, Any]:
    """The field of ``one_of`` that ``document`` gives, and its value
    (:func:`decode` made sure there is exactly one)."""
    return next(
        (name, getattr(document, name))
        for name in document.one_of
        if getattr(document, name) is not msgspec.UNSET
    )
