"""The job tuple's byte format, the default key and the serializers (no servers)."""

from __future__ import annotations

import pytest

from forum.tasks import InvalidJob, JsonSerializer, MsgpackSerializer
from forum.tasks.message import Message, check_key, default_key, key_prefix, peek_key, peek_task
from forum.tasks.queues import queue_prefix

SERIALIZERS = [JsonSerializer(), MsgpackSerializer()]


def test_the_bytes_are_prefix_queue_key_name_and_body() -> None:
    message = Message("img-7", "resize", (7,), {"size": 256})
    data = message.encode(b"task/", JsonSerializer())
    assert data == (b'task/default/img-7\nresize\n{"args":[7],"kwargs":{"size":256},"options":{}}')
    assert data.startswith(key_prefix(queue_prefix(b"task/", "default"), "img-7"))
    assert peek_key(data, b"task/") == "img-7"
    assert peek_task(data, b"task/") == "resize"


@pytest.mark.parametrize("serializer", SERIALIZERS, ids=lambda s: s.name)
def test_a_message_round_trips(serializer: JsonSerializer | MsgpackSerializer) -> None:
    message = Message("k", "t", (1, "two", [3.5]), {"x": {"y": None}}, {"retries": 2})
    data = message.encode(b"p/", serializer)
    assert Message.decode(data, b"p/", serializer) == Message(
        "k", "t", (1, "two", [3.5]), {"x": {"y": None}}, {"retries": 2}
    )


def test_msgpack_keeps_bytes() -> None:
    message = Message("k", "t", (b"\x00\xff",))
    serializer = MsgpackSerializer()
    assert Message.decode(message.encode(b"p/", serializer), b"p/", serializer).args == (
        b"\x00\xff",
    )


def test_the_default_key_is_the_same_for_the_same_call() -> None:
    json = JsonSerializer()
    first = default_key(json, "resize", (7,), {"size": 256, "mode": "fit"})
    assert first == default_key(json, "resize", (7,), {"mode": "fit", "size": 256})
    assert first.startswith("resize:") and len(first) == len("resize:") + 32
    assert first != default_key(json, "resize", (8,), {"size": 256, "mode": "fit"})
    assert first != default_key(json, "thumb", (7,), {"size": 256, "mode": "fit"})


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "non-empty"),
        ("a\nb", "newline"),
        ("x" * 501, "at most 500 bytes"),
        ("é" * 251, "at most 500 bytes"),
        (7, "non-empty string"),
    ],
)
def test_a_bad_key_is_one_line(key: object, why: str) -> None:
    with pytest.raises(InvalidJob, match=why) as raised:
        check_key(key)
    assert "\n" not in str(raised.value)


def test_bytes_that_are_not_a_job_say_why() -> None:
    json = JsonSerializer()
    for data, why in [
        (b"other/k\nt\n{}", "no b'task/' prefix"),
        (b"task/k-without-lines", "no key and task name"),
        (b"task/k\nt\nnot json", "does not decode"),
        (b'task/k\nt\n{"args":[]}', "args, kwargs and options"),
    ]:
        with pytest.raises(InvalidJob, match=why):
            Message.decode(data, b"task/", json)


@pytest.mark.parametrize("serializer", SERIALIZERS, ids=lambda s: s.name)
def test_arguments_the_serializer_refuses_are_one_line(
    serializer: JsonSerializer | MsgpackSerializer,
) -> None:
    with pytest.raises(InvalidJob, match=f"cannot be encoded by {serializer.name}") as raised:
        Message("k", "t", (object(),)).encode(b"p/", serializer)
    assert "\n" not in str(raised.value)
