"""The write options are declared once (``forum.node.core.write_options.WriteOptions``):
every signature takes them by its names, and every way in over the wire (a
body's fields, the query string, a stream frame's args) spells those names,
so an option added to the declaration and forgotten in one place fails here."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from forum.node.api.model import BatchWriteBody, WriteBody, WriteOptionFields
from forum.node.api.parameters import WRITE_OPTIONS
from forum.node.client.remote import ForumClient
from forum.node.client.sync import SyncForumClient
from forum.node.core.write_options import WRITE_OPTION_NAMES
from forum.node.http.stream_ops import PayloadArgs, PayloadsArgs, WriteOptionArgs
from forum.node.space.forum import Forum

NAMES = set(WRITE_OPTION_NAMES)


def _taken(method: Callable[..., Any]) -> set[str]:
    """The option names ``method`` takes: those of ``**options:
    Unpack[WriteOptions]`` and its keyword-only parameters, or its
    keyword-only parameters."""
    parameters = inspect.signature(method).parameters.values()
    named = {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            assert parameter.annotation == "Unpack[WriteOptions]", method
            return NAMES | named
    return named


@pytest.mark.parametrize(
    "method",
    [
        Forum.write,
        Forum.write_many,
        ForumClient.write,
        ForumClient.write_many,
        SyncForumClient.write,
        SyncForumClient.write_many,
    ],
)
def test_every_write_signature_takes_the_declared_options(method: Callable[..., Any]) -> None:
    # A batch takes a key per payload beside them (keys: docs/http-api.md, "Write many").
    beside = {"keys"} if method.__name__ == "write_many" else set()
    assert _taken(method) == NAMES | beside


def test_the_clients_spell_them_as_write_options() -> None:
    for method in (ForumClient.write, ForumClient.write_many):
        assert _taken(method) - {"keys"} == NAMES
        assert "options" in inspect.signature(method).parameters


def test_every_wire_spelling_names_the_declared_options() -> None:
    assert set(WriteOptionArgs.__struct_fields__) == NAMES
    for args in (PayloadArgs, PayloadsArgs):
        assert set(args.__struct_fields__) >= NAMES
    # A body spells the key as its payloads are (key), or in base64 (key_b64).
    assert set(WriteOptionFields.__struct_fields__) == NAMES - {"key"} | {"key_b64"}
    for body in (WriteBody, BatchWriteBody):
        assert set(body.__struct_fields__) >= NAMES
    assert {p.name for p in WRITE_OPTIONS} == NAMES | {"key_b64"}


def test_an_unknown_option_is_the_type_error_python_gives() -> None:
    with SyncForumClient("http://127.0.0.1:9") as client:
        unexpected = r"^SyncForumClient\.write\(\) got an unexpected keyword argument 'tll'$"
        with pytest.raises(TypeError, match=unexpected):
            client.write(b"x", tll=5)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"^SyncForumClient\.write_many\(\) got an unexpected"):
            client.write_many([b"x"], tll=5)  # type: ignore[call-arg]


async def test_an_unknown_option_is_refused_before_anything_is_sent() -> None:
    async with ForumClient("http://127.0.0.1:9") as client:
        with pytest.raises(
            TypeError, match=r"^ForumClient\.write\(\) got an unexpected keyword argument 'tll'$"
        ):
            await client.write(b"x", tll=5)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"^ForumClient\.write_many\(\) got an unexpected"):
            await client.write_many([], tll=5)  # type: ignore[call-arg]
