"""A property-based fuzzer over every route of a real ``forum serve``.

Hypothesis builds whole requests: a route (the documented ones, the cluster
ones, unknown ones), query parameters with odd names and odd values (Unicode
digits, ``0_1``, ``1e9``, huge numbers, bytes that are not UTF-8), headers
(content types, ``Content-Encoding``, ``Accept``, tokens) and bodies (none,
empty, random bytes, deep nesting, lone surrogates, msgpack with odd keys,
compressed, chunked, on routes that take none). The rules, for every answer:

* it is 2xx or 4xx, never 5xx;
* a request that breaks a documented rule is a 4xx: a body on a route that
  takes none, a ``Content-Encoding``, a number outside the grammar, an
  unknown parameter, an empty write;
* a 4xx carries the JSON error body ``{"error", "message"}``;
* a refused request leaves the live set (``GET /v1/tuples``) as it was;
* the node answers ``/healthz`` at the end.

Requests go out through ``http.client``, which sends bytes as given. The node
is preloaded with a few tuples; valid leases are long (3600 s) so that no
reservation runs out between two snapshots.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import http.client
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import msgpack
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from forum.node.api.operations import OPERATIONS
from tests.fixtures.nodes import ForumNodes, NodeProcess

TOKEN = "fuzz"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = int(os.environ.get("FORUM_FUZZ_EXAMPLES", "600"))
SEED = int(os.environ.get("FORUM_FUZZ_SEED", "0")) or None
INTEGER = re.compile(r"[0-9]{1,19}")
SECONDS = re.compile(r"[0-9]{1,10}(\.[0-9]{1,9})?")
PRELOAD = [b"job-1", b"job-2", b"other-1", b"\xff\x00bin"]

pytestmark = pytest.mark.slow

#: Every operation of the node (from the one table the router serves, so a
#: new route is fuzzed too), the cluster routes, and routes that are not there.
ROUTES = [
    *((op.method, op.path) for op in OPERATIONS),
    ("POST", "/v1/cluster/replication/push"),
    ("POST", "/v1/cluster/replication/pull"),
    ("GET", "/v1/cluster/replication/members"),
    ("GET", "/v1/nothing"),
    ("DELETE", "/v1/tuples"),
    ("PUT", "/v1/take"),
]
PARAMETERS = ["prefix", "prefix_b64", "wait", "lease", "limit", "cursor", "id", "prefx", "x"]

odd_numbers = st.sampled_from(
    [
        "0", "1", "3", "0002", "10", "1000", "1001", "0.01", "0.5", "3600", "3601",
        "-1", "+1", "1_0", "0_1", "1e3", "1E3", ".5", "5.", "0x10", "inf", "nan", "NaN",
        "\u0663", "\u00b2", "\uff11", "\u0967", " 1", "1 ", "9" * 19, "9" * 40,
        "1." + "0" * 20, "", "true", "null",
    ]
)  # fmt: skip
valid_ids = st.sampled_from(["fuzz-abc:1", "fuzz-x:99999999999999999999", "a:0", "a:b", ":1"])
values = st.one_of(
    odd_numbers,
    valid_ids,
    st.sampled_from(["job-", "other", "am9i", "_w", "%%", "=", "\x00"]),
    st.text(max_size=30),
    # Lone surrogates: sent as their (invalid) UTF-8 bytes.
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3),
)


def deep(depth: int, kind: str) -> bytes:
    if kind == "json":
        return b"[" * depth + b"]" * depth
    return b"\x91" * depth + b"\xc0"


json_documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["payload", "payload_b64", "payloads", "payloads_b64", "ids", "x"]),
            children,
            max_size=3,
        )
    ),
    max_leaves=10,
)
msgpack_documents = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.binary(max_size=20)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(["payload", "payloads", "ids", "v", "kind", b"payload", 1]),
        children,
        max_size=3,
    ),
    max_leaves=10,
)  # fmt: skip
bodies = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=200),
    json_documents.map(lambda d: json.dumps(d).encode()),
    msgpack_documents.map(lambda d: msgpack.packb(d, use_bin_type=True)),
    st.sampled_from(
        [
            b'{"payload": "\\ud800"}',
            b'{"payloads": ["job-a", "\\udfff"]}',
            b'{"payload": ""}',
            b'{"payloads_b64": ["' + base64.b64encode(b"job-b").decode().encode() + b'", ""]}',
            b'{"ids": ["fuzz-abc:1"]}',
            b'{"payload": 1e999}',
            deep(3000, "json"),
            deep(3000, "msgpack"),
            gzip.compress(b"job-" * 1000),
            b"\xdd\xff\xff\xff\xff",
        ]
    ),
)
content_types = st.sampled_from(
    [None, "application/json", "application/msgpack", "application/x-msgpack",
     "application/octet-stream", "text/plain", "application/json; charset=latin-1",
     "multipart/form-data; boundary=x", "nonsense"]
)  # fmt: skip
encodings = st.sampled_from([None, None, "identity", "gzip", "deflate", "br", "x-zip"])
accepts = st.sampled_from(
    [None, "*/*", "application/json", "application/msgpack", "application/octet-stream",
     "text/plain", "image/png", "application/json;q=0, */*;q=0.1", "text/*", ";;;"]
)  # fmt: skip
auths = st.sampled_from(["right", "right", "right", "none", "wrong", "basic"])


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    body: bytes | None
    headers: tuple[tuple[str, str], ...]
    chunked: bool

    def target(self) -> str:
        if not self.query:
            return self.path
        pairs = (
            f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'), safe='')}"
            for k, v in self.query
        )
        return f"{self.path}?{'&'.join(pairs)}"


@st.composite
def requests(draw: st.DrawFn) -> Request:
    method, path = draw(st.sampled_from(ROUTES))
    query = draw(st.lists(st.tuples(st.sampled_from(PARAMETERS), values), max_size=4))
    # A valid lease is long: no reservation may run out between two snapshots.
    query = [(k, "3600") if k == "lease" and draw(st.booleans()) else (k, v) for k, v in query]
    headers: dict[str, str] = {}
    auth = draw(auths)
    if auth == "right":
        headers.update(AUTH)
    elif auth == "wrong":
        headers["Authorization"] = "Bearer guess"
    elif auth == "basic":
        headers["Authorization"] = f"Basic {TOKEN}"
    for name, strategy in (
        ("Content-Type", content_types),
        ("Content-Encoding", encodings),
        ("Accept", accepts),
    ):
        value = draw(strategy)
        if value is not None:
            headers[name] = value
    body = draw(bodies)
    chunked = body is not None and draw(st.booleans())
    return Request(method, path, tuple(query), body, tuple(headers.items()), chunked)


BODY_ROUTES = {
    ("POST", "/v1/tuples"),
    ("POST", "/v1/tuples/batch"),
    ("POST", "/v1/ack/batch"),
    ("POST", "/v1/reserve/extend"),
}
NUMBERS = {"wait": SECONDS, "lease": SECONDS, "limit": INTEGER, "cursor": INTEGER}


def broken_rule(request: Request) -> str | None:
    """The documented rule ``request`` plainly breaks, if any (the cluster
    routes are replication's: only the encoding rule is checked there)."""
    headers = dict(request.headers)
    has_body = bool(request.body) or request.chunked
    route = (request.method, request.path)
    if headers.get("Content-Encoding", "identity") != "identity":
        return "a Content-Encoding"
    if route not in ROUTES or not request.path.startswith("/v1/"):
        return None
    if request.path.startswith("/v1/cluster/"):
        return None
    if headers.get("Authorization") != AUTH["Authorization"]:
        return "no token"
    if has_body and route not in BODY_ROUTES:
        return "a body on a route that takes none"
    for name, value in request.query:
        if name in ("prefx", "x"):
            return f"an unknown parameter {name}"
        if name in NUMBERS and not NUMBERS[name].fullmatch(value):
            return f"{name}={value!r} is outside the grammar"
    if route == ("POST", "/v1/tuples") and not has_body:
        return "an empty write"
    return None


def send(node: NodeProcess, request: Request) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", node.port, timeout=10)
    try:
        body: Any = request.body
        if request.chunked and body is not None:
            body = iter([body[: len(body) // 2], body[len(body) // 2 :]])
        connection.request(
            request.method,
            request.target(),
            body=body,
            headers=dict(request.headers),
            encode_chunked=request.chunked,
        )
        response = connection.getresponse()
        content_type = response.getheader("Content-Type", "")
        if content_type.startswith("text/event-stream"):
            # An accepted watch streams until the node stops (its heartbeats
            # keep the socket's timeout from ending the read): the status and
            # headers are its answer; closing the connection ends the watch.
            return response.status, content_type, b""
        return response.status, content_type, response.read()
    finally:
        connection.close()


def live(node: NodeProcess) -> Any:
    status, _, body = send(
        node, Request("GET", "/v1/tuples", (("limit", "1000"),), None, tuple(AUTH.items()), False)
    )
    assert status == 200, body
    return json.loads(body)["tuples"]


def fuzz(node: NodeProcess) -> None:
    @seed(SEED) if SEED is not None else (lambda f: f)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(request=requests())
    def check(request: Request) -> None:
        before = live(node)
        status, content_type, body = send(node, request)
        assert status < 500, (status, body)
        rule = broken_rule(request)
        if rule is not None:
            assert 400 <= status < 500, f"{rule}, yet {status}: {body[:200]!r}"
        if status >= 400:
            assert content_type.startswith("application/json"), (status, content_type, body)
            document = json.loads(body)
            assert set(document) == {"error", "message"}, document
            assert isinstance(document["message"], str) and document["message"]
            assert live(node) == before, "a refused request changed the live set"

    check()


def _preload(node: NodeProcess) -> Iterator[None]:
    for payload in PRELOAD:
        status, _, body = send(
            node,
            Request(
                "POST",
                "/v1/tuples",
                (),
                payload,
                (*AUTH.items(), ("Content-Type", "application/octet-stream")),
                False,
            ),
        )
        assert status == 201, body
        yield


async def test_no_request_bricks_empties_or_crashes_the_node(forum_nodes: ForumNodes) -> None:
    print(f"fuzz seed {SEED} (FORUM_FUZZ_SEED; 0 is random), {EXAMPLES} examples")
    node = await forum_nodes.start(
        "fuzz", "--max-wait", "0.05", "--max-payload", "4096", "--fsync", "never", token=TOKEN
    )
    await asyncio.to_thread(lambda: list(_preload(node)))
    await asyncio.to_thread(fuzz, node)
    status, _, _ = await asyncio.to_thread(
        send, node, Request("GET", "/healthz", (), None, (), False)
    )
    assert status == 200 and node.running
