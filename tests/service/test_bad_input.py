"""Bad input, table-driven: each case gets its 4xx and JSON error body, and the
node's state is exactly as it was before (nothing half-applied, nothing taken).

One node serves the whole table (started once for this module) with small
limits so the limits are cheap to cross: token ``secret``, payloads up to 1 KiB,
batches up to 10 tuples.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import pytest
import pytest_asyncio

from tests.fixtures.nodes import ForumNodes, NodeProcess

TOKEN = "secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}
MSGPACK = {"Content-Type": "application/msgpack"}
SEED = [b"job-1", b"job-2", b"other-1"]


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    status: int
    error: str
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    authorized: bool = True
    chunked: bool = False
    #: What the message must say (when the case says).
    message: str = ""


def _mp(document: Any) -> bytes:
    return msgpack.packb(document, use_bin_type=True)


def _json(document: Any) -> bytes:
    return json.dumps(document).encode()


CASES = [
    # -- writing one tuple
    Case("json-malformed", "POST", "/v1/tuples", 400, "malformed_json", b'{"payload":', JSON),
    Case("json-not-utf8", "POST", "/v1/tuples", 400, "malformed_json", b'{"payload": "\xff"}',
         JSON),
    Case("json-not-object", "POST", "/v1/tuples", 400, "invalid_body", b'["job-x"]', JSON),
    Case("json-unknown-field", "POST", "/v1/tuples", 400, "unknown_field",
         _json({"payload": "job-x", "priorty": 1}), JSON),
    Case("json-both-fields", "POST", "/v1/tuples", 400, "missing_field",
         _json({"payload": "job-x", "payload_b64": "am9i"}), JSON),
    Case("json-no-field", "POST", "/v1/tuples", 400, "missing_field", b"{}", JSON),
    Case("json-payload-number", "POST", "/v1/tuples", 400, "invalid_field",
         _json({"payload": 5}), JSON),
    Case("json-payload-null", "POST", "/v1/tuples", 400, "invalid_field",
         _json({"payload": None}), JSON),
    Case("json-bad-base64", "POST", "/v1/tuples", 400, "invalid_field",
         _json({"payload_b64": "!!not base64!!"}), JSON),
    Case("json-payload-over-limit", "POST", "/v1/tuples", 413, "payload_too_large",
         _json({"payload": "j" * 1500}), JSON),
    Case("msgpack-malformed", "POST", "/v1/tuples", 400, "malformed_msgpack", b"\xc1", MSGPACK),
    Case("msgpack-trailing-bytes", "POST", "/v1/tuples", 400, "malformed_msgpack",
         _mp({"payload": b"job-x"}) + b"\x00", MSGPACK),
    Case("msgpack-not-map", "POST", "/v1/tuples", 400, "invalid_body", _mp([b"job-x"]), MSGPACK),
    Case("msgpack-payload-int", "POST", "/v1/tuples", 400, "invalid_field",
         _mp({"payload": 7}), MSGPACK),
    Case("raw-over-limit", "POST", "/v1/tuples", 413, "payload_too_large", b"j" * 1025),
    Case("raw-chunked-over-limit", "POST", "/v1/tuples", 413, "payload_too_large",
         b"j" * 4096, chunked=True),
    Case("write-query-param", "POST", "/v1/tuples?prefix=job-", 400, "unknown_parameter",
         b"job-x"),
    # -- batch writes
    Case("batch-raw", "POST", "/v1/tuples/batch", 415, "unsupported_media_type", b"job-x"),
    Case("batch-not-list", "POST", "/v1/tuples/batch", 400, "invalid_field",
         _mp({"payloads": b"job-x"}), MSGPACK),
    Case("batch-one-bad-item", "POST", "/v1/tuples/batch", 400, "invalid_field",
         _mp({"payloads": [b"job-a", b"job-b", 3]}), MSGPACK),
    Case("batch-one-oversize-item", "POST", "/v1/tuples/batch", 413, "payload_too_large",
         _mp({"payloads": [b"job-a", b"j" * 1025]}), MSGPACK),
    Case("batch-too-many", "POST", "/v1/tuples/batch", 413, "payload_too_large",
         _mp({"payloads": [b"job-a"] * 11}), MSGPACK),
    Case("batch-unknown-field", "POST", "/v1/tuples/batch", 400, "unknown_field",
         _mp({"payloads": [b"job-a"], "tll": 5}), MSGPACK),
    Case("batch-malformed", "POST", "/v1/tuples/batch", 400, "malformed_msgpack",
         _mp({"payloads": [b"job-a"]})[:-2], MSGPACK),
    Case("batch-json-bad-b64-item", "POST", "/v1/tuples/batch", 400, "invalid_field",
         _json({"payloads_b64": [base64.b64encode(b"ok").decode(), "%%%"]}), JSON),
    # -- take, read, count, list: the query string
    Case("take-misspelt-prefix", "POST", "/v1/take?prefx=job-", 400, "unknown_parameter"),
    Case("take-negative-wait", "POST", "/v1/take?prefix=job-&wait=-1", 400, "invalid_parameter"),
    Case("take-nan-wait", "POST", "/v1/take?prefix=job-&wait=nan", 400, "invalid_parameter"),
    Case("take-text-wait", "POST", "/v1/take?prefix=job-&wait=soon", 400, "invalid_parameter"),
    Case("take-two-prefixes", "POST", "/v1/take?prefix=job-&prefix_b64=am9i", 400,
         "invalid_parameter"),
    Case("take-repeated-prefix", "POST", "/v1/take?prefix=job-&prefix=other", 400,
         "invalid_parameter"),
    Case("take-bad-b64-prefix", "POST", "/v1/take?prefix_b64=%25%25", 400, "invalid_parameter"),
    Case("take-unacceptable", "POST", "/v1/take?prefix=job-", 406, "not_acceptable",
         headers={"Accept": "image/png"}),
    Case("take-batch-limit-zero", "POST", "/v1/take/batch?prefix=job-&limit=0", 400,
         "invalid_parameter"),
    Case("take-batch-limit-over-max", "POST", "/v1/take/batch?prefix=job-&limit=11", 400,
         "invalid_parameter"),
    Case("take-batch-limit-text", "POST", "/v1/take/batch?prefix=job-&limit=all", 400,
         "invalid_parameter"),
    Case("take-batch-unacceptable", "POST", "/v1/take/batch?prefix=job-", 406, "not_acceptable",
         headers={"Accept": "text/html"}),
    Case("reserve-no-lease", "POST", "/v1/reserve?prefix=job-", 400, "missing_parameter"),
    Case("reserve-zero-lease", "POST", "/v1/reserve?prefix=job-&lease=0", 400,
         "invalid_parameter"),
    Case("reserve-huge-lease", "POST", "/v1/reserve?prefix=job-&lease=86400", 400,
         "invalid_parameter"),
    Case("ack-no-id", "POST", "/v1/ack", 400, "missing_parameter"),
    Case("ack-bad-id", "POST", "/v1/ack?id=not-an-id", 400, "invalid_parameter"),
    Case("release-bad-origin", "POST", "/v1/release?id=bad%20origin:1", 400,
         "invalid_parameter"),
    Case("ack-batch-raw-body", "POST", "/v1/ack/batch", 415, "unsupported_media_type", b"a:1"),
    Case("ack-batch-not-ids", "POST", "/v1/ack/batch", 400, "invalid_field", b'{"ids": [1]}',
         JSON),
    Case("ack-batch-bad-id", "POST", "/v1/ack/batch", 400, "invalid_field",
         b'{"ids": ["no-seq"]}', JSON),
    Case("reserve-batch-no-lease", "POST", "/v1/reserve/batch?prefix=job-", 400,
         "missing_parameter"),
    # -- extending reservations
    Case("extend-raw-body", "POST", "/v1/reserve/extend", 415, "unsupported_media_type",
         b"a:1"),
    Case("extend-no-body", "POST", "/v1/reserve/extend", 400, "malformed_json", b"", JSON),
    Case("extend-no-lease", "POST", "/v1/reserve/extend", 400, "missing_field",
         _json({"ids": ["n1-a:1"]}), JSON),
    Case("extend-zero-lease", "POST", "/v1/reserve/extend", 400, "invalid_field",
         _json({"ids": ["n1-a:1"], "lease": 0}), JSON),
    Case("extend-huge-lease", "POST", "/v1/reserve/extend", 400, "invalid_field",
         _mp({"ids": ["n1-a:1"], "lease": 86400}), MSGPACK),
    Case("extend-text-lease", "POST", "/v1/reserve/extend", 400, "invalid_field",
         _json({"ids": [], "lease": "30"}), JSON),
    Case("extend-bool-lease", "POST", "/v1/reserve/extend", 400, "invalid_field",
         _json({"ids": [], "lease": True}), JSON),
    Case("extend-nan-lease", "POST", "/v1/reserve/extend", 400, "invalid_field",
         b'{"ids": [], "lease": NaN}', JSON),
    Case("extend-bad-id", "POST", "/v1/reserve/extend", 400, "invalid_field",
         _json({"ids": ["no-seq"], "lease": 5}), JSON),
    Case("extend-unknown-field", "POST", "/v1/reserve/extend", 400, "unknown_field",
         _json({"ids": [], "lease": 5, "owner": "w"}), JSON),
    Case("extend-too-many", "POST", "/v1/reserve/extend", 413, "payload_too_large",
         _json({"ids": [f"n1-a:{i}" for i in range(1, 12)], "lease": 5}), JSON),
    Case("extend-query", "POST", "/v1/reserve/extend?lease=5", 400, "unknown_parameter",
         _json({"ids": [], "lease": 5}), JSON),
    Case("extend-unacceptable", "POST", "/v1/reserve/extend", 406, "not_acceptable",
         _json({"ids": [], "lease": 5}), {**JSON, "Accept": "text/html"}),
    Case("read-unknown-param", "GET", "/v1/read?prefix=job-&remove=1", 400, "unknown_parameter"),
    Case("count-unknown-param", "GET", "/v1/count?pattern=job-", 400, "unknown_parameter"),
    Case("list-limit-over-max", "GET", "/v1/tuples?limit=1001", 400, "invalid_parameter"),
    Case("list-negative-cursor", "GET", "/v1/tuples?cursor=-1", 400, "invalid_parameter"),
    Case("status-unacceptable", "GET", "/v1/status", 406, "not_acceptable",
         headers={"Accept": "text/html"}),
    # -- auth, routes, methods
    Case("no-token", "POST", "/v1/tuples", 401, "unauthorized", b"job-x", authorized=False),
    Case("wrong-token", "POST", "/v1/take?prefix=job-", 401, "unauthorized",
         headers={"Authorization": "Bearer guess"}, authorized=False),
    Case("wrong-scheme", "POST", "/v1/take?prefix=job-", 401, "unauthorized",
         headers={"Authorization": f"Basic {TOKEN}"}, authorized=False),
    Case("metrics-no-token", "GET", "/metrics", 401, "unauthorized", authorized=False),
    Case("cluster-route-no-secret", "POST", "/v1/cluster/entries", 401, "unauthorized",
         b"\x90", authorized=False),
    Case("unknown-route", "GET", "/v1/queues", 404, "not_found"),
    Case("unknown-version", "POST", "/v2/take?prefix=job-", 404, "not_found"),
    Case("get-on-take", "GET", "/v1/take?prefix=job-", 405, "method_not_allowed"),
    Case("delete-tuples", "DELETE", "/v1/tuples", 405, "method_not_allowed"),
    *[
        # -- write options (issue 14): write_properties' words, whichever way they came
        Case("option-query-negative-delay", "POST", "/v1/tuples?delay=-1", 400,
             "invalid_parameter", b"job-x", message="delay must be seconds"),
        Case("option-query-garbage-delay", "POST", "/v1/tuples?delay=soon", 400,
             "invalid_parameter", b"job-x", message="delay must be seconds"),
        Case("option-query-nan-ttl", "POST", "/v1/tuples?ttl=nan", 400, "invalid_parameter",
             b"job-x", message="ttl must be seconds"),
        Case("option-query-zero-ttl", "POST", "/v1/tuples?ttl=0", 400, "invalid_option",
             b"job-x", message="ttl must be > 0 seconds"),
        Case("option-query-priority-range", "POST", "/v1/tuples?priority=128", 400,
             "invalid_option", b"job-x", message="priority must be -128 to 127"),
        Case("option-query-priority-fraction", "POST", "/v1/tuples?priority=1.5", 400,
             "invalid_parameter", b"job-x", message="priority must be a whole number"),
        Case("option-query-long-key", "POST", "/v1/tuples?key=" + "k" * 1025, 400,
             "invalid_option", b"job-x", message="key must be 1 to 1024 bytes"),
        Case("option-query-empty-key", "POST", "/v1/tuples?key=", 400, "invalid_option",
             b"job-x", message="key must be 1 to 1024 bytes"),
        Case("option-query-key-and-b64", "POST", "/v1/tuples?key=a&key_b64=YQ", 400,
             "invalid_parameter", b"job-x", message="give key or key_b64"),
        Case("option-query-dedup-no-key", "POST", "/v1/tuples?dedup_window=5", 400,
             "invalid_option", b"job-x", message="dedup_window needs a key"),
        Case("option-query-wait-over-max", "POST", "/v1/tuples?wait=61", 400, "invalid_option",
             b"job-x", message="wait must be 0 to 60 s"),
        Case("option-json-negative-delay", "POST", "/v1/tuples", 400, "invalid_option",
             _json({"payload": "job-x", "delay": -1}), JSON, message="delay must be >= 0"),
        Case("option-json-nan-ttl", "POST", "/v1/tuples", 400, "invalid_option",
             b'{"payload": "job-x", "ttl": NaN}', JSON, message="ttl is a number of seconds"),
        Case("option-json-priority-range", "POST", "/v1/tuples", 400, "invalid_option",
             _json({"payload": "job-x", "priority": -129}), JSON,
             message="priority must be -128 to 127"),
        Case("option-json-priority-fraction", "POST", "/v1/tuples", 400, "invalid_field",
             _json({"payload": "job-x", "priority": 1.5}), JSON, message="priority"),
        Case("option-json-priority-text", "POST", "/v1/tuples", 400, "invalid_field",
             _json({"payload": "job-x", "priority": "high"}), JSON, message="priority"),
        Case("option-json-empty-key", "POST", "/v1/tuples", 400, "invalid_option",
             _json({"payload": "job-x", "key": ""}), JSON, message="key must be 1 to 1024"),
        Case("option-json-bad-key-b64", "POST", "/v1/tuples", 400, "invalid_field",
             _json({"payload": "job-x", "key_b64": "!!"}), JSON, message="key_b64"),
        Case("option-json-delay-and-not-before", "POST", "/v1/tuples", 400, "invalid_option",
             _json({"payload": "job-x", "delay": 1, "not_before": 1}), JSON,
             message="give delay or not_before, not both"),
        Case("option-json-not-before-far", "POST", "/v1/tuples", 400, "invalid_option",
             _json({"payload": "job-x", "not_before": 9e9}), JSON,
             message="more than ten years ahead"),
        Case("option-json-in-query-and-body", "POST", "/v1/tuples?ttl=5", 400,
             "invalid_option", _json({"payload": "job-x", "ttl": 5}), JSON,
             message="give ttl in the query or the body"),
        Case("option-msgpack-inf-ttl", "POST", "/v1/tuples", 400, "invalid_option",
             _mp({"payload": b"job-x", "ttl": float("inf")}), MSGPACK,
             message="ttl is a number of seconds"),
        Case("option-msgpack-dedup-no-key", "POST", "/v1/tuples", 400, "invalid_option",
             _mp({"payload": b"job-x", "dedup_window": 5.0}), MSGPACK,
             message="dedup_window needs a key"),
        Case("option-batch-key-of-two", "POST", "/v1/tuples/batch", 400, "invalid_option",
             _mp({"payloads": [b"job-x", b"job-y"], "key": b"k"}), MSGPACK,
             message="a key names one write"),
        Case("option-batch-negative-delay", "POST", "/v1/tuples/batch", 400, "invalid_option",
             _json({"payloads": ["job-x"], "delay": -0.5}), JSON, message="delay must be >= 0"),
        Case("option-batch-in-query", "POST", "/v1/tuples/batch?ttl=5", 400,
             "unknown_parameter", _json({"payloads": ["job-x"]}), JSON),
        # -- pausing a prefix
        Case("pause-no-token", "POST", "/v1/prefixes/job-/pause", 401, "unauthorized",
             authorized=False),
        Case("pause-unknown-param", "POST", "/v1/prefixes/job-/pause?all=1", 400,
             "unknown_parameter"),
        Case("pause-body", "POST", "/v1/prefixes/job-/pause", 400, "unexpected_body",
             b"job-"),
        Case("pause-empty-prefix", "POST", "/v1/prefixes//pause", 404, "not_found"),
        Case("resume-get", "GET", "/v1/prefixes/job-/resume", 405, "method_not_allowed"),
        Case("prefixes-no-token", "GET", "/v1/prefixes", 401, "unauthorized",
             authorized=False),
        Case("prefixes-empty-separator", "GET", "/v1/prefixes?separator=", 400,
             "invalid_parameter", message="separator"),
        Case("prefixes-nul-separator", "GET", "/v1/prefixes?separator=%00", 400,
             "invalid_parameter", message="separator"),
    ],
]  # fmt: skip


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[NodeProcess]:
    nodes = ForumNodes(Path(tmp_path_factory.mktemp("bad-input")))
    try:
        started = await nodes.start(
            "bad",
            "--max-payload", "1024",
            "--max-batch", "10",
            "--cluster-secret", "cluster-s3cret",
            token=TOKEN,
        )  # fmt: skip
        async with aiohttp.ClientSession(headers=AUTH) as http:
            for payload in SEED:
                async with http.post(f"{started.url}/v1/tuples", data=payload) as response:
                    assert response.status == 201
        yield started
    finally:
        await nodes.aclose()


async def snapshot(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    """What must not change: every live tuple (ids and bytes) and the counters."""
    async with http.get(f"{url}/v1/tuples?limit=1000", headers=AUTH) as response:
        live = await response.json()
    async with http.get(f"{url}/v1/status", headers=AUTH) as response:
        status = await response.json()
    counters = {k: status[k] for k in ("entries", "live", "writes", "takes", "strand_bytes")}
    return {"live": live["tuples"], **counters}


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 30
    assert len({case.name for case in CASES}) == len(CASES)


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(body), 512):
        yield body[i : i + 512]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_bad_input_is_refused_and_changes_nothing(node: NodeProcess, case: Case) -> None:
    async with aiohttp.ClientSession() as http:
        before = await snapshot(http, node.url)
        headers = {**(AUTH if case.authorized else {}), **case.headers}
        data: Any = _chunks(case.body) if case.chunked and case.body else case.body
        async with http.request(
            case.method, node.url + case.path, data=data, headers=headers
        ) as response:
            status = response.status
            content_type = response.content_type
            body = await response.read()
        assert status == case.status, body
        assert content_type == "application/json"
        document = json.loads(body)
        assert set(document) == {"error", "message"}
        assert document["error"] == case.error
        assert isinstance(document["message"], str) and document["message"]
        assert case.message in document["message"]
        assert "\n" not in document["message"]
        assert await snapshot(http, node.url) == before
        async with http.get(f"{node.url}/healthz") as response:
            assert response.status == 200
