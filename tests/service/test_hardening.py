"""Issue 9, the HTTP layer: one request must never brick, hang, bypass or empty a node.

Each case was found against a real ``forum serve`` and is replayed against one
here: compressed bodies that inflate past the limits, parameters in a grammar
wider than the documented one (Unicode digits, ``0_1``), bodies that crash the
decoder (deep nesting, lone surrogates), a body sent to a route that takes
none (which used to take the oldest tuple), an empty write, and requests the
HTTP parser refuses (which used to answer ``text/plain``). Every refusal is a
4xx with the JSON error body, and the live set is as it was before.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import pytest
import pytest_asyncio

from tests.fixtures.nodes import ForumNodes, NodeProcess

SEED = [b"job-1", b"job-2", b"other-1"]
JSON_TYPE = {"Content-Type": "application/json"}
MSGPACK_TYPE = {"Content-Type": "application/msgpack"}

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[NodeProcess]:
    nodes = ForumNodes(Path(tmp_path_factory.mktemp("hardening")))
    try:
        started = await nodes.start("hard", "--max-payload", "1024", "--max-batch", "10")
        async with aiohttp.ClientSession() as http:
            for payload in SEED:
                async with http.post(f"{started.url}/v1/tuples", data=payload) as response:
                    assert response.status == 201
        yield started
    finally:
        await nodes.aclose()


async def live(url: str) -> list[Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{url}/v1/tuples?limit=1000") as response,
    ):
        document = await response.json()
    tuples: list[Any] = document["tuples"]
    return tuples


async def refused(
    node: NodeProcess,
    method: str,
    path: str,
    status: int,
    error: str | None = None,
    *,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Send one request; check it is refused with ``status`` and the JSON error
    body, and that the live set did not change."""
    before = await live(node.url)
    async with (
        aiohttp.ClientSession(auto_decompress=False) as http,
        http.request(method, node.url + path, data=data, headers=headers or {}) as response,
    ):
        body = await response.read()
        assert response.status == status, body
        assert response.content_type == "application/json", body
    document: dict[str, Any] = json.loads(body)
    assert set(document) == {"error", "message"} and document["message"]
    if error is not None:
        assert document["error"] == error, document
    assert await live(node.url) == before
    return document


# -- 2. a compressed body must not bypass the limits -----------------------------------


BOMB = gzip.compress(b"j" * (8 * 1024 * 1024))  # 8 MiB of one byte: ~8 KiB compressed


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/v1/tuples", {}),
        ("/v1/tuples", JSON_TYPE),
        ("/v1/tuples/batch", MSGPACK_TYPE),
        ("/v1/ack/batch", JSON_TYPE),
        ("/v1/cluster/replication/push", MSGPACK_TYPE),
    ],
)
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "x-unknown"])
async def test_a_compressed_body_is_refused(
    node: NodeProcess, path: str, headers: dict[str, str], encoding: str
) -> None:
    document = await refused(
        node,
        "POST",
        path,
        415,
        "unsupported_encoding",
        data=BOMB if encoding == "gzip" else zlib.compress(b"j" * 4096),
        headers={**headers, "Content-Encoding": encoding},
    )
    assert "Content-Encoding" in document["message"]


async def test_a_transfer_coding_other_than_chunked_is_refused(node: NodeProcess) -> None:
    request = (
        b"POST /v1/tuples HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n"
    )
    before = await live(node.url)
    status, _, body = await raw_exchange(node, request)
    assert status == 415 and json.loads(body)["error"] == "unsupported_encoding"
    assert await live(node.url) == before


async def test_msgpack_extension_types_and_big_maps_are_refused(node: NodeProcess) -> None:
    for body in (
        msgpack.packb({"payload": msgpack.ExtType(5, b"job-x")}),
        msgpack.packb({"payload": b"job-x", **{f"k{i}": i for i in range(40)}}),
    ):
        await refused(node, "POST", "/v1/tuples", 400, "malformed_msgpack", data=body,
                      headers=MSGPACK_TYPE)  # fmt: skip


async def test_identity_encoding_is_a_plain_body(node: NodeProcess) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{node.url}/v1/tuples", data=b"zzz-identity", headers={"Content-Encoding": "identity"}
        ) as response,
    ):
        assert response.status == 201
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{node.url}/v1/take?prefix=zzz-identity") as response,
    ):
        assert await response.read() == b"zzz-identity"


# -- 4. one strict grammar for parameters ---------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/tuples?limit=%D9%A3",  # ARABIC-INDIC DIGIT THREE: str.isdigit() says yes
        "/v1/tuples?limit=%C2%B2",  # SUPERSCRIPT TWO: isdigit() yes, int() no (was a 500)
        "/v1/tuples?cursor=%EF%BC%91",  # FULLWIDTH DIGIT ONE
        "/v1/tuples?limit=+5",
        "/v1/tuples?limit=5%20",
        "/v1/tuples?limit=1_0",
        "/v1/tuples?cursor=" + "9" * 40,
        "/v1/take/batch?prefix=&limit=%D9%A3",
        "/v1/take?prefix=&wait=0_1",  # float() accepts underscores
        "/v1/take?prefix=&wait=1e1",
        "/v1/take?prefix=&wait=.5",
        "/v1/take?prefix=&wait=5.",
        "/v1/take?prefix=&wait=inf",
        "/v1/take?prefix=&wait=%D9%A3",
        "/v1/take?prefix=&wait=" + "1" * 40,
        "/v1/reserve?prefix=&lease=1_0",
        "/v1/reserve?prefix=&lease=0x10",
        "/v1/reserve/batch?prefix=&lease=%D9%A3",
    ],
)
async def test_numbers_outside_the_documented_grammar_are_refused(
    node: NodeProcess, path: str
) -> None:
    method = "GET" if path.startswith("/v1/tuples") else "POST"
    await refused(node, method, path, 400, "invalid_parameter")


@pytest.mark.parametrize("query", ["prefix=%FF", "prefix=job-%ED%A0%80", "wait=0&prefix=%C3"])
async def test_a_query_that_is_not_utf8_is_refused(node: NodeProcess, query: str) -> None:
    # It used to be decoded with U+FFFD in place of the bytes: another prefix.
    await refused(node, "POST", f"/v1/take?prefix=&{query}", 400, "invalid_parameter")


async def test_numbers_in_the_grammar_are_taken(node: NodeProcess) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{node.url}/v1/tuples?limit=0002&cursor=0") as response:
            assert response.status == 200
            assert len((await response.json())["tuples"]) == 2
        async with http.get(f"{node.url}/v1/read?prefix=none-&wait=0.05") as response:
            assert response.status == 204


# -- 4. bodies that used to crash the decoder ---------------------------------------


DEEP = 3000  # past Python's recursion limit, yet within /v1/tuples' 6 KiB body limit


@pytest.mark.parametrize(
    ("path", "body", "headers", "error"),
    [
        ("/v1/tuples", b"[" * DEEP + b"]" * DEEP, JSON_TYPE, "malformed_json"),
        ("/v1/tuples", b'{"payload": ' + b"[" * DEEP + b"]" * DEEP + b"}", JSON_TYPE,
         "malformed_json"),
        ("/v1/tuples/batch", b"[" * 100_000 + b"]" * 100_000, JSON_TYPE, "malformed_json"),
        ("/v1/tuples", b'{"payload": "\\ud800"}', JSON_TYPE, "invalid_field"),
        ("/v1/tuples", b"\x91" * DEEP + b"\xc0", MSGPACK_TYPE, "malformed_msgpack"),
        ("/v1/tuples/batch", b"\x91" * 100_000 + b"\xc0", MSGPACK_TYPE, "malformed_msgpack"),
        ("/v1/tuples", msgpack.packb({1: b"x"}), MSGPACK_TYPE, "malformed_msgpack"),
        ("/v1/tuples", msgpack.packb({b"payload": b"x"}, use_bin_type=True), MSGPACK_TYPE,
         "invalid_body"),
        ("/v1/tuples/batch", msgpack.packb({b"payloads": [b"x"]}, use_bin_type=True),
         MSGPACK_TYPE, "invalid_body"),
        ("/v1/tuples", b"\xdd\xff\xff\xff\xff", MSGPACK_TYPE, "malformed_msgpack"),
        ("/v1/tuples", b"\x81\xa7payload\xdb\xff\xff\xff\xff", MSGPACK_TYPE,
         "malformed_msgpack"),
    ],
    ids=["deep-json", "deep-json-payload", "deep-json-batch",
         "lone-surrogate", "deep-msgpack", "deep-msgpack-batch", "msgpack-int-key",
         "msgpack-bytes-key", "msgpack-bytes-key-batch", "msgpack-huge-array-header",
         "msgpack-huge-str-header"],
)  # fmt: skip
async def test_bodies_that_crashed_the_decoder_are_refused(
    node: NodeProcess, path: str, body: bytes, headers: dict[str, str], error: str
) -> None:
    await refused(node, "POST", path, 400, error, data=body, headers=headers)


async def test_a_lone_surrogate_in_a_batch_is_refused(node: NodeProcess) -> None:
    body = b'{"payloads": ["job-ok", "\\udfff"]}'
    await refused(node, "POST", "/v1/tuples/batch", 400, "invalid_field", data=body,
                  headers=JSON_TYPE)  # fmt: skip


# -- 4. a body on a route that takes none -------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/take"),
        ("POST", "/v1/take/batch"),
        ("POST", "/v1/reserve?prefix=&lease=5"),
        ("POST", "/v1/reserve/batch?prefix=&lease=5"),
        ("POST", "/v1/ack?id=hard-x:1"),
        ("POST", "/v1/release?id=hard-x:1"),
        ("GET", "/v1/read"),
        ("GET", "/v1/count"),
        ("GET", "/v1/tuples"),
        ("GET", "/v1/status"),
        ("GET", "/healthz"),
        ("GET", "/v1/openapi.json"),
        ("GET", "/metrics"),
    ],
)
@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
async def test_a_body_where_none_belongs_is_refused_before_anything_is_taken(
    node: NodeProcess, method: str, path: str, chunked: bool
) -> None:
    data: Any = b'{"prefix": "job-"}'
    if chunked:
        body = data

        async def chunks() -> AsyncIterator[bytes]:
            yield body

        data = chunks()
    await refused(node, method, path, 400, "unexpected_body", data=data, headers=JSON_TYPE)


# -- 6. an empty write ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"", {}),  # curl -d @missing-file sends Content-Length: 0
        (b"", {"Content-Type": "application/octet-stream"}),
        (b"", JSON_TYPE),
        (b'{"payload": ""}', JSON_TYPE),
        (b'{"payload_b64": ""}', JSON_TYPE),
        (msgpack.packb({"payload": b""}, use_bin_type=True), MSGPACK_TYPE),
    ],
)
async def test_an_empty_write_is_refused(
    node: NodeProcess, body: bytes, headers: dict[str, str]
) -> None:
    error = "empty_payload" if body == b"" and not headers.get("Content-Type", "").endswith(
        "json") else None  # fmt: skip
    await refused(node, "POST", "/v1/tuples", 400, error, data=body, headers=headers)


async def test_an_empty_item_in_a_batch_is_refused(node: NodeProcess) -> None:
    body = b'{"payloads": ["job-ok", ""]}'
    await refused(node, "POST", "/v1/tuples/batch", 400, "empty_payload", data=body,
                  headers=JSON_TYPE)  # fmt: skip


# -- 6. what the HTTP parser refuses is JSON too ---------------------------------------


async def raw_exchange(node: NodeProcess, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as bytes on a fresh socket; the status, headers and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(10):
            head = await reader.readuntil(b"\r\n\r\n")
            status_line, *lines = head.decode("latin-1").strip().split("\r\n")
            headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
    finally:
        writer.close()
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(
            b"X-Flood-%d: y\r\n" % i for i in range(500)) + b"\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 20_000 + b"\r\n\r\n",
        b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /v1/tuples HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"POST /v1/tuples HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"NOT HTTP AT ALL\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS ClientHello
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
    ],
    ids=["header-flood", "oversize-header", "oversize-line", "bad-length", "two-lengths",
         "bad-request-line", "tls-hello", "bad-header-name"],
)  # fmt: skip
async def test_parser_errors_answer_the_json_error_body(
    node: NodeProcess, request_bytes: bytes
) -> None:
    before = await live(node.url)
    status, headers, body = await raw_exchange(node, request_bytes)
    assert 400 <= status < 500, body
    assert headers["content-type"].startswith("application/json"), (headers, body)
    document = json.loads(body)
    assert set(document) == {"error", "message"} and document["message"]
    assert await live(node.url) == before


async def test_big_msgpack_maps_are_refused_wherever_they_are(node: NodeProcess) -> None:
    """Issue 11: msgspec decodes the bodies in one pass, and it has no map limit
    of its own. A map of repeated keys (which it would read as one key) and a
    big map in a field's place are still refused as msgpack reads them."""
    repeated = b"\xde\x00\x11" + b"\xa7payload\xc4\x05job-x" * 17
    nested = {f"k{i}": i for i in range(40)}
    for path, body in (
        ("/v1/tuples", repeated),
        ("/v1/tuples", msgpack.packb({"payload": nested})),
        ("/v1/tuples/batch", msgpack.packb({"payloads": [b"job-y", nested]})),
        ("/v1/ack/batch", msgpack.packb({"ids": [nested]})),
    ):
        await refused(node, "POST", path, 400, "malformed_msgpack", data=body,
                      headers=MSGPACK_TYPE)  # fmt: skip
