"""What a node answers, read into the client's values.

Each answer is decoded by msgspec straight into the Struct the node declares
for it in :mod:`forum.node.api.model` (an operation's ``answer.model``, as
:data:`~forum.node.api.operations.STREAM_OPS` names them), so both ends read one
declaration of each document, its types and bounds too. An answer that does
not fit its Struct is a :class:`~forum.node.core.errors.SerializationError`
naming the node; an error answer is the :class:`NodeRejected` its status
calls for, with the node's code and message (:func:`rejected`).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET

from forum.node.api.model import Problem, ReservedBody, TupleBody
from forum.node.api.operations import STREAM_OPS
from forum.node.core.entries import PLAIN, EntryId, Properties, Reserved, Tuple
from forum.node.core.errors import (
    CopiesShort,
    NodeRejected,
    PayloadTooLarge,
    SerializationError,
    Throttled,
    Unauthorized,
    error_body,
)

T = TypeVar("T")

#: The decoder of each operation's answer, by the op's name.
_ANSWERS: dict[str, msgspec.msgpack.Decoder[Any]] = {
    op: msgspec.msgpack.Decoder(operation.answer.model) for op, operation in STREAM_OPS.items()
}
_DOCUMENTS: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}
_PROBLEM = msgspec.msgpack.Decoder(Problem)
_JSON_PROBLEM = msgspec.json.Decoder(Problem)


def read(url: str, op: str, status: int, body: Any) -> Any:
    """What the node answered to ``op`` with ``status`` and the msgpack ``body``
    (a stream's answer, or an HTTP route's but for an error): ``None`` for a
    204 (nothing matched), the :class:`Problem` of an error status, else the
    Struct the node declares for the op."""
    if status == 204:
        return None
    if status >= 400:
        return problem(status, body)
    try:
        return _ANSWERS[op].decode(body)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise SerializationError(f"{url}: the answer to {op} is not its document: {exc}") from None


def document(url: str, model: type[T], body: bytes) -> T:
    """A route's answer (msgpack ``body``) as its Struct ``model``."""
    decoder = _DOCUMENTS.get(model)
    if decoder is None:
        decoder = _DOCUMENTS[model] = msgspec.msgpack.Decoder(model)
    try:
        decoded: T = decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise SerializationError(f"{url}: not a {model.__name__} document: {exc}") from None
    return decoded


def entry_id(url: str, text: str) -> EntryId:
    try:
        return EntryId.parse(text)
    except ValueError as exc:
        raise SerializationError(f"{url}: not an entry id: {text!r}") from exc


def flags(url: str, values: list[bool], count: int, name: str) -> list[bool]:
    """One flag per id asked about, or the node answered something else."""
    if len(values) != count:
        raise SerializationError(f"{url}: {name} is not one flag per id")
    return values


def tuple_of(url: str, body: TupleBody) -> Tuple:
    """The tuple a :class:`TupleBody` (msgpack: its payload and key bin) holds."""
    return Tuple(entry_id(url, body.id), _payload(url, body), _props(url, body))


def reserved_of(url: str, body: ReservedBody) -> Reserved:
    """The reserved tuple a :class:`ReservedBody` holds, with its delivery count."""
    return Reserved(entry_id(url, body.id), _payload(url, body), _props(url, body), body.deliveries)


def _payload(url: str, body: TupleBody) -> bytes:
    payload = body.payload
    if type(payload) is not bytes:
        raise SerializationError(f"{url}: a tuple's payload is bytes, not {payload!r:.50}")
    return payload


def _props(url: str, body: TupleBody) -> Properties:
    """The properties an answer shows (``docs/http-api.md``): each only when
    set, none for a plain tuple."""
    due, expires, priority, key = body.due, body.expires, body.priority, body.key
    if due is UNSET and expires is UNSET and priority is UNSET and key is UNSET:
        return PLAIN
    if key is not UNSET and type(key) is not bytes:
        raise SerializationError(f"{url}: a tuple's key is bytes, not {key!r:.50}")
    props = Properties(
        due=0 if due is UNSET else due,
        expires=0 if expires is UNSET else expires,
        priority=0 if priority is UNSET else priority,
        key=None if key is UNSET else key,
    )
    return PLAIN if props == PLAIN else props


def problem(status: int, body: Any) -> Problem:
    """A stream's error answer (msgpack ``body``); a body that is not a
    :class:`Problem` is ``http_<status>`` and its start."""
    try:
        found: Problem = _PROBLEM.decode(body)
    except msgspec.DecodeError:
        return Problem(f"http_{status}", f"{bytes(body)!r:.200}")
    return found


def http_problem(status: int, body: bytes, retry_after: str) -> Problem:
    """An HTTP error answer: the node's JSON error body (else
    :func:`~forum.node.core.errors.error_body`'s reading of it), with its
    ``Retry-After`` header when the body has no ``retry_after``."""
    try:
        found = _JSON_PROBLEM.decode(body)
    except msgspec.DecodeError:
        found = Problem(*error_body(status, body))
    if found.retry_after is UNSET and retry_after.isdigit():
        found = msgspec.structs.replace(found, retry_after=float(retry_after))
    return found


def rejected(url: str, status: int, found: Problem) -> NodeRejected:
    """The error of an error answer: a :class:`Throttled` for a 429 (with the
    prefix, limit and wait it names), a :class:`CopiesShort` for a write short
    of its copies (504, with its ids and counts), :class:`Unauthorized` for a 401,
    :class:`PayloadTooLarge` for a 413, else :class:`NodeRejected`."""
    if status == 429:
        return Throttled(
            url,
            429,
            found.error,
            found.message,
            prefix=b"" if found.prefix is UNSET else found.prefix.encode(),
            limit=0 if found.limit is UNSET else found.limit,
            retry_after=1.0 if found.retry_after is UNSET else found.retry_after,
        )
    if status == 504 and found.error == "too_few_copies":
        return CopiesShort(
            url,
            found.error,
            found.message,
            ids=[entry_id(url, i) for i in ([] if found.ids is UNSET else found.ids)],
            held=0 if found.copies_held is UNSET else found.copies_held,
            copies=0 if found.copies is UNSET else found.copies,
        )
    kind = {401: Unauthorized, 413: PayloadTooLarge}.get(status, NodeRejected)
    return kind(url, status, found.error, found.message)
